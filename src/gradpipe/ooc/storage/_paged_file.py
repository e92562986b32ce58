"""Paged array files: the on-disk format behind every `DiskArray`.

A file is a 4096-byte header followed by pages. The array is cut into a grid of
pages of one ``page_shape``; each page is stored whole (edge pages padded with
zeros) in C order of the page grid, so a tile that equals a page is one contiguous
read. Other regions move as row pieces straight between the file and the array
(`_pieces`): each byte once, with no staging page and no read-modify-write.

The header (`_header`) gives the format version, shape, dtype and page shape.

Every file is written under a temporary name in its final directory and renamed
into place only once complete (`PagedFile.commit`), so an interrupted write — a
full disk, an exception part-way, a killed process — never leaves a partial array
under a name anyone opens. Overwriting a named file (``update_``) goes through a
shadow copy renamed over it (`PagedFile.rewriting`), so after a kill the file is
entirely old or entirely new. Scratch files live in one directory per process (see
`_scratch`), are removed when their array is garbage collected, and the
directory itself is removed at interpreter exit; what a killed process leaves
behind is swept by the next one (`_debris`).
"""

from __future__ import annotations

import contextlib
import errno
import math
import os
import threading
import uuid
import weakref
from collections.abc import Sequence
from contextlib import AbstractContextManager

import numpy as np
from numpy.typing import DTypeLike

from . import _named_handles as named
from ._debris import install_sigterm_cleanup, partial_name, sweep_partials
from ._file_map import FileMap
from ._file_ops import Closer, allocate, fsync_dir, unlink_quietly
from ._header import FORMAT_VERSION, HEADER_BYTES, decode_header, encode_header
from ._iostats import record_read, record_write
from ._named_handles import NamedHandle
from ._page_layout import PageLayout, Region, page_grid
from ._pieces import pread_all, pwrite_all, read_pieces, write_pieces
from ._rewriting import rewriting
from ._scratch import get_scratch_dir

__all__ = ["FORMAT_VERSION", "PagedFile", "Region", "partial_name"]

SUFFIX = ".gpa"

_STAGING_BYTES = 8 * 2**20  # the most `write` copies at once to make data contiguous


class PagedFile(PageLayout, NamedHandle):
    """One paged array file, opened for reading and writing at page granularity.

    Create with `PagedFile.create` (a new, zero-filled, not yet visible file) or
    `PagedFile.open` (an existing, committed file). Scratch files delete themselves
    when the object is garbage collected.
    """

    _scratch: bool  # set by the constructors; `is_scratch` reads False where unset

    def __init__(
        self,
        path: str,
        shape: Sequence[int],
        dtype: DTypeLike,
        page_shape: Sequence[int],
        *,
        fd: int,
        final_path: str | None,
    ) -> None:
        self.path = path
        self.shape = tuple(int(n) for n in shape)
        self.dtype = np.dtype(dtype)
        self._paged(tuple(int(p) for p in page_shape))
        self._own_fd = fd
        self._final_path = final_path  # where `commit` renames to; None once visible
        self.writable = True
        self.on_disk = True  # False for a file held in memory: its I/O is not counted
        self._map: FileMap | None = None
        self._closer = Closer(fd, (path,))  # until committed, removed when collected
        self._finalizer = weakref.finalize(self, self._closer)
        self._key: str | None = None  # a named file's key in `_named_handles`
        self._generation = 0
        self._follow_lock = threading.Lock()

    # -- construction ------------------------------------------------------

    @classmethod
    def create(
        cls,
        shape: Sequence[int],
        dtype: DTypeLike,
        page_shape: Sequence[int],
        path: str | os.PathLike[str] | None = None,
        *,
        in_memory: bool = False,
    ) -> PagedFile:
        """A new zero-filled file, invisible until `commit`.

        With ``path=None`` the file is a scratch file, deleted when collected;
        ``in_memory=True`` keeps a scratch file in memory (an anonymous file of
        the operating system's, `os.memfd_create`), read and written as any other
        but costing no disk I/O (`_held_results` decides which). Raises `OSError`
        naming the directory and the bytes needed when the disk is full; nothing is
        left behind in that case.
        """
        shape = tuple(int(n) for n in shape)
        page_shape = tuple(max(1, min(int(p), max(n, 1))) for p, n in zip(page_shape, shape))
        if len(page_shape) != len(shape):
            raise ValueError(f"page_shape {page_shape} must have one entry per axis of {shape}.")
        dtype = np.dtype(dtype)
        if in_memory and path is None and hasattr(os, "memfd_create"):
            with contextlib.suppress(OSError):  # no memory file to be had: on disk
                return cls._in_memory(shape, dtype, page_shape)
        scratch = path is None
        final = str(get_scratch_dir() / f"{uuid.uuid4().hex}{SUFFIX}") if scratch else str(path)
        if not scratch:
            sweep_partials(final)  # left by a killed writer of the same name
            install_sigterm_cleanup()
        tmp = partial_name(final)
        header = encode_header(shape, dtype, page_shape)
        n_pages = math.prod(page_grid(shape, page_shape))
        size = HEADER_BYTES + n_pages * math.prod(page_shape) * dtype.itemsize
        fd = -1
        try:
            try:
                fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
            except OSError as e:
                if not isinstance(e, PermissionError) and e.errno != errno.EROFS:
                    raise
                where = "set another (ooc.set_scratch_dir)" if scratch else "give a path elsewhere"
                raise PermissionError(
                    e.errno,
                    f"Cannot write {final!r}: {os.path.dirname(os.path.abspath(final))!r} is "
                    "not writable (the array is written next to its name, then renamed). "
                    f"Make the directory writable, or {where}.",
                    e.filename,
                ) from e
            allocate(fd, size, tmp)
            os.pwrite(fd, header, 0)
            f = cls(tmp, shape, dtype, page_shape, fd=fd, final_path=final)
        except BaseException:
            if fd >= 0:
                os.close(fd)
            unlink_quietly(tmp)
            raise
        f._scratch = scratch  # (a user file never committed is removed too)
        return f

    @classmethod
    def _in_memory(
        cls, shape: tuple[int, ...], dtype: np.dtype, page_shape: tuple[int, ...]
    ) -> PagedFile:
        name = f"gradpipe-{uuid.uuid4().hex[:8]}"
        fd = os.memfd_create(name, os.MFD_CLOEXEC)
        try:
            allocate(
                fd,
                HEADER_BYTES
                + math.prod(page_grid(shape, page_shape)) * math.prod(page_shape) * dtype.itemsize,
                "memory",
            )
            os.pwrite(fd, encode_header(shape, dtype, page_shape), 0)
        except BaseException:
            os.close(fd)
            raise
        f = cls(f"<memory {name}>", shape, dtype, page_shape, fd=fd, final_path=None)
        f._scratch, f.on_disk = True, False
        f._closer.state = (fd, ())  # nothing to unlink: the memory goes with the descriptor
        return f

    @classmethod
    def open(cls, path: str | os.PathLike[str], *, writable: bool = False) -> PagedFile:
        """Open a committed file, checking its header and its length."""
        path = str(path)
        sweep_partials(path)
        if os.path.isdir(path):
            raise IsADirectoryError(
                errno.EISDIR, f"{path!r} is a directory, not a gradpipe array file.", path
            )
        try:
            fd = os.open(path, os.O_RDWR if writable else os.O_RDONLY)
        except FileNotFoundError:
            raise FileNotFoundError(f"No gradpipe array file at {path!r}.") from None
        except PermissionError as e:
            how = "writing" if writable else "reading"
            raise PermissionError(e.errno, f"{path!r} cannot be opened for {how}.", path) from None
        try:
            shape, dtype, page_shape = decode_header(os.pread(fd, HEADER_BYTES, 0), path)
            n_pages = math.prod(page_grid(shape, page_shape))
            expected = HEADER_BYTES + n_pages * math.prod(page_shape) * dtype.itemsize
            actual = os.fstat(fd).st_size
            if actual < expected:
                raise ValueError(
                    f"{path!r} is truncated: its header promises {expected} bytes but the "
                    f"file has {actual}. The file is damaged; recreate it."
                )
        except BaseException:
            os.close(fd)
            raise
        f = cls(path, shape, dtype, page_shape, fd=fd, final_path=None)
        f._scratch = False
        f.writable = writable
        f._closer.state = (fd, ())
        f._register()
        return f

    def commit(self) -> PagedFile:
        """Make the file visible under its final name (atomic rename)."""
        if self._final_path is None:
            return self
        if self.is_scratch:  # removed under either name, should the rename be interrupted
            self._closer.state = (self._own_fd, (self.path, self._final_path))
            os.replace(self.path, self._final_path)
        else:  # a named file: its other handles follow (`_named_handles`)
            key = named.key_of(self._final_path)
            named.before_replace(self, key)
            os.fsync(self._own_fd)
            named.replaced(key)  # before the rename too: see `_rewriting`
            try:
                os.replace(self.path, self._final_path)
            finally:
                self._generation = named.replaced(key)
            fsync_dir(self._final_path)
        self.path = self._final_path
        self._final_path = None
        self._adopt(self._own_fd, keep=not self.is_scratch)
        if not self.is_scratch:
            self._register()
        return self

    def rewriting(self) -> AbstractContextManager[PagedFile]:
        """Overwrite every element of a named file atomically: entirely old or new
        (see `_rewriting.rewriting`)."""
        return rewriting(self)

    def discard(self) -> None:
        """Close and remove the file now (used when a write fails part-way)."""
        self._map = None
        self._closer.state = (self._own_fd, (self.path,) if self.on_disk else ())
        self._finalizer()

    def _paged(self, page_shape: tuple[int, ...]) -> None:
        """Read and write in pages of ``page_shape`` (set anew when a handle follows
        its name to a file paged otherwise)."""
        self.page_shape = page_shape
        self.grid = page_grid(self.shape, self.page_shape)
        self.page_bytes = math.prod(self.page_shape) * self.dtype.itemsize

    @property
    def identity(self) -> str | None:
        """What names this file for every handle of it (None: a scratch file)."""
        return self._key

    @property
    def is_scratch(self) -> bool:
        return getattr(self, "_scratch", False)

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.dtype.itemsize

    # -- page I/O ----------------------------------------------------------

    def read(self, region: Region | None = None, out: np.ndarray | None = None) -> np.ndarray:
        """The values in ``region`` (a tuple of unit-step slices), in ``out`` when
        given (a C-contiguous array of the region's shape and the file's dtype),
        else in a new array."""
        # first: a handle whose name was replaced follows it, and the new file's
        # pages, before any offset is computed
        fd = self._fd
        region = self.normalize(region)
        shape = tuple(s.stop - s.start for s in region)
        if out is None:
            out = np.empty(shape, self.dtype)
        elif out.shape != shape or out.dtype != self.dtype or not out.flags.c_contiguous:
            raise ValueError(
                f"read: out must be a C-contiguous {self.dtype} array of shape {shape}, "
                f"got {out.dtype} {out.shape}."
            )
        if out.size == 0:
            return out
        pieces = self._pieces(region)
        if pieces is not None:
            read_pieces(fd, out, pieces, self.path)
            if self.on_disk:
                record_read(out.nbytes)
            return out
        ps = self.page_shape
        read = 0  # whole pages: what io_stats counts is what was read
        for first, run in self._page_runs(region):
            if run == 1 and self._is_whole_page(region, first):
                # the common case of a tile equal to a page: read straight into `out`
                pread_all(fd, out.data.cast("B"), self._page_offset(first), self.path)
                read += out.nbytes
                continue
            buf = np.empty((run, *ps), self.dtype)
            pread_all(fd, buf.data.cast("B"), self._page_offset(first), self.path)
            self._scatter(region, first, run, buf, out, to_pages=False)
            read += buf.nbytes
        if self.on_disk:
            record_read(read)
        return out

    def view(self, region: Region | None = None) -> np.ndarray | None:
        """The values in ``region`` as a read-only view of the file's pages (no
        copy; see `_file_map`), or None where they are not one run of bytes in the
        file: a region of whole trailing axes in a file paged in whole trailing
        axes (every 1-d region qualifies), or one whole page. Drop its pages with
        `_file_map.release` when done."""
        # first: following a replaced name drops the map and takes the new file's
        # pages, which the offsets below depend on
        fd = self._fd
        region = self.normalize(region)
        if not self.shape or any(s.stop <= s.start for s in region):
            return None
        trailing = zip(region[1:], self.page_shape[1:], self.shape[1:])
        shape = tuple(s.stop - s.start for s in region)
        if all(p == n and s.start == 0 and s.stop == n for s, p, n in trailing):
            row_bytes = math.prod(self.shape[1:]) * self.dtype.itemsize
            offset = HEADER_BYTES + region[0].start * row_bytes
        else:
            first = tuple(s.start // p for s, p in zip(region, self.page_shape))
            if not self._is_whole_page(region, first):
                return None
            offset = self._page_offset(first)
        if self._map is None:
            try:
                self._map = FileMap(fd, HEADER_BYTES + math.prod(self.grid) * self.page_bytes)
            except (OSError, ValueError):  # a file system without shared maps
                return None
        block = self._map.view(offset, shape, self.dtype)
        if self.on_disk:
            record_read(block.nbytes)
        return block

    def write(self, region: Region | None, data: np.ndarray) -> None:
        """Write ``data`` into ``region``: row pieces straight from ``data`` where
        they are long enough, else whole pages (partial ones read, merged and
        rewritten)."""
        fd = self._fd  # first: as `read` (a replaced name followed, its pages too)
        region = self.normalize(region)
        data = np.asarray(data, self.dtype)
        shape = tuple(s.stop - s.start for s in region)
        data = np.broadcast_to(data, shape)
        if data.size == 0:
            return
        if not data.flags.c_contiguous and data.nbytes > _STAGING_BYTES:
            # A broadcast or strided `data` is made contiguous a slab at a time, cut
            # along its first axis longer than one, so a scalar fill never costs a
            # region-sized copy.
            ax = next((i for i, n in enumerate(shape) if n > 1), None)
            if ax is not None:
                step = max(1, shape[ax] * _STAGING_BYTES // data.nbytes)
                for lo in range(0, shape[ax], step):
                    hi = min(lo + step, shape[ax])
                    start = region[ax].start
                    sub = (*region[:ax], slice(start + lo, start + hi), *region[ax + 1 :])
                    self.write(sub, data[(slice(None),) * ax + (slice(lo, hi),)])
                return
        pieces = self._pieces(region)
        if pieces is not None:
            write_pieces(fd, np.ascontiguousarray(data), pieces, self.path)
            if self.on_disk:
                record_write(data.nbytes)
            return
        ps = self.page_shape
        for first, run in self._page_runs(region):
            offset = self._page_offset(first)
            if run == 1 and self._is_whole_page(region, first):
                view = np.ascontiguousarray(data).data.cast("B")
                pwrite_all(fd, view, offset, self.path)
                continue
            buf = np.empty((run, *ps), self.dtype)
            if not self._covers(region, first, run):
                pread_all(fd, buf.data.cast("B"), offset, self.path)
            else:
                buf[...] = 0
            self._scatter(region, first, run, buf, data, to_pages=True)
            pwrite_all(fd, buf.data.cast("B"), offset, self.path)
        if self.on_disk:
            record_write(data.nbytes)

    def __repr__(self) -> str:
        return (
            f"PagedFile({self.path!r}, shape={self.shape}, dtype={self.dtype}, "
            f"page_shape={self.page_shape})"
        )
