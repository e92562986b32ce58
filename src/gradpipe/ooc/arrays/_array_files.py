"""New array files, written page row by page row (memory bounded by two page rows:
the one a source gives, and the buffer they are written from).

The files behind `DiskArray`'s constructors (`DiskArray.full`, `from_numpy`,
`from_row_blocks`), its copies (`DiskArray.save`) and the arrays the namespace
writes from other sources: `_new_file` creates one, `_row_chunks` gives the regions
to write it in, `_written` writes and commits it.
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
from numpy.typing import DTypeLike

from ..planning._budget import MemoryBudget, default_page_shape, get_budget
from ..storage._paged_file import PagedFile, Region

__all__ = ["_copy_into", "_is_mapped", "_new_file", "_row_chunks", "_written"]


def _is_mapped(array: np.ndarray) -> bool:
    """Whether ``array``'s memory is a memory map (a `np.memmap`, or a view of one)."""
    base: object = array
    while isinstance(base, np.ndarray):
        if isinstance(base, np.memmap):
            return True
        base = base.base
    return isinstance(base, mmap.mmap)


def _new_file(
    shape: Sequence[int],
    dtype: DTypeLike,
    path: str | os.PathLike[str] | None,
    page_shape: Sequence[int] | None,
    budget: MemoryBudget | int | str | None,
) -> PagedFile:
    """A new array file of ``shape`` (committed by the caller once written)."""
    shape = tuple(int(n) for n in shape)
    # stored in native byte order, as JAX holds values: a big-endian ``>f4`` array is
    # float32 (one compilation, and gradients in the dtype other float32 arrays get)
    native = np.dtype(dtype).newbyteorder("=")
    if page_shape is None:
        page_shape = default_page_shape(shape, native.itemsize, get_budget(budget))
    return PagedFile.create(shape, native, page_shape, path=path)


def _row_chunks(f: PagedFile) -> Iterator[Region]:
    """Regions of whole page rows, one page-row high: bounded-memory copies."""
    if not f.shape:
        yield ()
        return
    step = f.page_shape[0]
    for start in range(0, f.shape[0], step):
        yield (slice(start, min(start + step, f.shape[0])), *(slice(0, n) for n in f.shape[1:]))


def _copy_into(out: np.ndarray, values: Any) -> None:
    """Copy ``values`` (an array, or what `np.asarray` takes) into ``out``, as
    ``PagedFile.write`` would take them: cast unsafely as ``np.asarray(values,
    dtype)`` does (Python numbers out of the type's range refused, as there), and
    broadcast to ``out``'s shape by NumPy's rules."""
    if not isinstance(values, np.ndarray):
        values = np.asarray(values, out.dtype)
    np.copyto(out, np.broadcast_to(values, out.shape), casting="unsafe")


def _written(f: PagedFile, fill: Callable[[Region, np.ndarray], np.ndarray | None]) -> PagedFile:
    """``f`` with each region of `_row_chunks` written, committed (discarded if
    writing fails). ``fill(region, buffer)`` fills ``buffer`` (C-contiguous, the
    region's shape, ``f``'s dtype) with the region's values and returns None or
    ``buffer``, or returns an array of memory that outlives the write to write from
    instead (a view of an array in memory).

    New values go to the file from one buffer kept for the whole write, not from a
    new array a page row: how the memory a write copies from was made decides how
    the kernel caches the file, and every mapped read of it later pays for that.
    Measured on a sandboxed TPU host: dropping a 64 MiB block of a map of a 2 GiB
    file after sending it to the chip cost 2.6-3.2 ms when each 32 MiB page had been
    written from an array made for it, 0.4-0.5 ms when written from one buffer
    (`tools/device_drops.py --writes`); the training step of
    `benchmarks/ooc_device.py` on the MLP over 8 GiB took 0.787 s against 0.660 s
    (the loop written by hand 0.616 s). Written from a memory map, the copy into
    the page cache faults part-way, and the kernel caches the file in small pages
    (0.1 s a GiB to map it, against 0.008 s).
    """
    staging: np.ndarray | None = None  # (one page row: with ``fill``'s own, two at once)
    try:
        for r in _row_chunks(f):
            shape = tuple(s.stop - s.start for s in r)
            if staging is None:  # (the first page row is the tallest)
                staging = np.empty(shape, f.dtype)
            buffer = staging[: shape[0]] if shape else staging
            given = fill(r, buffer)
            if given is not None and given is not buffer:
                given = np.asarray(given)
                if given.dtype != f.dtype and given.flags.c_contiguous:
                    _copy_into(buffer, given)  # (converted into the buffer, not a new array)
                    given = buffer
            # (a strided array is written as it is: `write` copies it a bounded slab at
            # a time, where a page row of a wide array may be larger than memory)
            f.write(r, buffer if given is None else given)
    except BaseException:
        f.discard()
        raise
    return f.commit()
