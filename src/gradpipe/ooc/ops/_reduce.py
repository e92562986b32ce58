"""Reductions over axes: sum, mean, min, max, all and any, out of core.

A reduction loops over the output's tiles with the reduced axes as its reduction
loop: each step reduces one input block and `combine` folds the partial into the
output tile, so only output tiles and one input block are ever in memory. All axes
reduced without ``keepdims`` give a 0-d JAX array (the usual loss), of a 32-bit
dtype for a 64-bit one while ``jax_enable_x64`` is off (see `_x64`). With no
`DiskArray` argument the function runs in memory on ``jax.numpy``, with the same
dtypes.
"""

from __future__ import annotations

import builtins

import jax.numpy as jnp
import numpy as np

from ..arrays._handles import ConstantFile
from ..arrays._hijax import type_of
from ..arrays._op import BlockParallelOp, apply, frozen
from ..kernels._promotion import canonical_dtype, is_differentiable, to_primal_dtype
from ..kernels._x64 import accumulation_dtype

__all__ = ["Logical", "Max", "Mean", "Min", "Sum", "all", "any", "max", "mean", "min", "sum"]


def normalize_axes(axis, ndim: int) -> tuple[int, ...]:
    """``axis`` (None, an int or a tuple of ints) as sorted non-negative axes."""
    if axis is None:
        return tuple(range(ndim))

    def is_int(a):
        return isinstance(a, (int, np.integer)) and not isinstance(a, (bool, np.bool_))

    if is_int(axis):
        axes = (int(axis),)
    elif isinstance(axis, (tuple, list)) and builtins.all(is_int(a) for a in axis):
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


def accumulated_dtype(name: str, dx, dtype) -> np.dtype:
    """The dtype of ``sum``/``prod``/``cumulative_sum``... of ``dx`` values: ``dtype``
    when given, else NumPy's: bools and signed ints give int64, unsigned ints
    uint64, floating types keep theirs. (The public functions pass the default of
    `default_accumulation`, which follows ``jax_enable_x64``.)"""
    if dtype is not None:
        try:
            return np.dtype(dtype)
        except TypeError:
            raise TypeError(f"{name}: dtype must be a data type or None, got {dtype!r}.") from None
    return np.sum(np.zeros(1, dx)).dtype


@frozen
class Reduction(BlockParallelOp):
    """The base of reductions over ``axes``: the output drops them (or keeps them as
    size 1 with ``keepdims``); each step reads ``x``'s block for one output tile and
    one tile of the reduced axes."""

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

    def index_map(self, out_r, red_r, s, *small):
        """``x``'s block, then one output-shaped block per further (reduced) input."""
        out_it, red_it, region = iter(out_r), iter(red_r), []
        for a in range(len(s)):
            if a in self.axes:
                if self.keepdims:
                    next(out_it)
                region.append(next(red_it))
            else:
                region.append(next(out_it))
        return (tuple(region), *[out_r if sm else None for sm in small])

    def _expand(self, g, ndim):
        """``g`` with the reduced axes put back (as size 1) for broadcasting."""
        g = np.asarray(g)
        return g if self.keepdims else np.expand_dims(g, self.axes) if self.axes else g


@frozen
class Spread(Reduction):
    """Elementwise over ``x`` with output-shaped values of a reduction over the same
    axes broadcast back along them (the shape of a gradient through a reduction)."""

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


# ---------------------------------------------------------------- sum and mean


@frozen
class Accumulation(Reduction):
    """A sum or product in ``dtype`` or NumPy's (see `accumulated_dtype`); float16
    accumulates in float32 and is rounded once at the end (NumPy does so along the
    last axis; along others it rounds every step to float16, so this can be closer
    to the exact result)."""

    dtype: str | None = None

    def output_dtype(self, dx):
        return accumulated_dtype(self.name, dx, self.dtype)

    def accumulator_dtype(self, dx) -> np.dtype:
        out = np.dtype(self.output_dtype(dx))
        return np.dtype(np.float32) if out == np.float16 else out


@frozen
class Sum(Accumulation):
    """Sum over ``axes``, in ``dtype`` or NumPy's (see `Accumulation`). A small one
    waits until read, to share its pass with other sums of the same data (`_pending`)."""

    joins_passes = True

    @property
    def name(self) -> str:
        return "sum"

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


# ---------------------------------------------------------------- extrema


@frozen
class Max(Reduction):
    """Maximum over ``axes``; the gradient is shared equally among tied maxima, as in JAX."""

    backward_uses_output = True

    @property
    def name(self) -> str:
        return "max"

    def forward_block(self, x):
        return np.max(x, axis=self.axes, keepdims=self.keepdims)

    def _pick(self, a, b, out=None):
        return np.maximum(a, b, out=out)

    def combine(self, acc, part):
        if isinstance(acc, np.ndarray) and acc.shape:
            return self._pick(acc, part, out=acc)
        return self._pick(acc, part)

    def backward(self, driver, inputs, output, g, wants):
        (x,) = inputs
        if not wants[0]:
            return [None]
        if output.dtype != x.dtype:
            # a 0-d extremum JAX holds rounded (x64 off) equals no element: the exact
            # one again, so ties are found
            output = driver.forward(self, [x])
        count = driver.forward(_CountEqual(self.axes, self.keepdims), [x, output])
        return [driver.forward(_TieShare(self.axes, self.keepdims), [x, output, g, count])]


@frozen
class Min(Max):
    """Minimum over ``axes``; the gradient is shared equally among tied minima, as in JAX."""

    @property
    def name(self) -> str:
        return "min"

    def forward_block(self, x):
        return np.min(x, axis=self.axes, keepdims=self.keepdims)

    def _pick(self, a, b, out=None):
        return np.minimum(a, b, out=out)


@frozen
class _CountEqual(Reduction):
    """How many elements along ``axes`` equal the extremum (for tie splitting), as
    int64: float16 would miscount past 2048 ties."""

    def output_dtype(self, *_):
        return np.dtype(np.int64)

    def forward_block(self, x, m):
        equal = x == self._expand(m, x.ndim)
        return np.sum(equal, axis=self.axes, keepdims=self.keepdims, dtype=np.int64)


@frozen
class _TieShare(Spread):
    """``g`` where ``x`` is the extremum ``m``, divided by the tie count ``c``."""

    def forward_block(self, x, m, g, c):
        m, g, c = (self._expand(v, x.ndim) for v in (m, g, c))
        with np.errstate(divide="ignore", invalid="ignore"):
            share = g / c
        # a NaN extremum equals no element (count 0): its whole group gets NaN, as
        # in JAX, rather than a zero gradient that would hide the NaN
        return np.where(x == m, share, np.where(c == 0, np.nan, 0)).astype(x.dtype)


# ---------------------------------------------------------------- all and any


@frozen
class Logical(Reduction):
    """Whether all (``kind="all"``) or any (``kind="any"``) elements along ``axes``
    are nonzero, as bools (NaN is nonzero, as in NumPy)."""

    kind: str = "all"

    @property
    def name(self) -> str:
        return self.kind

    def output_dtype(self, dx):
        return np.dtype(bool)

    def forward_block(self, x):
        return getattr(np, self.kind)(x, axis=self.axes, keepdims=self.keepdims)

    def combine(self, acc, part):
        join = np.logical_and if self.kind == "all" else np.logical_or
        if isinstance(acc, np.ndarray) and acc.shape:
            return join(acc, part, out=acc)
        return join(acc, part)


# ---------------------------------------------------------------- public functions


def reduce(make, x, axis, budget, in_memory=None):
    """Run the reduction ``make(axes)`` on ``x``, out of core for a `DiskArray`.

    Anything else runs in memory as ``in_memory(x, axis=axes, keepdims=...)``
    (default: the ``jax.numpy`` function of the operation's name), cast to the
    operation's dtype; a sum or product computes in that dtype.
    """
    t = type_of(x)
    if t is not None:
        return apply(make(normalize_axes(axis, len(t.shape))), x, budget=budget)
    x = jnp.asarray(x)
    op = make(normalize_axes(axis, x.ndim))
    dtype = canonical_dtype(op.output_dtype(x.dtype))  # jax.numpy computed in 32 bits
    if isinstance(op, Accumulation):
        x = x.astype(dtype)
    fn = in_memory or getattr(jnp, op.name)
    return jnp.asarray(fn(x, axis=op.axes, keepdims=op.keepdims), dtype)


def dtype_str(name, dtype):
    return None if dtype is None else accumulated_dtype(name, None, dtype).str


def default_accumulation(name, x, dtype) -> str | None:
    """The ``dtype`` parameter of a sum or product of ``x``: ``dtype`` when given,
    else for bools and ints the default of `accumulation_dtype` (which follows
    ``jax_enable_x64`` now, when the function is called), else None (kept)."""
    if dtype is not None:
        return dtype_str(name, dtype)
    t = type_of(x)
    dx = t.dtype if t is not None else jnp.asarray(x).dtype
    return accumulation_dtype(dx).str if np.dtype(dx).kind in "biu" else None


def _refuse_empty(name, shape, dtype, axes):
    """NumPy refuses a min or max over an empty axis (no identity) unless the result
    is empty too; a stand-in with every other side cut to 1 says which."""
    stand_in = np.empty(tuple(n and 1 for n in shape), dtype)
    try:
        getattr(np, name)(stand_in, axis=axes)
    except ValueError as error:
        raise ValueError(f"{name} over axes {axes} of shape {tuple(shape)}: {error}.") from None


def sum(x, /, *, axis=None, dtype=None, keepdims: bool = False, budget=None):
    """Sum of ``x`` over ``axis`` (an int, a tuple, or None for all axes), out of core.

    **Arguments:**

    - `dtype`: the result's dtype (the sum is computed in it); by default
      ``jax.numpy``'s: bools and signed ints give the default int (int32 while
      ``jax_enable_x64`` is off, int64 while on; int64 stays int64), unsigned ints
      the unsigned int of its width; floating types keep theirs.
    - `keepdims`: keep the reduced axes, with size 1.

    **Returns:** a `DiskArray`, or a 0-d JAX array when every axis is reduced
    without ``keepdims`` (the form a loss takes).
    """
    d = default_accumulation("sum", x, dtype)
    return reduce(lambda axes: Sum(axes, bool(keepdims), d), x, axis, budget)


def mean(x, /, *, axis=None, keepdims: bool = False, budget=None):
    """Mean of ``x`` over ``axis``, out of core; see `sum`. Ints and bools give float64,
    as in NumPy (a 0-d mean becomes a float32 JAX value while x64 is off)."""
    t = type_of(x)
    shape = t.shape if t is not None else np.shape(x)

    def make(axes):
        count = int(np.prod([shape[a] for a in axes], dtype=np.int64))
        return Mean(axes, bool(keepdims), count=count)

    return reduce(make, x, axis, budget)


def _extremum(op_cls, x, axis, keepdims, budget):
    t = type_of(x)
    shape, dtype = (t.shape, t.dtype) if t is not None else (np.shape(x), jnp.asarray(x).dtype)
    op = op_cls(normalize_axes(axis, len(shape)), bool(keepdims))
    _refuse_empty(op.name, shape, dtype, op.axes)
    return reduce(lambda axes: op, x, axis, budget)


def max(x, /, *, axis=None, keepdims: bool = False, budget=None):
    """Maximum of ``x`` over ``axis``, out of core (NaN propagates, as in NumPy); see
    `sum`. Tied maxima share the gradient equally, as in JAX."""
    return _extremum(Max, x, axis, keepdims, budget)


def min(x, /, *, axis=None, keepdims: bool = False, budget=None):
    """Minimum of ``x`` over ``axis``, out of core (NaN propagates, as in NumPy); see
    `sum`. Tied minima share the gradient equally, as in JAX."""
    return _extremum(Min, x, axis, keepdims, budget)


def all(x, /, *, axis=None, keepdims: bool = False, budget=None):
    """Whether every element of ``x`` along ``axis`` is nonzero (True over an empty
    axis), out of core: a bool `DiskArray`, or a 0-d bool JAX array. No gradient."""
    return reduce(lambda axes: Logical(axes, bool(keepdims), "all"), x, axis, budget)


def any(x, /, *, axis=None, keepdims: bool = False, budget=None):
    """Whether some element of ``x`` along ``axis`` is nonzero (False over an empty
    axis), out of core: a bool `DiskArray`, or a 0-d bool JAX array. No gradient."""
    return reduce(lambda axes: Logical(axes, bool(keepdims), "any"), x, axis, budget)
