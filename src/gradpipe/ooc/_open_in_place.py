"""`open_zarr` and `open_hdf5`: DiskArrays over files read where they lie.

The files themselves (`ZarrFile`, `HDF5File`) belong to the storage modules, which
know nothing of DiskArrays or budgets; this module wraps them in DiskArrays and
gives a contiguous HDF5 dataset the default page shape of the budget.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from .arrays._array import DiskArray
from .planning._budget import default_page_shape, get_budget
from .storage._hdf5_file import hdf5_file
from .storage._zarr_file import zarr_file

if TYPE_CHECKING:
    import h5py
    import zarr
    from zarr.storage import StoreLike

__all__ = ["open_hdf5", "open_zarr"]


def _default_pages(shape: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    return default_page_shape(shape, itemsize, get_budget())


def open_zarr(
    store: StoreLike | zarr.Array,
    *,
    path: str | None = None,
    mode: str = "r",
    storage_options: dict[str, Any] | None = None,
) -> DiskArray:
    """A `DiskArray` reading (and with ``mode="r+"`` writing) a zarr array in place.

    No copy is made: tiles are planned in whole chunks, and each read decodes only
    the chunks it touches. Zarr format 2 and 3, any codecs and regular chunking.

    ```python
    z = zarr.create_array("data.zarr", shape=(1000, 64), chunks=(100, 64), dtype="f4")
    z[:] = np.random.rand(1000, 64)
    x = ooc.open_zarr("data.zarr")
    total = ooc.sum(x)                   # reads each chunk once, writes nothing
    ```

    **Arguments:**

    - `store`: a local path, an fsspec URL (``file://``, ``memory://``, ``s3://``,
      ...), a zarr store, or a `zarr.Array`.
    - `path`: the array's path inside the store (when the store is a group).
    - `mode`: ``"r"`` (read-only) or ``"r+"`` (`update_` and ``x[...] = v`` write
      into the zarr array, one chunk at a time; see `gradpipe.ooc.storage._zarr_file`).
    - `storage_options`: options for the fsspec file system of a URL, such as
      ``{"endpoint_url": ..., "key": ..., "secret": ...}`` for S3.

    **Returns:** a `DiskArray` whose file is the zarr array (``x.path`` names it).
    """
    return DiskArray._wrap(zarr_file(store, path=path, mode=mode, storage_options=storage_options))


def open_hdf5(path: str | os.PathLike[str] | h5py.Dataset, dataset: str | None = None) -> DiskArray:
    """A read-only `DiskArray` on one dataset of an HDF5 (or NetCDF-4) file, in place.

    No copy is made: a chunked dataset is read in whole chunks (tiles follow them),
    each decoded once per pass; a contiguous one in pages of the default size.

    ```python
    with h5py.File("data.h5", "w") as f:
        f.create_dataset("x", data=np.random.rand(1000, 64), chunks=(100, 64),
                         compression="gzip")
    x = ooc.open_hdf5("data.h5", "x")
    m = ooc.mean(x)
    ```

    **Arguments:**

    - `path`: the HDF5 file, or an open `h5py.Dataset` (its file is reopened
      read-only by name).
    - `dataset`: the dataset's name in the file (``"group/name"``; for a NetCDF-4
      file, the variable's name).

    **Returns:** a `DiskArray` whose file is the dataset; writing into it is
    refused (copy it first).
    """
    # a contiguous dataset is read in pages of the default size for the budget
    return DiskArray._wrap(hdf5_file(path, dataset, page_shape=_default_pages))
