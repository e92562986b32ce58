"""Durable file operations behind atomic writes: allocating a file's bytes up front
(with an error naming the directory on a full disk), syncing a directory after a
rename, and closing and removing a file quietly.
"""

from __future__ import annotations

import contextlib
import errno
import os

__all__ = ["Closer", "allocate", "close_and_unlink", "fsync_dir", "unlink_quietly"]


def unlink_quietly(path: str) -> None:
    """Remove ``path``; a file already gone is no error (nor one never made: some
    systems, gVisor's, refuse even to look for it in a directory the user cannot
    write, where Linux says it is not there)."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    except PermissionError as refused:
        try:
            os.lstat(path)
        except FileNotFoundError:
            return
        except OSError:  # whether it is there cannot be told: the removal's error stands
            raise refused from None
        raise


def fsync_dir(path: str) -> None:
    """Make a rename into ``path``'s directory durable (a no-op where unsupported)."""
    try:
        fd = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY)
    except OSError:  # pragma: no cover - platforms without directory fds
        return
    try:
        with contextlib.suppress(OSError):
            os.fsync(fd)
    finally:
        os.close(fd)


def close_and_unlink(fd: int, path: str, keep: bool) -> None:
    """Close ``fd`` and, unless ``keep``, remove ``path``, ignoring what is gone."""
    with contextlib.suppress(OSError):
        os.close(fd)
    if not keep:
        unlink_quietly(path)


class Closer:
    """What a file object closes and removes when it is collected (its finalizer
    calls this): ``state = (fd, names to remove)``. The state is replaced in one
    assignment when the object takes another descriptor or name, so an interrupt
    at any line leaves exactly one cleanup, never none and never two (a second
    close of a descriptor number could close another file that reused it)."""

    def __init__(self, fd: int, remove: tuple[str, ...]) -> None:
        self.state = (fd, remove)

    def __call__(self) -> None:
        (fd, remove), self.state = self.state, (-1, ())
        if fd >= 0:
            with contextlib.suppress(OSError):
                os.close(fd)
        for path in remove:
            unlink_quietly(path)


def allocate(fd: int, size: int, path: str) -> None:
    """Reserve ``size`` bytes for the file ``fd`` (at ``path``), zero-filled."""
    try:
        if hasattr(os, "posix_fallocate"):
            os.posix_fallocate(fd, 0, size)
        else:  # pragma: no cover - non-Linux
            os.ftruncate(fd, size)
    except OSError as e:
        if e.errno in (errno.ENOSPC, errno.EDQUOT):
            raise OSError(
                e.errno,
                f"Not enough disk space for a {size / 2**20:.1f} MiB array in "
                f"{os.path.dirname(path)!r}. Free space there or choose another scratch "
                "directory with gradpipe.ooc.set_scratch_dir / $GRADPIPE_SCRATCH.",
            ) from e
        if e.errno in (errno.EOPNOTSUPP, errno.EINVAL):
            os.ftruncate(fd, size)
            return
        raise
