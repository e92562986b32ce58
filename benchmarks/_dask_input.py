"""A ``.npy`` file as dask reads it from disk, for the benchmarks' dask contenders.

Handed an ndarray, ``dask.array.from_array`` copies it first (``x.copy()``, in dask
2026.8 and earlier), and a memmap is an ndarray: the graph would then hold the whole
array in memory, read before any timing starts, and the timed compute would read no
disk. Behind this thin wrapper (shape, dtype and slicing only) dask slices the map
chunk by chunk, as it would a zarr or HDF5 array.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np


class MappedArray:
    """A read-only ``np.load(path, mmap_mode="r")`` that dask does not copy."""

    def __init__(self, path: Path | str):
        self.a = np.load(path, mmap_mode="r")
        self.shape, self.dtype, self.ndim = self.a.shape, self.a.dtype, self.a.ndim

    def __getitem__(self, index):
        return self.a[index]


def from_npy(path: Path | str, chunks, name: str | None = None):
    """``dask.array.from_array`` of the ``.npy`` at ``path``, read through its map."""
    import dask.array as da

    x = MappedArray(path)
    meta = np.empty((0,) * x.ndim, x.dtype)
    return da.from_array(x, chunks=chunks, name=name or False, meta=meta)
