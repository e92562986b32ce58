"""`ArrayFile`: what a pass reads its inputs from, whatever holds the values.

A pass's inputs are array files of many kinds: a `PagedFile`, a fused `ChainFile`,
a resident operand, a zarr or HDF5 dataset read in place, rows picked from another
array, a result that waits to be read. Planning and the driver ask of each only its
``shape`` and ``dtype`` and to ``read`` a region; other attributes (``page_shape``,
``on_disk``, ...) are asked with a default.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from ..storage._paged_file import Region

__all__ = ["ArrayFile"]


class ArrayFile(Protocol):
    """An array that reads a region: a file, a chain, or an array that reads like one."""

    @property
    def shape(self) -> tuple[int, ...]: ...

    @property
    def dtype(self) -> np.dtype: ...

    def read(self, region: Region | None = ..., out: np.ndarray | None = ...) -> np.ndarray: ...
