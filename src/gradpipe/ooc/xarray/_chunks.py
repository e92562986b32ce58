"""Chunk specifications as xarray gives them, in the explicit form it expects back.

xarray passes chunks in many spellings: one int for every axis, a tuple with an
entry per axis (an int, ``-1`` or ``None`` for the whole axis, ``"auto"``, or the
explicit block sizes), a dict from axis number to any of those, or ``"auto"``.
`normalize_chunks` turns them into block sizes per axis (``((100, 100, 50), (64,))``).

A DiskArray's file is cut into pages of one shape, so its chunks are regular: every
block of an axis but the last has one size. `page_shape` gives that shape, or
refuses chunks that are not regular.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..planning._budget import default_page_shape, get_budget

__all__ = ["normalize_chunks", "page_shape"]


def _blocks(n: int, size: int) -> tuple[int, ...]:
    if n == 0:
        return (0,)
    size = max(1, min(int(size), n))
    return tuple(min(size, n - s) for s in range(0, n, size))


def _auto_sides(
    shape: tuple[int, ...], dtype: np.dtype | str | None, previous: Sequence[Any] | None
) -> tuple[int, ...]:
    """Sides for ``"auto"`` axes: the previous (a file's) chunks where known, else
    the page shape a new array of this shape gets under the current budget."""
    itemsize = np.dtype(dtype).itemsize if dtype is not None else 8
    default = default_page_shape(tuple(shape), itemsize, get_budget())
    sides = []
    for ax in range(len(shape)):
        prev = previous[ax] if previous is not None and ax < len(previous) else None
        if isinstance(prev, tuple) and prev:
            prev = prev[0]
        sides.append(int(prev) if prev else default[ax])
    return tuple(sides)


def normalize_chunks(
    chunks: Any,
    shape: Sequence[int],
    *,
    dtype: np.dtype | str | None = None,
    previous_chunks: Sequence[Any] | None = None,
    limit: int | None = None,
) -> tuple[tuple[int, ...], ...]:
    """``chunks`` (any spelling xarray uses, see the module) as explicit block sizes
    for an array of ``shape``: a tuple with one tuple of ints per axis."""
    shape = tuple(int(n) for n in shape)
    ndim = len(shape)
    if isinstance(chunks, Mapping):
        chunks = tuple(chunks.get(ax, chunks.get(str(ax))) for ax in range(ndim))
    elif chunks is None or isinstance(chunks, (str, int, np.integer)) or chunks == -1:
        chunks = (chunks,) * ndim
    chunks = tuple(chunks)
    if len(chunks) != ndim:
        raise ValueError(
            f"chunks {chunks!r} give {len(chunks)} entries for an array of {ndim} axes "
            f"(shape {shape})."
        )
    auto = _auto_sides(shape, dtype, previous_chunks)
    out = []
    for ax, (spec, n) in enumerate(zip(chunks, shape)):
        if isinstance(spec, (tuple, list)):
            sizes = tuple(int(s) for s in spec)
            if sum(sizes) != n:
                raise ValueError(
                    f"chunks {sizes} along axis {ax} add up to {sum(sizes)}, not its length {n}."
                )
            out.append(sizes or (0,))
        elif spec is None or spec == -1:
            out.append((n,))
        elif isinstance(spec, str):
            if spec != "auto":
                raise ValueError(f"chunks: {spec!r} along axis {ax}; give an int, -1 or 'auto'.")
            out.append(_blocks(n, auto[ax]))
        else:
            out.append(_blocks(n, int(spec)))
    return tuple(out)


def page_shape(chunks: tuple[tuple[int, ...], ...]) -> tuple[int, ...]:
    """The page shape of a DiskArray with these (normalized) chunks: the first block
    of each axis. A `ValueError` if an axis has blocks of different sizes before
    its last (pages are all of one shape)."""
    sides = []
    for ax, blocks in enumerate(chunks):
        first = blocks[0] if blocks else 0
        if any(b != first for b in blocks[:-1]) or (blocks and blocks[-1] > first):
            raise ValueError(
                f"chunks {blocks} along axis {ax} are not regular: a DiskArray is stored in "
                "pages of one shape (every block but the last of one size, the last no "
                "larger). Give one size per axis, e.g. chunks={'time': 100}."
            )
        sides.append(max(1, first))
    return tuple(sides)


def nbytes(shape: Sequence[int], dtype: np.dtype | str) -> int:
    """The bytes of an array of ``shape`` and ``dtype``."""
    return math.prod(shape) * np.dtype(dtype).itemsize
