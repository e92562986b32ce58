"""Transpose and slicing (rows, tiles, or any basic index of slices and ints)."""

from __future__ import annotations

import numpy as np

from .._hijax import type_of
from .._op import BlockParallelOp, apply, frozen

__all__ = ["GetItem", "Transpose", "getitem", "slice_rows", "slice_tile", "transpose"]


@frozen
class Transpose(BlockParallelOp):
    """Axes permuted as ``np.transpose(x, axes)``."""

    axes: tuple[int, ...]

    @property
    def name(self) -> str:
        return "transpose"

    def output_shape(self, s):
        return tuple(s[a] for a in self.axes)

    def index_map(self, out_r, red_r, s):
        region = [None] * len(s)
        for i, a in enumerate(self.axes):
            region[a] = out_r[i]
        return (tuple(region),)

    def forward_block(self, x):
        return np.ascontiguousarray(np.transpose(x, self.axes))

    def backward_block(self, g, x):
        return (np.ascontiguousarray(np.transpose(g, np.argsort(self.axes))),)


@frozen
class GetItem(BlockParallelOp):
    """``x[start:stop]`` per axis (unit step); axes in ``drop`` were indexed by an int."""

    start: tuple[int, ...]
    stop: tuple[int, ...]
    drop: tuple[bool, ...]

    @property
    def name(self) -> str:
        return "getitem"

    def output_shape(self, s):
        return tuple(b - a for a, b, d in zip(self.start, self.stop, self.drop) if not d)

    def index_map(self, out_r, red_r, s):
        it, region = iter(out_r), []
        for a, d in zip(self.start, self.drop):
            if d:
                region.append(slice(a, a + 1))
            else:
                r = next(it)
                region.append(slice(a + r.start, a + r.stop))
        return (tuple(region),)

    def forward_block(self, x):
        return x.reshape(tuple(n for n, d in zip(x.shape, self.drop) if not d))

    def backward_block(self, g, x):
        return (np.asarray(g).reshape(x.shape),)


def transpose(x, axes=None, *, budget=None):
    """``x`` with its axes permuted (reversed by default), out of core."""
    t = type_of(x)
    if t is None:
        raise TypeError(f"transpose(x): x must be a DiskArray, got {type(x).__name__}.")
    nd = len(t.shape)
    axes = tuple(reversed(range(nd))) if axes is None else tuple(a % nd for a in axes)
    if sorted(axes) != list(range(nd)):
        raise ValueError(f"transpose: axes {axes} is not a permutation of {tuple(range(nd))}.")
    return apply(Transpose(axes), x, budget=budget)


def getitem(x, index, *, budget=None):
    """``x[index]`` for an index of unit-step slices and ints (a basic slice).

    Fancy indexing (arrays, steps other than 1, ``None``) is refused with a
    `TypeError`; read tiles you need with `slice_rows`/`slice_tile`.
    """
    t = type_of(x)
    index = index if isinstance(index, tuple) else (index,)
    ellipses = [i for i, ix in enumerate(index) if ix is Ellipsis]
    if ellipses:
        i = ellipses[0]
        index = index[:i] + (slice(None),) * (len(t.shape) - len(index) + 1) + index[i + 1 :]
    if len(index) > len(t.shape):
        raise IndexError(f"too many indices ({len(index)}) for a DiskArray of shape {t.shape}.")
    index = index + (slice(None),) * (len(t.shape) - len(index))
    start, stop, drop = [], [], []
    for ax, (ix, n) in enumerate(zip(index, t.shape)):
        if isinstance(ix, (int, np.integer)) and not isinstance(ix, bool):
            i = int(ix) + n if ix < 0 else int(ix)
            if not 0 <= i < n:
                raise IndexError(f"index {ix} is out of bounds for axis {ax} of size {n}.")
            start.append(i), stop.append(i + 1), drop.append(True)
        elif isinstance(ix, slice):
            a, b, step = ix.indices(n)
            if step != 1:
                raise TypeError(
                    f"DiskArray slicing needs unit steps, got step {step} on axis {ax}."
                )
            start.append(a), stop.append(max(a, b)), drop.append(False)
        else:
            raise TypeError(
                f"DiskArray indices must be ints or unit-step slices, got {type(ix).__name__} "
                f"on axis {ax}."
            )
    return apply(GetItem(tuple(start), tuple(stop), tuple(drop)), x, budget=budget)


def slice_rows(x, start: int, stop: int, *, budget=None):
    """Rows ``start:stop`` of ``x`` (a new DiskArray; differentiable)."""
    return getitem(x, slice(start, stop), budget=budget)


def slice_tile(x, rows: tuple[int, int], cols: tuple[int, int], *, budget=None):
    """The tile ``x[rows[0]:rows[1], cols[0]:cols[1]]`` of a 2-D DiskArray."""
    return getitem(x, (slice(*rows), slice(*cols)), budget=budget)
