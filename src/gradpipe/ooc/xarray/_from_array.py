"""DiskArrays for xarray's variables: read in place where the file allows, else copied.

``xr.open_dataset(..., chunks={}, chunked_array_type="gradpipe")`` and
``.chunk(chunked_array_type="gradpipe")`` hand the manager a variable's data:
either xarray's lazily indexed wrapper around a backend array, or data already in
memory. `from_array` makes a DiskArray of it:

- **In place** (nothing copied; reads decode only the chunks they touch) when the
  wrapper leads, through xarray's caching and copy-on-write layers and at most one
  lazy selection of slices and integers, to one of these backend arrays:
  a NetCDF-4/HDF5 variable opened by ``h5netcdf`` or ``netCDF4`` from a local file
  (read by `gradpipe.ooc.open_hdf5`), or a zarr array, format 2 or 3, local or at
  an fsspec URL (read by `gradpipe.ooc.open_zarr`).
- **Copied**, tile by tile into a new scratch DiskArray whose pages are the requested
  chunks, for everything else: data in memory (NumPy, JAX), a variable decoded on
  read (CF ``scale_factor``/``add_offset``, an integer ``_FillValue`` masked to NaN),
  a NetCDF-3 file, a remote NetCDF file, or any other backend.
- Left in memory, within the budget (`_load.check_fits`), for data that is not a
  number (strings, dates): a DiskArray holds booleans and numbers only.
- Kept as it is when it is a value JAX traces (inside ``jax.jit`` or ``jax.grad``,
  a traced DiskArray or JAX array): its values are not known yet, so nothing can be
  written; operations take it as they take it under ``jax.jit``. xarray chunks such
  a value itself in grouped arithmetic (`_groupby`).

``from_array_kwargs`` may give ``budget=`` (bounds the copy's blocks and the default
page shape) and ``copy=True`` (copy even where the file could be read in place).
"""

from __future__ import annotations

import contextlib
import os
from typing import Any

import jax
import numpy as np

from ..arrays._array import DiskArray, Result
from ..planning._budget import MemoryBudget
from ._chunks import normalize_chunks, page_shape
from ._load import check_fits

__all__ = ["from_array", "open_in_place"]

_OPTIONS = ("budget", "copy")
#: what xarray passes every chunk manager for dask's sake (task names, locks): ignored
_DASK_ONLY = ("name", "lock", "inline_array", "meta", "asarray", "fancy", "getitem")


def _unwrap(data: Any) -> tuple[Any, Any]:
    """The backend array under xarray's wrappers and the one lazy selection on it
    (``None`` for none), or ``(None, None)`` when the layers are not the plain ones."""
    from xarray.core import indexing

    node, key = data, None
    passthrough = (
        indexing.ImplicitToExplicitIndexingAdapter,
        indexing.MemoryCachedArray,
        indexing.CopyOnWriteArray,
    )
    while True:
        if isinstance(node, passthrough):
            node = node.array
        elif isinstance(node, indexing.LazilyIndexedArray):
            if key is not None:
                return None, None
            key, node = node.key, node.array
        else:
            return node, key


def _backend_class(module: str, name: str) -> type[Any] | None:
    try:
        mod = __import__(f"xarray.backends.{module}", fromlist=[name])
    except ImportError:
        return None
    return getattr(mod, name, None)


def _open_backend(node: Any) -> DiskArray | None:
    """A DiskArray reading the backend array ``node`` where it lies, or None."""
    from .._open_in_place import open_hdf5, open_zarr

    zarr_wrapper = _backend_class("zarr", "ZarrArrayWrapper")
    h5_wrapper = _backend_class("h5netcdf_", "H5NetCDFArrayWrapper")
    nc4_wrapper = _backend_class("netCDF4_", "NetCDF4ArrayWrapper")
    if zarr_wrapper is not None and isinstance(node, zarr_wrapper):
        return open_zarr(node.get_array())
    if h5_wrapper is not None and isinstance(node, h5_wrapper):
        dataset = node.get_array()._h5ds
        filename = dataset.file.filename
        if not os.path.isfile(filename):  # a file object (an fsspec URL): no path to reopen
            return None
        return open_hdf5(filename, dataset.name)
    if nc4_wrapper is not None and isinstance(node, nc4_wrapper):
        variable = node.get_array()
        group = variable.group()
        if not str(group.data_model).startswith("NETCDF4"):  # NetCDF-3: not HDF5
            return None
        filename = group.filepath()
        if not os.path.isfile(filename):
            return None
        return open_hdf5(filename, f"{group.path.rstrip('/')}/{variable.name}")
    return None


def _selection(key: Any, ndim: int) -> tuple[slice | int | np.integer, ...] | None:
    """A lazy selection's key as a tuple for `DiskArray.__getitem__` (slices and
    integers only), or None for anything else (arrays of indices)."""
    parts = getattr(key, "tuple", None)
    if parts is None or len(parts) != ndim:
        return None
    if not all(isinstance(k, (slice, int, np.integer)) for k in parts):
        return None
    return tuple(parts)


def open_in_place(data: Any) -> Result | None:
    """A DiskArray reading ``data`` (xarray's lazily indexed wrapper of a backend
    array) where its file lies (a 0-d JAX array for one element selected), or None
    when it cannot be read in place (see the module for which can)."""
    node, key = _unwrap(data)
    if node is None:
        return None
    x: Result | None
    try:
        x = _open_backend(node)
    except (OSError, TypeError, KeyError, ValueError):  # read it through xarray instead
        return None
    if x is None:
        return None
    if key is not None:
        index = _selection(key, x.ndim)
        if index is None:
            return None
        if any(k != slice(None) for k in index):
            x = x[index]
    if tuple(x.shape) != tuple(data.shape) or x.dtype != np.dtype(data.dtype).newbyteorder("="):
        return None  # decoded on read (a different dtype): copy through xarray
    return x


def _copy(data: Any, chunks: Any, budget: MemoryBudget | int | str | None) -> DiskArray:
    """``data`` copied into a new DiskArray block of rows by block of rows."""
    shape = tuple(int(n) for n in data.shape)
    dtype = np.dtype(data.dtype)
    pages = page_shape(normalize_chunks(chunks, shape, dtype=dtype))
    if not shape:
        return DiskArray.from_numpy(np.asarray(data[()]), budget=budget)
    if isinstance(data, np.ndarray):
        return DiskArray.from_numpy(data, page_shape=pages, budget=budget)
    return DiskArray.from_row_blocks(
        shape,
        dtype,
        lambda a, b: np.asarray(data[(slice(a, b),)]),
        page_shape=pages,
        budget=budget,
    )


def from_array(data: Any, chunks: Any, **kwargs: Any) -> Result | np.ndarray:
    """A DiskArray for ``data`` (see the module): read in place, or copied; data that
    is not numbers stays in memory (a NumPy array) within the budget, and a traced
    value stays as it is."""
    for k in _DASK_ONLY:
        kwargs.pop(k, None)
    unknown = sorted(set(kwargs) - set(_OPTIONS))
    if unknown:
        raise TypeError(
            f"gradpipe's chunk manager takes from_array_kwargs {list(_OPTIONS)}, not {unknown}."
        )
    budget, copy = kwargs.get("budget"), bool(kwargs.get("copy", False))
    if isinstance(data, (DiskArray, jax.core.Tracer)):
        return data
    if not copy:
        x = open_in_place(data)
        if x is not None:
            return x
    dtype = np.dtype(data.dtype)
    if dtype.kind not in "biufc":
        check_fits([data], f"a {dtype} variable (a DiskArray holds numbers only)", budget)
        with contextlib.suppress(AttributeError):
            return data.get_duck_array()
        return np.asarray(data)
    return _copy(data, chunks, budget)
