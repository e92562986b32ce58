"""HDF5 datasets read where they lie: the file behind `open_hdf5`.

An `HDF5File` gives the tile driver one dataset of an HDF5 file (NetCDF-4 files
are HDF5 files: their variables are datasets) as it gives it a paged file,
read-only. A chunked dataset's ``page_shape`` is its chunk shape and tiles follow
its chunks (`_grain`), so each compressed chunk is decoded once per pass; a
contiguous dataset gets the default page shape of a new array. Reads go through
``read_direct`` into the driver's buffer: no intermediate copy.

``io_stats().bytes_read`` counts, as for zarr, the decoded bytes of every chunk
a read touches when the chunks are filtered (compressed: HDF5 decodes each whole);
for unfiltered chunks and contiguous datasets, which HDF5 reads in part, the
region's bytes.
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Callable
from types import ModuleType
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from ._in_place import InPlaceFile, Region, extent, touched_bytes
from ._iostats import record_read

__all__ = ["HDF5File", "hdf5_file"]

#: The pages to read a contiguous dataset in: a shape, or a function of the
#: dataset's shape and item size giving one.
PageShape = tuple[int, ...] | Callable[[tuple[int, ...], int], tuple[int, ...]]


def _h5py() -> ModuleType:
    try:
        import h5py
    except ImportError:
        raise ImportError(
            "gradpipe.ooc's HDF5 support needs h5py: pip install 'gradpipe[hdf5]'."
        ) from None
    return h5py


class HDF5File(InPlaceFile):
    """One dataset of an HDF5 file, read-only, as the tile driver reads it (see the
    module). Made by `open_hdf5`; reads are thread safe (h5py serializes them)."""

    writable = False

    def __init__(
        self, path: str | os.PathLike[str], dataset: str, page_shape: PageShape | None = None
    ) -> None:
        """``page_shape``: for a contiguous dataset, the pages to read it in (a shape,
        or a function of the shape and item size giving one); a chunked dataset's
        pages are its chunks."""
        h5py = _h5py()
        self.path = os.path.abspath(os.fspath(path))
        self.dataset = dataset
        try:
            handle = h5py.File(self.path, "r")
        except FileNotFoundError:
            raise FileNotFoundError(f"No HDF5 file at {self.path!r}.") from None
        except OSError as e:
            raise OSError(f"{self.path!r} cannot be read as an HDF5 file: {e}") from None
        self._finalizer = weakref.finalize(self, handle.close)
        node = handle.get(dataset)
        if not isinstance(node, h5py.Dataset):
            names = []
            handle.visititems(
                lambda name, obj: names.append(name) if isinstance(obj, h5py.Dataset) else None
            )
            what = "nothing" if node is None else "a group"
            raise KeyError(
                f"{dataset!r} in {self.path!r} is {what}, not a dataset; its datasets: "
                f"{', '.join(names) or 'none'}."
            )
        dtype = node.dtype
        if dtype.kind not in "biufc" or node.shape is None:
            raise TypeError(
                f"dataset {dataset!r} in {self.path!r} holds {dtype} values; gradpipe.ooc "
                "works on booleans and numbers (bool, int, uint, float, complex dtypes)."
            )
        self._dataset = node
        self.shape = tuple(int(n) for n in node.shape)
        self.dtype = dtype.newbyteorder("=")  # HDF5 converts to native order on read
        self.whole_chunks = node.chunks is not None
        # HDF5 decodes a filtered (compressed) chunk whole on every read that
        # touches it; an unfiltered one it reads in part, only the selection
        self._decodes_whole = self.whole_chunks and node.id.get_create_plist().get_nfilters() > 0
        if node.chunks is not None:
            self.page_shape = tuple(int(c) for c in node.chunks)
        elif page_shape is not None:  # a contiguous dataset: pages as the caller plans
            pages = page_shape(self.shape, dtype.itemsize) if callable(page_shape) else page_shape
            self.page_shape = tuple(int(p) for p in pages)
        else:
            raise ValueError(
                f"dataset {dataset!r} in {self.path!r} is contiguous: give the page shape "
                "to read it in (open_hdf5 gives the default one of the budget)."
            )

    def read(self, region: Region | None = None, out: np.ndarray | None = None) -> np.ndarray:
        """The values in ``region``, read straight into ``out`` when it is given (a
        C-contiguous array of the region's shape and this file's dtype)."""
        region = self.normalize(region)
        shape = extent(region)
        if out is None or out.dtype != self.dtype or not out.flags.c_contiguous:
            target = np.empty(shape, self.dtype)
        else:
            target = out
        if tuple(target.shape) != shape:
            raise ValueError(f"read: out must have the region's shape {shape}, got {target.shape}.")
        if 0 in shape:
            return target if out is None else out
        if self.shape:
            self._dataset.read_direct(target, source_sel=region)
        else:
            self._dataset.read_direct(target)
        if self._decodes_whole:
            record_read(touched_bytes(region, self.page_shape, self.shape, self.dtype.itemsize))
        else:
            record_read(target.nbytes)
        if out is not None and target is not out:
            out[...] = target
            return out
        return target

    def write(self, region: Region | None, data: ArrayLike) -> None:
        raise TypeError(
            f"the HDF5 dataset {self.dataset!r} in {self.path!r} is read-only in gradpipe.ooc; "
            "copy it first (ooc.asarray(x, copy=True), or x.save(path)) to write into it."
        )

    def __reduce__(self) -> tuple[type[HDF5File], tuple[str, str, tuple[int, ...]]]:
        return (HDF5File, (self.path, self.dataset, self.page_shape))

    def __repr__(self) -> str:
        return (
            f"HDF5File({self.path!r}, {self.dataset!r}, shape={self.shape}, dtype={self.dtype}, "
            f"page_shape={self.page_shape})"
        )


def hdf5_file(
    path: str | os.PathLike[str] | Any,
    dataset: str | None = None,
    page_shape: PageShape | None = None,
) -> HDF5File:
    """The `HDF5File` `open_hdf5` wraps (see there for the arguments)."""
    h5py = _h5py()
    if isinstance(path, h5py.Dataset):
        if dataset is not None:
            raise ValueError("open_hdf5(dataset_object): the dataset is given; drop `dataset`.")
        path, dataset = path.file.filename, path.name
    elif not isinstance(path, (str, os.PathLike)):
        raise TypeError(
            f"open_hdf5: path must be a file path or an h5py.Dataset, got {type(path).__name__}."
        )
    if dataset is None:
        raise TypeError("open_hdf5(path, dataset): name the dataset to open, e.g. 'x'.")
    return HDF5File(path, dataset, page_shape)
