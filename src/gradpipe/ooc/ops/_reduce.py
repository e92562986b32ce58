"""Sum, mean and max over axes (all axes gives a scalar, the usual loss)."""

from __future__ import annotations

import math

import numpy as np

from .._handles import ConstantFile
from .._hijax import type_of
from .._op import BlockParallelOp, apply, frozen
from .._promotion import is_differentiable, to_primal_dtype

__all__ = ["Max", "Mean", "Sum", "max", "mean", "sum"]


def _norm_axes(axis, ndim: int) -> tuple[int, ...]:
    if axis is None:
        return tuple(range(ndim))

    def is_int(a):
        return isinstance(a, (int, np.integer)) and not isinstance(a, (bool, np.bool_))

    if is_int(axis):
        axes = (int(axis),)
    elif isinstance(axis, (tuple, list)) and all(is_int(a) for a in axis):
        axes = tuple(int(a) for a in axis)
    else:
        raise TypeError(f"axis must be None, an int or a tuple of ints, got {axis!r}.")
    out = []
    for a in axes:
        if not -ndim <= a < ndim:
            raise ValueError(f"axis {a} is out of range for an array of {ndim} dimensions.")
        out.append(a % ndim)
    if len(set(out)) != len(out):
        raise ValueError(f"duplicate value in axis {axis!r} (as NumPy refuses).")
    return tuple(sorted(out))


@frozen
class _Reduction(BlockParallelOp):
    axes: tuple[int, ...]
    keepdims: bool = False

    def output_shape(self, s, *_):
        return tuple(
            1 if a in self.axes else n
            for a, n in enumerate(s)
            if self.keepdims or a not in self.axes
        )

    def reduction_shape(self, s, *_):
        return tuple(s[a] for a in self.axes)

    def index_map(self, out_r, red_r, s):
        out_it, red_it, region = iter(out_r), iter(red_r), []
        for a in range(len(s)):
            if a in self.axes:
                if self.keepdims:
                    next(out_it)
                region.append(next(red_it))
            else:
                region.append(next(out_it))
        return (tuple(region),)

    def _expand(self, g, ndim):
        """``g`` with the reduced axes put back (as size 1) for broadcasting."""
        g = np.asarray(g)
        return g if self.keepdims else np.expand_dims(g, self.axes) if self.axes else g


@frozen
class Sum(_Reduction):
    """Sum over ``axes``, in NumPy's dtype: small ints and bools sum as the platform
    int (int64), unsigned ones as uint64. float16 accumulates in float32 and is
    rounded once at the end (NumPy does so along the last axis; along others it
    rounds every addition to float16, so this can be closer to the true sum)."""

    @property
    def name(self) -> str:
        return "sum"

    def output_dtype(self, dx):
        return np.sum(np.zeros(1, dx)).dtype

    def accumulator_dtype(self, dx) -> np.dtype:
        out = np.dtype(self.output_dtype(dx))
        return np.dtype(np.float32) if out == np.float16 else out

    def _scale(self, block):
        return block

    def forward_block(self, x):
        return np.sum(
            x, axis=self.axes, keepdims=self.keepdims, dtype=self.accumulator_dtype(x.dtype)
        )

    def finish(self, acc):
        return self._scale(acc)

    def backward_block(self, g, x):
        g = self._scale(self._expand(g, x.ndim))
        return (to_primal_dtype(np.broadcast_to(g, x.shape), x.dtype).copy(),)

    def backward(self, driver, inputs, output, g, wants):
        (x,) = inputs
        if not is_differentiable(x.dtype):
            return [None]
        if wants[0] and isinstance(g, np.ndarray) and g.shape == () and not self.keepdims:
            # the gradient of a full sum is one value everywhere: no need to write it
            return [ConstantFile(x.shape, x.dtype, to_primal_dtype(self._scale(g), x.dtype))]
        return super().backward(driver, inputs, output, g, wants)


@frozen
class Mean(Sum):
    """Mean over ``axes`` (``count`` elements each), in NumPy's dtype: float64 for
    ints and bools (accumulated in float64, so never overflowing), float16 for
    float16 (accumulated in float32); the sum is divided once, at the end. Empty
    axes give NaN, as in NumPy."""

    count: int = 1

    @property
    def name(self) -> str:
        return "mean"

    def output_dtype(self, dx):
        return np.mean(np.zeros(1, dx)).dtype

    def _scale(self, block):
        block = np.asarray(block)
        if block.dtype == np.float16:  # a count past 65504 is inf in float16
            block = block.astype(np.float32)
        with np.errstate(invalid="ignore", divide="ignore"):
            return block / np.asarray(self.count, block.dtype)


@frozen
class Max(_Reduction):
    """Maximum over ``axes``; the gradient is shared equally among tied maxima, as in JAX."""

    backward_uses_output = True

    @property
    def name(self) -> str:
        return "max"

    def forward_block(self, x):
        return np.max(x, axis=self.axes, keepdims=self.keepdims)

    def combine(self, acc, part):
        if isinstance(acc, np.ndarray) and acc.shape:
            return np.maximum(acc, part, out=acc)
        return np.maximum(acc, part)

    def backward(self, driver, inputs, output, g, wants):
        (x,) = inputs
        if not wants[0]:
            return [None]
        count = driver.forward(_CountEqual(self.axes, self.keepdims), [x, output])
        return [driver.forward(_MaxGrad(self.axes, self.keepdims), [x, output, g, count])]


@frozen
class _CountEqual(_Reduction):
    """How many elements along ``axes`` equal the maximum (for tie splitting), as
    int64: float16 would miscount past 2048 ties."""

    def output_dtype(self, *_):
        return np.dtype(np.int64)

    def forward_block(self, x, m):
        equal = x == self._expand(m, x.ndim)
        return np.sum(equal, axis=self.axes, keepdims=self.keepdims, dtype=np.int64)

    def index_map(self, out_r, red_r, s, sm):
        return (super().index_map(out_r, red_r, s)[0], out_r if sm else None)


@frozen
class _MaxGrad(_Reduction):
    """Elementwise over ``x``: ``g`` where ``x`` is a maximum, divided by the tie count."""

    def output_shape(self, s, *_):
        return s

    def reduction_shape(self, *_):
        return ()

    def index_map(self, out_r, red_r, s, *small):
        red = tuple(
            slice(0, 1) if a in self.axes else r
            for a, r in enumerate(out_r)
            if self.keepdims or a not in self.axes
        )
        return (out_r, *[red if sm else None for sm in small])

    def output_dtype(self, dx, *_):
        return dx

    def forward_block(self, x, m, g, c):
        m, g, c = (self._expand(v, x.ndim) for v in (m, g, c))
        with np.errstate(divide="ignore", invalid="ignore"):
            share = g / c
        # a NaN maximum equals no element (count 0): its whole group gets NaN, as
        # in JAX, rather than a zero gradient that would hide the NaN
        return np.where(x == m, share, np.where(c == 0, np.nan, 0)).astype(x.dtype)


def _reduce(op_cls, x, axis, keepdims, budget, **extra):
    t = type_of(x)
    if t is None:
        raise TypeError(
            f"{op_cls.__name__.lower()}(x): x must be a DiskArray, got {type(x).__name__}."
        )
    axes = _norm_axes(axis, len(t.shape))
    if op_cls is Max:
        # NumPy refuses a maximum over an empty axis (it has no identity) unless the
        # result is empty too; a stand-in with every other side cut to 1 says which.
        stand_in = np.empty(tuple(n and 1 for n in t.shape), t.dtype)
        try:
            np.max(stand_in, axis=axes)
        except ValueError as error:
            raise ValueError(f"max over axes {axes} of shape {t.shape}: {error}.") from None
    return apply(op_cls(axes, bool(keepdims), **extra), x, budget=budget)


def sum(x, axis=None, keepdims: bool = False, *, budget=None):
    """Sum of a DiskArray over ``axis`` (an int, a tuple, or None for all axes).

    **Returns:** a `DiskArray`, or a 0-d JAX array when every axis is reduced
    without ``keepdims`` (the form a loss takes).
    """
    return _reduce(Sum, x, axis, keepdims, budget)


def mean(x, axis=None, keepdims: bool = False, *, budget=None):
    """Mean of a DiskArray over ``axis``; see `sum`. Ints and bools give float64."""
    t = type_of(x)
    if t is None:
        raise TypeError(f"mean(x): x must be a DiskArray, got {type(x).__name__}.")
    count = math.prod(t.shape[a] for a in _norm_axes(axis, len(t.shape)))
    return _reduce(Mean, x, axis, keepdims, budget, count=count)


def max(x, axis=None, keepdims: bool = False, *, budget=None):
    """Maximum of a DiskArray over ``axis``; see `sum`."""
    return _reduce(Max, x, axis, keepdims, budget)
