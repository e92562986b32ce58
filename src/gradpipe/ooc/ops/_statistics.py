"""The statistical functions of the array API standard, out of core.

`sum`, `mean`, `min` and `max` are the reductions of `_reduce`; `prod` is one too,
with the gradient JAX gives at zeros. `var` and `std` make two passes, a mean and a
sum of squared deviations from it, with nothing written in between;
`cumulative_sum` and `cumulative_prod` walk each line of tiles along the axis with
a running total carried from tile to tile. Block kernels here are written once
against an array namespace: their backward pass is JAX's VJP of them (`_kernel`),
so gradients are the ones `jax.numpy` gives.
"""

from __future__ import annotations

import builtins
import itertools
import math

import jax.numpy as jnp
import numpy as np

from ..arrays._hijax import type_of
from ..arrays._op import CustomOp, apply, frozen
from ..kernels._kernel import run_forward, run_vjp
from ..kernels._promotion import canonical_dtype, is_differentiable, to_primal_dtype
from ..kernels._x64 import jax_value_dtype
from ..planning._budget import plan_tiles
from ._blockwise import blockwise
from ._reduce import (
    Accumulation,
    Reduction,
    Spread,
    accumulated_dtype,
    all,
    any,
    default_accumulation,
    max,
    mean,
    min,
    normalize_axes,
    reduce,
    sum,
)

__all__ = [
    "all",
    "any",
    "cumprod",
    "cumsum",
    "cumulative_prod",
    "cumulative_sum",
    "max",
    "mean",
    "min",
    "prod",
    "std",
    "sum",
    "var",
]


# ---------------------------------------------------------------- product


@frozen
class Prod(Accumulation):
    """Product over ``axes``, in ``dtype`` or NumPy's (see `Accumulation`).

    The gradient is the product of the other elements, as in JAX, zeros included:
    from the product of the nonzero elements and their count, never a division by zero.
    """

    @property
    def name(self) -> str:
        return "prod"

    def forward_block(self, x):
        acc = self.accumulator_dtype(x.dtype)
        return np.prod(x, axis=self.axes, keepdims=self.keepdims, dtype=acc)

    def combine(self, acc, part):
        acc *= part
        return acc

    def backward(self, driver, inputs, output, g, wants):
        (x,) = inputs
        if not wants[0] or not is_differentiable(x.dtype):
            return [None]
        zeros = driver.forward(_CountZeros(self.axes, self.keepdims), [x])
        rest = driver.forward(_NonzeroProd(self.axes, self.keepdims, self.dtype), [x])
        return [driver.forward(_ProdGrad(self.axes, self.keepdims), [x, rest, g, zeros])]


@frozen
class _CountZeros(Reduction):
    def output_dtype(self, *_):
        return np.dtype(np.int64)

    def forward_block(self, x):
        return np.sum(x == 0, axis=self.axes, keepdims=self.keepdims, dtype=np.int64)


@frozen
class _NonzeroProd(Prod):
    """The product of the nonzero elements (1 where there are none)."""

    def forward_block(self, x):
        return super().forward_block(np.where(x == 0, np.ones((), x.dtype), x))


@frozen
class _ProdGrad(Spread):
    """``g`` times the product of the other elements: ``rest / x`` without zeros,
    ``rest`` at the one zero, 0 elsewhere (two zeros or more give 0 everywhere)."""

    def forward_block(self, x, rest, g, zeros):
        rest, g, zeros = (self._expand(v, x.ndim) for v in (rest, g, zeros))
        xr = x.astype(np.result_type(rest, g))
        is_zero = xr == 0
        with np.errstate(all="ignore"):
            others = np.where(
                zeros == 0,
                rest / np.where(is_zero, 1, xr),
                np.where(is_zero & (zeros == 1), rest, 0),
            )
            return to_primal_dtype(g * others, x.dtype)


def prod(x, /, *, axis=None, dtype=None, keepdims: bool = False, budget=None):
    """Product of ``x`` over ``axis``, out of core; ``dtype`` as in `sum`.

    Its gradient is JAX's: the product of the other elements (zeros included).
    """
    d = default_accumulation("prod", x, dtype)
    return reduce(lambda axes: Prod(axes, bool(keepdims), d), x, axis, budget)


# ---------------------------------------------------------------- var and std


def _squared_deviations(xp, x, m, *, axes, keepdims, work):
    """The sum over ``axes`` of ``|x - m|**2`` for one block, in the ``work`` dtype."""
    work = np.dtype(work)
    if not keepdims:
        m = xp.expand_dims(m, axis=axes)
    d = xp.astype(x, work) - xp.astype(m, work)
    square = xp.real(d * xp.conj(d)) if work.kind == "c" else d * d
    return xp.sum(square, axis=axes, keepdims=keepdims)


@frozen
class _SquaredDeviations(Reduction):
    """``sum(|x - m|**2) / divisor`` over ``axes``, ``m`` being the mean (output-shaped).

    The gradient reaches both ``x`` and ``m``, as JAX's does through ``jnp.var``.
    """

    divisor: float = 1.0

    @property
    def name(self) -> str:
        return "var"

    def _work(self, dx):
        dx = np.dtype(dx)
        return (
            np.dtype(np.float32)
            if dx == np.float16
            else np.result_type(dx, np.mean(np.zeros(1, dx)))
        )

    def _params(self, dx):
        return (("axes", self.axes), ("keepdims", self.keepdims), ("work", self._work(dx).str))

    def output_dtype(self, dx, dm):
        return np.var(np.zeros(2, dx)).dtype

    def accumulator_dtype(self, dx, dm):
        return np.real(np.zeros(1, self._work(dx))).dtype

    def forward_block(self, x, m):
        return run_forward(_squared_deviations, self._params(x.dtype), (x, m))

    def finish(self, acc):
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.asarray(acc) / np.asarray(self.divisor, np.asarray(acc).dtype)

    def backward_block(self, g, x, m):
        if not is_differentiable(x.dtype):
            return (None, None)
        with np.errstate(divide="ignore", invalid="ignore"):
            g = np.asarray(g) / np.asarray(self.divisor, np.asarray(g).dtype)
        gx, gm = run_vjp(_squared_deviations, self._params(x.dtype), g, (x, m), (True, True))
        return (to_primal_dtype(gx, x.dtype), to_primal_dtype(gm, m.dtype))


def _correction(correction, ddof, what: str):
    """The standard's ``correction``, or NumPy's name for it, ``ddof``."""
    if ddof is None:
        return correction
    if correction != 0.0:
        raise TypeError(f"{what}: give correction= or NumPy's ddof=, not both.")
    return ddof


def var(
    x,
    /,
    *,
    axis=None,
    correction: int | float = 0.0,
    keepdims: bool = False,
    ddof: int | float | None = None,
    budget=None,
):
    """Variance of ``x`` over ``axis``, out of core: the sum of squared deviations from
    the mean divided by ``N - correction`` (``N`` elements reduced; ``correction=1``
    gives the sample variance; ``ddof`` is NumPy's name for it). Two passes over
    ``x``; differentiable, as ``jnp.var``.

    **Returns:** a `DiskArray` in NumPy's dtype (float64 for ints, the real dtype for
    complex input), or a 0-d JAX array when every axis is reduced without ``keepdims``.
    """
    correction = _correction(correction, ddof, "var")
    if isinstance(correction, bool) or not isinstance(correction, (int, float, np.number)):
        raise TypeError(f"var: correction must be a real number, got {correction!r}.")
    t = type_of(x)
    if t is None:
        v = jnp.asarray(x)
        axes = normalize_axes(axis, v.ndim)
        dtype = canonical_dtype(np.var(np.zeros(2, v.dtype)).dtype)
        out = jnp.var(v, axis=axes, correction=correction, keepdims=bool(keepdims))
        return jnp.asarray(out, dtype)
    axes = normalize_axes(axis, len(t.shape))
    if _rounded_scalar(t, axes, keepdims):
        v = var(x, axis=axes, correction=correction, keepdims=True, budget=budget)
        return _only_element(v, "var")
    n = math.prod(t.shape[a] for a in axes)
    m = mean(x, axis=axes, keepdims=keepdims, budget=budget)
    op = _SquaredDeviations(axes, bool(keepdims), divisor=float(n - correction))
    return apply(op, x, m, budget=budget)


def _rounded_scalar(t, axes, keepdims) -> bool:
    """Whether var over ``axes`` of an array of type ``t`` is a 0-d result that JAX
    holds in fewer bits than NumPy's dtype (x64 off). Then it is computed with
    ``keepdims`` and its one element taken: a mean rounded to 32 bits would shift
    every deviation from it (and std's square root would round twice)."""
    if keepdims or not t.shape or len(axes) < len(t.shape):
        return False
    dtype = np.var(np.zeros(2, t.dtype)).dtype
    return canonical_dtype(dtype) != dtype


def _only_element(v, what: str):
    """The one element of a DiskArray of shape ``(1, ..., 1)``, as a 0-d JAX value
    (the result of ``what``)."""
    from ._layout import getitem

    t = type_of(v)
    jax_value_dtype(t.dtype, what)  # the warning names the function called
    return getitem(v, (0,) * len(t.shape))


def _sqrt(xp, v):
    return xp.sqrt(v)


def std(
    x,
    /,
    *,
    axis=None,
    correction: int | float = 0.0,
    keepdims: bool = False,
    ddof: int | float | None = None,
    budget=None,
):
    """Standard deviation of ``x`` over ``axis``: the square root of `var` (same
    arguments), out of core; differentiable, as ``jnp.std``."""
    correction = _correction(correction, ddof, "std")
    t = type_of(x)
    if t is not None:
        axes = normalize_axes(axis, len(t.shape))
        if _rounded_scalar(t, axes, keepdims):
            s = std(x, axis=axes, correction=correction, keepdims=True, budget=budget)
            return _only_element(s, "std")
    v = var(x, axis=axis, correction=correction, keepdims=keepdims, budget=budget)
    return blockwise(_sqrt, "std", v, budget=budget)


# ---------------------------------------------------------------- cumulative sums


def _cumulate(xp, x, carry, *, kind, axis, dtype):
    """One tile's running totals along ``axis``, continued from ``carry`` (the total
    before the tile, size 1 along the axis)."""
    dtype = np.dtype(dtype)
    x = xp.astype(x, dtype)
    if kind == "sum":
        return carry + xp.cumsum(x, axis=axis, dtype=dtype)
    return carry * xp.cumprod(x, axis=axis, dtype=dtype)


def _lines(shape, tile, axis):
    """Per line of tiles along ``axis``: the line's first-row region (size 1 along the
    axis) and its tiles' regions in order along the axis."""
    tile = [builtins.max(t, 1) for t in tile]
    starts = [
        range(0, builtins.max(n, 1), t) if a != axis else [0]
        for a, (n, t) in enumerate(zip(shape, tile))
    ]
    for corner in itertools.product(*starts):
        base = [slice(s, builtins.min(s + t, n)) for s, t, n in zip(corner, tile, shape)]
        base[axis] = slice(0, 1)
        line = []
        for s in range(0, shape[axis], tile[axis]):
            r = list(base)
            r[axis] = slice(s, builtins.min(s + tile[axis], shape[axis]))
            line.append(tuple(r))
        yield tuple(base), line


def _along(region, axis, start, stop):
    return tuple(slice(start, stop) if a == axis else r for a, r in enumerate(region))


@frozen
class Cumulative(CustomOp):
    """Running sums (``kind="sum"``) or products (``kind="prod"``) along ``axis``,
    in ``dtype`` (see `accumulated_dtype`); ``include_initial`` puts the empty
    total (0 or 1) first.

    Each line of tiles along the axis is walked in order, the last totals of one
    tile carried into the next, so only a tile and the carry are in memory. The
    backward pass walks the lines in reverse: each tile's VJP (JAX's, of the same
    kernel) gives the gradient of its input and of its carry, which is added to
    the previous tile's last cotangents.
    """

    kind: str
    axis: int
    include_initial: bool = False
    dtype: str | None = None

    @property
    def name(self) -> str:
        return f"cumulative_{self.kind}"

    def output_shape(self, s):
        return tuple(n + (a == self.axis and self.include_initial) for a, n in enumerate(s))

    def output_dtype(self, dx):
        return accumulated_dtype(self.name, dx, self.dtype)

    def _params(self, dx):
        return (
            ("axis", self.axis),
            ("dtype", np.dtype(self.output_dtype(dx)).str),
            ("kind", self.kind),
        )

    def _plan(self, driver, x, per_element: int, phase: str):
        out_item = np.dtype(self.output_dtype(x.dtype)).itemsize

        def bytes_for(tile):
            side = math.prod(t for a, t in enumerate(tile) if a != self.axis)
            return (math.prod(tile) * per_element + 2 * side) * out_item

        what = f"{self.name} ({phase})"
        return plan_tiles(tuple(x.shape), bytes_for, driver.budget, what=what)

    def _identity(self, region, dtype):
        shape = tuple(r.stop - r.start for r in region)
        return np.full(shape, 0 if self.kind == "sum" else 1, dtype)

    def forward(self, driver, x):
        dtype = np.dtype(self.output_dtype(x.dtype))
        out = driver.allocate(self.output_shape(x.shape), dtype)
        off, params = int(self.include_initial), self._params(x.dtype)
        try:
            for base, line in _lines(x.shape, self._plan(driver, x, 4, "forward"), self.axis):
                carry = self._identity(base, dtype)
                if self.include_initial:
                    out.write(base, carry)
                for r in line:
                    y = run_forward(_cumulate, params, (driver.read(x, r), carry))
                    s = r[self.axis]
                    out.write(_along(r, self.axis, s.start + off, s.stop + off), y)
                    carry = np.take(y, [-1], axis=self.axis)
        except BaseException:
            out.discard()
            raise
        return out.commit()

    def backward(self, driver, inputs, output, g, wants):
        (x,) = inputs
        if not wants[0] or not is_differentiable(x.dtype):
            return [None]
        dtype = np.dtype(self.output_dtype(x.dtype))
        grad = driver.allocate(x.shape, x.dtype)
        off, params, axis = int(self.include_initial), self._params(x.dtype), self.axis
        try:
            for base, line in _lines(x.shape, self._plan(driver, x, 12, "backward"), axis):
                carry_grad = None
                for r in reversed(line):
                    s = r[axis]
                    if s.start + off == 0:
                        carry = self._identity(base, dtype)
                    else:  # the total before this tile: the output just before it
                        carry = driver.read(
                            output, _along(r, axis, s.start + off - 1, s.start + off)
                        )
                    gb = np.array(driver.read(g, _along(r, axis, s.start + off, s.stop + off)))
                    if carry_grad is not None:
                        last = _along([slice(None)] * gb.ndim, axis, -1, None)
                        gb[last] += carry_grad
                    gx, carry_grad = run_vjp(
                        _cumulate, params, gb, (driver.read(x, r), carry), (True, True)
                    )
                    grad.write(r, to_primal_dtype(gx, x.dtype))
        except BaseException:
            grad.discard()
            raise
        return [grad.commit()]


def _cumulative(kind, x, axis, dtype, include_initial, budget):
    name = f"cumulative_{kind}"
    t = type_of(x)
    shape = t.shape if t is not None else np.shape(x)
    if not shape:
        raise ValueError(f"{name}: x must have at least one dimension, got a 0-d array.")
    if axis is None:
        if len(shape) > 1:
            raise ValueError(
                f"{name}: axis is required for an array of {len(shape)} dimensions (it may "
                "be omitted only for a 1-d array)."
            )
        axis = 0
    if not isinstance(axis, (int, np.integer)) or isinstance(axis, bool):
        raise TypeError(f"{name}: axis must be an int or None, got {axis!r}.")
    (axis,) = normalize_axes(axis, len(shape))
    op = Cumulative(kind, axis, bool(include_initial), default_accumulation(name, x, dtype))
    if t is None:
        v = jnp.asarray(x)
        out_dtype = canonical_dtype(op.output_dtype(v.dtype))
        fn = jnp.cumulative_sum if kind == "sum" else jnp.cumulative_prod
        return fn(v.astype(out_dtype), axis=axis, include_initial=bool(include_initial))
    return apply(op, x, budget=budget)


def cumulative_sum(x, /, *, axis=None, dtype=None, include_initial: bool = False, budget=None):
    """Running sums of ``x`` along ``axis`` (optional for a 1-d ``x``), out of core.

    **Arguments:**

    - `dtype`: the result's dtype (the sums are computed in it); by default the
      standard's, as for `sum`.
    - `include_initial`: start with the empty sum, 0 (the axis grows by one).

    **Returns:** a `DiskArray`. Differentiable, as ``jnp.cumulative_sum``.
    """
    return _cumulative("sum", x, axis, dtype, include_initial, budget)


def cumulative_prod(x, /, *, axis=None, dtype=None, include_initial: bool = False, budget=None):
    """Running products of ``x`` along ``axis``, out of core; see `cumulative_sum`
    (the initial value is 1). Differentiable, as ``jnp.cumulative_prod`` (zeros
    included: each tile's gradient is JAX's)."""
    return _cumulative("prod", x, axis, dtype, include_initial, budget)


def cumsum(x, /, axis=None, dtype=None, *, budget=None):
    """NumPy's ``cumsum``: `cumulative_sum` along ``axis``, over the flattened array
    when ``axis`` is None (as NumPy, and xarray, call it)."""
    return cumulative_sum(_flat_unless(x, axis), axis=axis, dtype=dtype, budget=budget)


def cumprod(x, /, axis=None, dtype=None, *, budget=None):
    """NumPy's ``cumprod``: `cumulative_prod` along ``axis`` (flattened when None)."""
    return cumulative_prod(_flat_unless(x, axis), axis=axis, dtype=dtype, budget=budget)


def _flat_unless(x, axis):
    from ._manipulation import reshape

    t = type_of(x)
    ndim = len(t.shape) if t is not None else np.ndim(x)
    return reshape(x, (-1,)) if axis is None and ndim != 1 else x
