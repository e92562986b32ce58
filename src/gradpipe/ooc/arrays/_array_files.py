"""New array files, written page row by page row (memory bounded by one page row).

The files behind `DiskArray`'s constructors (`DiskArray.full`, `from_numpy`,
`from_row_blocks`), its copies (`DiskArray.save`) and the arrays the namespace
writes from other sources: `_new_file` creates one, `_row_chunks` gives the regions
to write it in, `_written` writes and commits it.
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Callable, Iterator, Sequence

import numpy as np
from numpy.typing import DTypeLike

from ..planning._budget import MemoryBudget, default_page_shape, get_budget
from ..storage._paged_file import PagedFile, Region

__all__ = ["_is_mapped", "_new_file", "_row_chunks", "_written"]


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


def _written(f: PagedFile, rows: Callable[[Region], np.ndarray]) -> PagedFile:
    """``f`` with each region of `_row_chunks` written as ``rows(region)``, committed
    (discarded if writing fails)."""
    try:
        for r in _row_chunks(f):
            f.write(r, rows(r))
    except BaseException:
        f.discard()
        raise
    return f.commit()
