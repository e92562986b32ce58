"""Reductions over axes: sum, mean, all and any, out of core (min and max: `_extrema`).

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
from collections.abc import Callable, Sequence
from typing import Any

import jax.numpy as jnp
import numpy as np
from numpy.typing import DTypeLike

from ..arrays._array import ArrayLike, Result
from ..arrays._handles import ConstantFile
from ..arrays._hijax import type_of
from ..arrays._op import BlockParallelOp, apply, frozen
from ..execution._driver import Driver, Value
from ..kernels._promotion import canonical_dtype, is_differentiable, to_primal_dtype
from ..kernels._x64 import accumulation_dtype
from ..planning._budget import MemoryBudget
from ..storage._paged_file import Region
from ._arg_types import BudgetLike
from ._row_reduction import as_block_map as row_block_map

__all__ = ["Logical", "Mean", "Sum", "all", "any", "mean", "sum"]


def normalize_axes(axis: Any, ndim: int) -> tuple[int, ...]:
    """``axis`` (None, an int or a tuple of ints) as sorted non-negative axes."""
    if axis is None:
        return tuple(range(ndim))

    def is_int(a: object) -> bool:
        return isinstance(a, (int, np.integer)) and not isinstance(a, (bool, np.bool_))

    axes: tuple[int, ...]
    if is_int(axis):
        axes = (int(axis),)
    elif isinstance(axis, (tuple, list)) and builtins.all(is_int(a) for a in axis):
        axes = tuple(int(a) for a in axis)
    else:
        raise TypeError(f"axis must be None, an int or a tuple of ints, got {axis!r}.")
    out: list[int] = []
    for a in axes:
        if not -ndim <= a < ndim:
            raise ValueError(f"axis {a} is out of range for an array of {ndim} dimensions.")
        out.append(a % ndim)
    if len(set(out)) != len(out):
        raise ValueError(f"duplicate value in axis {axis!r} (as NumPy refuses).")
    return tuple(sorted(out))


def accumulated_dtype(name: str, dx: DTypeLike | None, dtype: DTypeLike | None) -> np.dtype:
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

    def output_shape(self, s: tuple[int, ...], *_: tuple[int, ...]) -> tuple[int, ...]:
        return tuple(
            1 if a in self.axes else n
            for a, n in enumerate(s)
            if self.keepdims or a not in self.axes
        )

    def reduction_shape(self, s: tuple[int, ...], *_: tuple[int, ...]) -> tuple[int, ...]:
        return tuple(s[a] for a in self.axes)

    def index_map(
        self, out_r: Region, red_r: Region, s: tuple[int, ...], *small: tuple[int, ...]
    ) -> tuple[Region | None, ...]:
        """``x``'s block, then one output-shaped block per further (reduced) input."""
        out_it, red_it = iter(out_r), iter(red_r)
        region: list[slice] = []
        for a in range(len(s)):
            if a in self.axes:
                if self.keepdims:
                    next(out_it)
                region.append(next(red_it))
            else:
                region.append(next(out_it))
        return (tuple(region), *[out_r if sm else None for sm in small])

    def as_block_map(self, inputs: Sequence[Any], budget: MemoryBudget) -> Any:
        """This reduction as a block map for ``inputs``, or None (`_row_reduction`)."""
        return row_block_map(self, inputs, budget)

    def _expand(self, g: np.ndarray, ndim: int) -> np.ndarray:
        """``g`` with the reduced axes put back (as size 1) for broadcasting."""
        g = np.asarray(g)
        return g if self.keepdims else np.expand_dims(g, self.axes) if self.axes else g


@frozen
class Spread(Reduction):
    """Elementwise over ``x`` with output-shaped values of a reduction over the same
    axes broadcast back along them (the shape of a gradient through a reduction)."""

    def output_shape(self, s: tuple[int, ...], *_: tuple[int, ...]) -> tuple[int, ...]:
        return s

    def reduction_shape(self, *_: tuple[int, ...]) -> tuple[int, ...]:
        return ()

    def index_map(
        self, out_r: Region, red_r: Region, s: tuple[int, ...], *small: tuple[int, ...]
    ) -> tuple[Region | None, ...]:
        red = tuple(
            slice(0, 1) if a in self.axes else r
            for a, r in enumerate(out_r)
            if self.keepdims or a not in self.axes
        )
        return (out_r, *[red if sm else None for sm in small])

    def output_dtype(self, dx: np.dtype, *_: np.dtype) -> np.dtype:
        return dx


# ---------------------------------------------------------------- sum and mean


@frozen
class Accumulation(Reduction):
    """A sum or product in ``dtype`` or NumPy's (see `accumulated_dtype`); float16
    accumulates in float32 and is rounded once at the end (NumPy does so along the
    last axis; along others it rounds every step to float16, so this can be closer
    to the exact result)."""

    dtype: str | None = None

    def output_dtype(self, dx: np.dtype) -> np.dtype:
        return accumulated_dtype(self.name, dx, self.dtype)

    def accumulator_dtype(self, dx: np.dtype) -> np.dtype:
        out = np.dtype(self.output_dtype(dx))
        return np.dtype(np.float32) if out == np.float16 else out


@frozen
class Sum(Accumulation):
    """Sum over ``axes``, in ``dtype`` or NumPy's (see `Accumulation`). A small one
    waits until read, to share its pass with other sums of the same data (`_pending`)."""

    joins_passes = True
    one_pass_kind = "sum"  # its gradient can be computed in its pass (`_one_pass`)
    row_kind = "sum"  # over short axes of parameters' chain, a block map (`_row_reduction`)

    @property
    def name(self) -> str:
        return "sum"

    def _scale(self, block: np.ndarray) -> np.ndarray:
        return block

    def forward_block(self, x: np.ndarray) -> np.ndarray:
        return np.sum(
            x, axis=self.axes, keepdims=self.keepdims, dtype=self.accumulator_dtype(x.dtype)
        )

    def finish(self, acc: np.ndarray) -> np.ndarray:
        return self._scale(acc)

    @property
    def divisor(self) -> int | None:
        """What `finish` divides the sum by (None: nothing), for a pass that finishes
        its loss on a device (`execution._device_sums`)."""
        return None

    def joined_sum(self, axes: tuple[int, ...], dtype: DTypeLike) -> Sum:
        """A plain sum over ``axes`` in ``dtype``, keeping dims as this one does, with
        no finishing step: what a pass joining this sum with others runs, each then
        finishing its own slot in its own dtype (`execution._pending`; a mean's
        division in float32 would round a float64 mean)."""
        return Sum(axes, self.keepdims, np.dtype(dtype).str)

    def backward_block(self, g: np.ndarray, x: np.ndarray) -> tuple[np.ndarray]:
        g = self._scale(self._expand(g, x.ndim))
        return (to_primal_dtype(np.broadcast_to(g, x.shape), x.dtype).copy(),)

    def backward(
        self,
        driver: Driver,
        inputs: Sequence[Value],
        output: Value,
        g: Value,
        wants: Sequence[bool],
    ) -> Sequence[Value | ConstantFile | None]:
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
    one_pass_kind = "sum"
    row_kind = "mean"

    @property
    def name(self) -> str:
        return "mean"

    def output_dtype(self, dx: np.dtype) -> np.dtype:
        return np.mean(np.zeros(1, dx)).dtype

    @property
    def divisor(self) -> int | None:
        return self.count

    def _scale(self, block: np.ndarray) -> np.ndarray:
        block = np.asarray(block)
        if block.dtype == np.float16:  # a count past 65504 is inf in float16
            block = block.astype(np.float32)
        with np.errstate(invalid="ignore", divide="ignore"):
            return block / np.asarray(self.count, block.dtype)


# ---------------------------------------------------------------- all and any


@frozen
class Logical(Reduction):
    """Whether all (``kind="all"``) or any (``kind="any"``) elements along ``axes``
    are nonzero, as bools (NaN is nonzero, as in NumPy)."""

    kind: str = "all"

    @property
    def name(self) -> str:
        return self.kind

    def output_dtype(self, dx: np.dtype) -> np.dtype:
        return np.dtype(bool)

    def forward_block(self, x: np.ndarray) -> np.ndarray:
        return getattr(np, self.kind)(x, axis=self.axes, keepdims=self.keepdims)

    def combine(self, acc: np.ndarray, part: np.ndarray) -> np.ndarray:
        join = np.logical_and if self.kind == "all" else np.logical_or
        if isinstance(acc, np.ndarray) and acc.shape:
            return join(acc, part, out=acc)
        return join(acc, part)


# ---------------------------------------------------------------- public functions


def reduce(
    make: Callable[[tuple[int, ...]], Reduction],
    x: ArrayLike,
    axis: int | tuple[int, ...] | None,
    budget: BudgetLike,
    in_memory: Callable[..., Any] | None = None,
) -> Result:
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


def dtype_str(name: str, dtype: DTypeLike | None) -> str | None:
    return None if dtype is None else accumulated_dtype(name, None, dtype).str


def default_accumulation(name: str, x: ArrayLike, dtype: DTypeLike | None) -> str | None:
    """The ``dtype`` parameter of a sum or product of ``x``: ``dtype`` when given,
    else for bools and ints the default of `accumulation_dtype` (which follows
    ``jax_enable_x64`` now, when the function is called), else None (kept)."""
    if dtype is not None:
        return dtype_str(name, dtype)
    t = type_of(x)
    dx = t.dtype if t is not None else jnp.asarray(x).dtype
    return accumulation_dtype(dx).str if np.dtype(dx).kind in "biu" else None


def sum(
    x: ArrayLike,
    /,
    *,
    axis: int | tuple[int, ...] | None = None,
    dtype: DTypeLike | None = None,
    keepdims: bool = False,
    budget: BudgetLike = None,
) -> Result:
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


def mean(
    x: ArrayLike,
    /,
    *,
    axis: int | tuple[int, ...] | None = None,
    keepdims: bool = False,
    budget: BudgetLike = None,
) -> Result:
    """Mean of ``x`` over ``axis``, out of core; see `sum`. Ints and bools give float64,
    as in NumPy (a 0-d mean becomes a float32 JAX value while x64 is off)."""
    t = type_of(x)
    shape = t.shape if t is not None else np.shape(x)

    def make(axes: tuple[int, ...]) -> Mean:
        count = int(np.prod([shape[a] for a in axes], dtype=np.int64))
        return Mean(axes, bool(keepdims), count=count)

    return reduce(make, x, axis, budget)


def all(
    x: ArrayLike,
    /,
    *,
    axis: int | tuple[int, ...] | None = None,
    keepdims: bool = False,
    budget: BudgetLike = None,
) -> Result:
    """Whether every element of ``x`` along ``axis`` is nonzero (True over an empty
    axis), out of core: a bool `DiskArray`, or a 0-d bool JAX array. No gradient."""
    return reduce(lambda axes: Logical(axes, bool(keepdims), "all"), x, axis, budget)


def any(
    x: ArrayLike,
    /,
    *,
    axis: int | tuple[int, ...] | None = None,
    keepdims: bool = False,
    budget: BudgetLike = None,
) -> Result:
    """Whether some element of ``x`` along ``axis`` is nonzero (False over an empty
    axis), out of core: a bool `DiskArray`, or a 0-d bool JAX array. No gradient."""
    return reduce(lambda axes: Logical(axes, bool(keepdims), "any"), x, axis, budget)
