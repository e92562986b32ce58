"""Overwriting a named array file atomically: a shadow copy renamed over it.

``update_`` and a set-item on a named file write every element into a shadow file
next to it and rename the shadow over the name once complete and synced, so a
process killed at any point leaves the file entirely old or entirely new. An
interrupt (Ctrl-C) leaves the handle agreeing with the name: on the new file when
the rename happened, on the old one otherwise.
"""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Iterator
from typing import Any

from . import _named_handles as named
from ._debris import install_sigterm_cleanup, partial_name
from ._file_ops import allocate, close_and_unlink, fsync_dir, unlink_quietly
from ._header import HEADER_BYTES, encode_header

__all__ = ["rewriting"]


@contextlib.contextmanager
def rewriting(file: Any) -> Iterator[Any]:
    """Overwrite every element of a named file atomically: entirely old or new.

    Inside the block, writes go to a shadow copy (a ``.partial-`` file next to
    this one, not filled from it: the block must write every element); at the
    end the shadow is synced and renamed over the file, so a process killed
    at any point leaves the file as it was before or as it is after, never
    half of each. An exception discards the shadow. Scratch files and files not
    yet committed are written in place (nobody can open them after a kill).
    Other `PagedFile` objects opened on the same path read the new contents from
    then on (`_named_handles`); what they were to compute lazily is computed from
    the old contents first.
    """
    if file.is_scratch or file._final_path is not None:
        yield file
        return
    target = os.path.realpath(file.path)  # replace a symlink's target, not the link
    shadow = partial_name(target)
    install_sigterm_cleanup()
    old_fd = file._fd
    key = named.key_of(target)
    fd = -1
    try:
        try:
            fd = os.open(shadow, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        except PermissionError as e:
            raise PermissionError(
                e.errno,
                f"Overwriting {file.path!r} needs a temporary file next to it (so that it "
                f"is replaced atomically), but {os.path.dirname(target)!r} is not "
                "writable. Make the directory writable, or save a copy elsewhere.",
            ) from None
        os.fchmod(fd, os.fstat(old_fd).st_mode & 0o7777)
        size = HEADER_BYTES + math.prod(file.grid) * file.page_bytes
        allocate(fd, size, shadow)
        os.pwrite(fd, encode_header(file.shape, file.dtype, file.page_shape), 0)
        file._own_fd, file._map = fd, None
        yield file
        os.fsync(fd)
        named.before_replace(file, key)
        # bumped before the rename as well as after: an interrupt between the two
        # still sends the other handles to the name (reopening the old file, had the
        # rename not happened, is never wrong)
        named.replaced(key)
        os.replace(shadow, target)
        fsync_dir(target)
    except BaseException:
        # An interrupt after the rename (in fsync_dir, or just after os.replace
        # returned) must not put the handle back on the old file: whether the
        # rename happened is read off the name itself.
        if fd >= 0 and named.names(target, fd):
            file._adopt(fd)
        else:
            file._own_fd, file._map = old_fd, None
            if fd >= 0:
                close_and_unlink(fd, shadow, False)
            else:
                unlink_quietly(shadow)  # made, but interrupted before its descriptor was kept
        raise
    else:
        file._adopt(fd)
    finally:  # the other handles reopen the name on next use
        file._generation = named.replaced(key)
