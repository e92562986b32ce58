"""What the files of arrays read where they lie share (zarr arrays, HDF5 datasets,
rows picked from another array): the `InPlaceFile` base class, and the region
arithmetic their reads and I/O accounting use.
"""

from __future__ import annotations

import math

import numpy as np

from ._page_layout import Region

__all__ = ["InPlaceFile", "Region", "extent", "touched_bytes"]


def touched_bytes(
    region: Region, unit: tuple[int, ...], shape: tuple[int, ...], itemsize: int
) -> int:
    """Decoded bytes of the chunks of side ``unit`` that ``region`` touches (the part
    of each inside the array)."""
    n = itemsize
    for s, c, size in zip(region, unit, shape):
        if s.stop <= s.start:
            return 0
        n *= min(-(-s.stop // c) * c, size) - s.start // c * c
    return n


def extent(region: Region) -> tuple[int, ...]:
    """The shape of ``region`` (a tuple of slices with their bounds filled in)."""
    return tuple(s.stop - s.start for s in region)


class InPlaceFile:
    """What the files of arrays read where they lie share: a ``shape`` and a
    ``dtype``, and regions given as tuples of slices."""

    shape: tuple[int, ...]
    dtype: np.dtype
    is_scratch = False
    on_disk = True
    pickles_by_location = True  # reopened from where it lies in another process

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.dtype.itemsize

    def normalize(self, region: Region | None) -> Region:
        """``region`` with every ``None`` bound filled in (``None``: the whole array)."""
        if region is None:
            return tuple(slice(0, n) for n in self.shape)
        return tuple(
            slice(s.start or 0, n if s.stop is None else s.stop) for s, n in zip(region, self.shape)
        )
