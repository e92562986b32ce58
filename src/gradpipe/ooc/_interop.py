"""Copying DiskArrays to and from zarr arrays and `np.memmap` files, in bounded memory."""

from __future__ import annotations

import contextlib
import os

import numpy as np

from ._array import DiskArray, _new_file, _row_chunks
from ._budget import MemoryBudget, get_budget
from ._debris import sweep_partials
from ._storage import fsync_dir, partial_name

__all__ = ["from_zarr", "to_memmap", "to_zarr"]


def _zarr():
    try:
        import zarr
    except ImportError:
        raise ImportError(
            "gradpipe.ooc zarr interop needs zarr: pip install 'gradpipe[zarr]'."
        ) from None
    return zarr


def _rows_per_copy(shape, itemsize: int, budget: MemoryBudget) -> int:
    row = int(np.prod(shape[1:], dtype=np.int64)) * itemsize or itemsize
    return max(1, budget.nbytes // 4 // row)


def to_memmap(x: DiskArray, path: str | os.PathLike, *, budget=None) -> np.memmap:
    """Write ``x`` to a raw ``np.memmap`` file at ``path`` (C order), row block by block.

    The file is written under a temporary name and renamed into place when complete
    (a raw file has no header to tell a half-written one from a whole one).
    """
    f = x._concrete_file("to_memmap")
    path = os.fspath(path)
    sweep_partials(path)
    tmp = partial_name(path)
    try:
        mm = np.memmap(tmp, dtype=x.dtype, mode="w+", shape=x.shape)
        step = _rows_per_copy(x.shape, x.dtype.itemsize, get_budget(budget))
        for start in range(0, x.shape[0] if x.shape else 1, step):
            if not x.shape:
                mm[()] = f.read(None)
                break
            stop = min(start + step, x.shape[0])
            mm[start:stop] = f.read((slice(start, stop), *(slice(0, n) for n in x.shape[1:])))
        mm.flush()
        del mm
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
        fsync_dir(path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    return np.memmap(path, dtype=x.dtype, mode="r+", shape=x.shape)


def to_zarr(x: DiskArray, store, *, chunks=None, budget=None):
    """Write ``x`` to a new zarr array at ``store`` (a path or a zarr store).

    **Arguments:**

    - `chunks`: zarr chunk shape; by default the DiskArray's page shape.

    **Returns:** the zarr array.
    """
    zarr = _zarr()
    f = x._concrete_file("to_zarr")
    z = zarr.open_array(
        store, mode="w", shape=x.shape, dtype=x.dtype, chunks=chunks or f.page_shape
    )
    for r in _row_chunks(f):
        z[r] = f.read(r)
    return z


def from_zarr(source, *, path=None, page_shape=None, budget=None) -> DiskArray:
    """A DiskArray copied from a zarr array (or a path to one), block row by block row."""
    zarr = _zarr()
    z = zarr.open_array(source, mode="r") if isinstance(source, (str, os.PathLike)) else source
    f = _new_file(z.shape, z.dtype, path, page_shape, budget)
    try:
        for r in _row_chunks(f):
            f.write(r, np.asarray(z[r]))
    except BaseException:
        f.discard()
        raise
    return DiskArray._wrap(f.commit())
