"""Vectored I/O between a region of a paged file and a C-ordered array.

Within one page, each run along the last axis is contiguous on disk, and so is its
image in the region-shaped array. Reading or writing those *pieces* directly —
``preadv``/``pwritev`` with one buffer per run of pieces that follow each other
both on disk and in the array (a page of whole rows is one), and runs that follow
each other on disk batched into one call — moves every byte once: no page-sized
staging buffer, no copy between it and the array, and no read-modify-write of
partly covered pages. Where pieces would be short (a page one element wide, say), the
system calls would cost more than the staging copy saves, and `region_pieces`
answers ``None`` so that the caller takes the page-at-a-time path, unless the
pages would be more than `MAX_OVERREAD` times the region: then the pieces are read
however short they are.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import math
import os
from collections.abc import Callable, Iterator, Sequence

import numpy as np

__all__ = ["Pieces", "pread_all", "pwrite_all", "read_pieces", "region_pieces", "write_pieces"]

#: Regions whose pieces are shorter than this and need many calls take the page path.
MIN_PIECE_BYTES = 2048
_MANY_CALLS = 256
#: ...and take it only when the pages they touch are at most this many times the region.
MAX_OVERREAD = 4
_IOV_MAX = 1024  # Linux's limit of buffers per preadv/pwritev call

#: Per page touched, its runs: (file offsets, array byte offsets, bytes per run).
Pieces = list[tuple[np.ndarray, np.ndarray, np.ndarray]]


def region_pieces(
    region: Sequence[slice],
    page_shape: Sequence[int],
    itemsize: int,
    pages: Iterator[tuple[int, ...]],
    page_offset: Callable[[tuple[int, ...]], int],
) -> Pieces | None:
    """The pieces of ``region`` in each of ``pages`` (the indices of the pages it
    touches), or ``None`` when they are too short to be worth reading one by one."""
    extent = [s.stop - s.start for s in region]
    array_strides = [itemsize * int(np.prod(extent[ax + 1 :])) for ax in range(len(extent))]
    page_strides = [itemsize * int(np.prod(page_shape[ax + 1 :])) for ax in range(len(extent))]
    out: Pieces = []
    shortest, calls = None, 0
    for index in pages:
        file_offset = np.array(page_offset(index), np.int64)
        array_offset = np.array(0, np.int64)
        for ax, (s, p, i) in enumerate(zip(region, page_shape, index)):
            lo, hi = max(s.start, i * p), min(s.stop, (i + 1) * p)
            if ax == len(region) - 1:
                width = (hi - lo) * itemsize
                file_offset = file_offset + (lo - i * p) * itemsize
                array_offset = array_offset + (lo - s.start) * itemsize
                break
            in_page = np.arange(lo - i * p, hi - i * p, dtype=np.int64) * page_strides[ax]
            in_array = np.arange(lo - s.start, hi - s.start, dtype=np.int64) * array_strides[ax]
            file_offset = np.add.outer(file_offset, in_page)
            array_offset = np.add.outer(array_offset, in_array)
        runs = _runs(file_offset.ravel(), array_offset.ravel(), width)
        out.append(runs)
        at, _, lengths = runs
        shortest = int(lengths.min()) if shortest is None else min(shortest, int(lengths.min()))
        # runs that follow each other on disk are read by one call (`_batches`)
        calls += _gaps(at, lengths).size + 1 + at.size // _IOV_MAX
    if shortest is not None and shortest < MIN_PIECE_BYTES and calls > _MANY_CALLS:
        # many calls for short pieces: whole pages cost fewer, unless the region is a
        # small part of them (two months of a climatology's page, say)
        touched = len(out) * math.prod(page_shape) * itemsize
        if math.prod(extent) * itemsize * MAX_OVERREAD >= touched:
            return None
    return out


def _runs(
    file_offsets: np.ndarray, array_offsets: np.ndarray, length: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A page's pieces of ``length`` bytes merged into runs that follow each other
    both on disk and in the array (a page of whole rows is one run): each run's
    file offset, array offset and length. One buffer a run: a page of whole rows
    moves as one buffer, not 1024 of one row a call (what the kernel caches does
    not depend on it: `tools/device_drops.py --writes`; `arrays/_array_files._written`
    says what does)."""
    apart = (np.diff(file_offsets) != length) | (np.diff(array_offsets) != length)
    first = np.concatenate([[0], np.flatnonzero(apart) + 1])
    counts = np.diff(np.append(first, file_offsets.size))
    return file_offsets[first], array_offsets[first], counts * length


def _gaps(file_offsets: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The indices of the runs that do not start where the run before them ends on
    disk."""
    return np.flatnonzero(file_offsets[:-1] + lengths[:-1] != file_offsets[1:]) + 1


def _batches(file_offsets: np.ndarray, lengths: np.ndarray) -> Iterator[tuple[int, int]]:
    """``(start, stop)`` index ranges of runs that follow each other on disk, at
    most `_IOV_MAX` long."""
    bounds = [0, *_gaps(file_offsets, lengths).tolist(), file_offsets.size]
    for lo, hi in itertools.pairwise(bounds):
        for start in range(lo, hi, _IOV_MAX):
            yield start, min(start + _IOV_MAX, hi)


def _vectors(array: np.ndarray, pieces: Pieces) -> Iterator[tuple[list, int]]:
    """``(buffers, file offset)`` for each batch of runs that follow each other on
    disk; the buffers are views of the C-contiguous ``array``."""
    view = array.data.cast("B")
    for at, starts, lengths in pieces:
        for lo, hi in _batches(at, lengths):
            runs = zip(starts[lo:hi].tolist(), lengths[lo:hi].tolist())
            buffers = [view[a : a + n] for a, n in runs if n]
            if buffers:
                yield buffers, int(at[lo])


def _rest(buffers: list, offset: int, done: int) -> Iterator[tuple[memoryview, int]]:
    """What a vectored call that moved only ``done`` bytes left: ``(view, offset)``."""
    for buffer in buffers:
        if done < buffer.nbytes:
            yield buffer[done:], offset + done
            done = 0
        else:
            done -= buffer.nbytes
        offset += buffer.nbytes


def read_pieces(fd: int, out: np.ndarray, pieces: Pieces, path: str) -> None:
    """Fill the C-contiguous ``out`` (shaped like the region) from the file. One call
    moves at most about 2 GiB, so a short read is continued; the end of the file
    before the buffers are full means it was truncated."""
    for buffers, offset in _vectors(out, pieces):
        done = os.preadv(fd, buffers, offset)
        for rest, at in _rest(buffers, offset, done):
            pread_all(fd, rest, at, path)


def write_pieces(fd: int, data: np.ndarray, pieces: Pieces, path: str) -> None:
    """Write the C-contiguous ``data`` (shaped like the region) into the file,
    continuing short writes; a full disk is an error naming the file."""
    for buffers, offset in _vectors(data, pieces):
        with _full_disk_named(path):
            done = os.pwritev(fd, buffers, offset)
        for rest, at in _rest(buffers, offset, done):
            pwrite_all(fd, rest, at, path)


def pread_all(fd: int, view: memoryview, offset: int, path: str) -> None:
    """Fill all of ``view`` from ``offset``; the end of the file first means the file
    was truncated."""
    while view.nbytes:
        n = os.preadv(fd, [view], offset)
        if n == 0:
            raise OSError(f"short read from {path!r}: the file is truncated.")
        view, offset = view[n:], offset + n


def pwrite_all(fd: int, view: memoryview, offset: int, path: str) -> None:
    """Write all of ``view`` at ``offset``; a full disk is an error naming the file."""
    while view.nbytes:
        with _full_disk_named(path):
            n = os.pwrite(fd, view, offset)
        if n == 0:
            raise OSError(errno.EIO, f"Writing {path!r} made no progress.")
        view, offset = view[n:], offset + n


@contextlib.contextmanager
def _full_disk_named(path: str) -> Iterator[None]:
    """Turn a full disk (or quota) while writing ``path`` into an error naming it."""
    try:
        yield
    except OSError as e:
        if e.errno in (errno.ENOSPC, errno.EDQUOT):
            raise OSError(e.errno, f"Disk full while writing {path!r}.") from e
        raise
