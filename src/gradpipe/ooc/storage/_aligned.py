"""Tile buffers that XLA on the CPU reads in place.

JAX hands a NumPy array to a program compiled for the host's CPU without copying it
only where the array's data starts on a 64-byte boundary; otherwise it copies the
whole block first (`benchmarks/piece_products.py`, 16 MiB: `X @ w` 0.49 ms aligned,
4.46 ms copied). NumPy's own arrays are aligned to 16 bytes, rarely to 64 (a large
one starts 16 bytes into its mapping, after glibc's header), so a tile read into a
fresh `numpy.empty` (pages that are not whole rows, a store that is not mapped) was
copied once more by every program of a loss's pass (`execution._one_pass`): a 512
MiB loss over pages of 8192 x 64, 0.547 s a step, 0.434 s with aligned buffers. A
block of a file's map is page-aligned already; `empty` gives a buffer that is too.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import DTypeLike

__all__ = ["ALIGNMENT", "empty", "is_aligned"]

#: the alignment in bytes at which XLA's CPU client takes a host array as it is
ALIGNMENT = 64


def empty(shape: tuple[int, ...], dtype: DTypeLike) -> np.ndarray:
    """An uninitialised C-contiguous array like `numpy.empty`'s, its data aligned to
    `ALIGNMENT` bytes (it keeps the larger block it is cut from alive)."""
    dtype = np.dtype(dtype)
    if any(n < 0 for n in shape):
        raise ValueError(f"negative dimensions are not allowed: {shape}")
    nbytes = math.prod(shape) * dtype.itemsize
    raw = np.empty(nbytes + ALIGNMENT, np.uint8)
    skip = -raw.ctypes.data % ALIGNMENT
    return raw[skip : skip + nbytes].view(dtype).reshape(shape)


def is_aligned(a: np.ndarray) -> bool:
    """Whether ``a``'s data starts on an `ALIGNMENT`-byte boundary."""
    return a.ctypes.data % ALIGNMENT == 0
