"""xarray on gradpipe.ooc: labelled datasets out of core, and differentiable.

Installing gradpipe with the ``xarray`` extra (``pip install 'gradpipe[xarray]'``)
registers gradpipe as one of xarray's chunked array types, under the name
``"gradpipe"``:

```python
import xarray as xr
from gradpipe import ooc

ds = xr.open_dataset("era5.nc", engine="h5netcdf", chunks={}, chunked_array_type="gradpipe")
t = ds["t2m"]                         # .data is a DiskArray, read where it lies
clim = t.mean("time")                 # out of core: a DiskArray
anomaly = (t - clim).std("time")
anomaly.to_zarr("anomaly.zarr")       # written tile by tile
```

Variables opened this way read NetCDF-4/HDF5 files (through ``h5netcdf`` or
``netCDF4``) and zarr arrays (format 2 and 3, local or fsspec URLs) in place;
``DataArray.chunk(chunked_array_type="gradpipe")`` moves other data to disk.
xarray's arithmetic, reductions over named dimensions (``median`` and
``quantile`` too), ``where``, selection, grouping, ``xr.dot`` and ``weighted``
reductions, and concatenation run out of core through
`gradpipe.ooc`; ``.compute()``, ``.load()`` and ``.values`` read into memory
within the `MemoryBudget` and refuse above it, naming the size.

Losses written with DataArrays over DiskArrays run under ``jax.grad`` and
``jax.jit``: pass the DiskArrays (or the DataArray's ``.data``) as arguments and
wrap them in DataArrays inside the function.

What to know:

- When another chunk manager is installed too, xarray picks it unless told:
  pass ``chunked_array_type="gradpipe"`` to ``open_dataset``, ``open_zarr`` and
  ``.chunk()``, or set ``xr.set_options(chunk_manager="gradpipe")``.
- Inside ``jax.jit`` a DiskArray is a JAX tracer. xarray's functions that dispatch
  on the array's namespace (reductions, ``median``, ``quantile``, ``where``) reach
  `gradpipe.ooc`; those that call NumPy on the data (``interp``,
  ``apply_ufunc(..., dask="parallelized")``) fail as JAX fails for any traced
  value. ``xr.dot`` and ``weighted(...)`` reductions go through ``opt_einsum``
  (installed with JAX), whose backends are taught DiskArrays when `gradpipe.ooc`
  is imported (`gradpipe.ooc.ops._einsum.register_with_opt_einsum`).
- Results on disk have NumPy-backed xarray's dtypes and values, with JAX's x64
  flag on or off; a 0-d result is a JAX value (32-bit while x64 is off), and
  counts are in JAX's default int (the xarray guide's "Dtypes").
- A DataArray over a JAX array and one over a DiskArray combine with operators
  (``t * w``), but not in xarray functions that ask for one namespace for all their
  arguments (``xr.where(cond, t, w)``; ``xr.dot(t, w)`` with
  ``xr.set_options(use_opt_einsum=False)``):
  xarray refuses "Mixed array types". Write those with operators (``(t * w).sum(dim)``
  for a dot product), or with NumPy constants.
- With ``flox`` installed, xarray hands ``groupby``/``resample`` reductions to it,
  and it takes dask, cubed and NumPy arrays only: set
  ``xr.set_options(use_flox=False)``; xarray's own path (a reduction per group,
  stacked) runs out of core.

The modules: `_manager` (the chunk manager), `_from_array` (what is read in place
and what is copied), `_store` (writing tile by tile), `_load` (the load guard),
`_blocks` (NumPy functions of blocks), `_chunks` (chunk specifications),
`_namespace` (the namespace the manager hands xarray), `_groupby` (two steps of
xarray's groupby and resample adjusted for DiskArrays).
"""

from __future__ import annotations

import sys

__all__ = ["GradpipeChunkManager"]

if "xarray" in sys.modules:  # imported after xarray: adjust its groupby now
    from ._groupby import install as _install_groupby

    _install_groupby()


def __getattr__(name: str) -> type:
    if name == "GradpipeChunkManager":  # imports xarray: only when asked for
        try:
            from ._manager import GradpipeChunkManager
        except ImportError as error:
            raise ImportError(
                f"gradpipe's chunk manager for xarray needs xarray ({error.name} is missing). "
                "Install the extra: pip install 'gradpipe[xarray]'."
            ) from error
        return GradpipeChunkManager
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
