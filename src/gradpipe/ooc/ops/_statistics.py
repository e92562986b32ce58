"""The statistical functions of the array API standard, out of core.

`sum` and `mean` are the reductions of `_reduce`, `min` and `max` those of
`_extrema`; `prod` is one too, with the gradient JAX gives at zeros. `var` and
`std` make two passes, a mean and a sum of squared deviations from it, with
nothing written in between. Block kernels here are written once against an array
namespace: their backward pass is JAX's VJP of them (`_kernel`), so gradients are
the ones `jax.numpy` gives. The cumulative sums and products are in `_cumulative`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from types import ModuleType
from typing import Any, cast

import jax.numpy as jnp
import numpy as np
from numpy.typing import DTypeLike

from ..arrays._array import ArrayLike, Result
from ..arrays._hijax import DiskArrayType, type_of
from ..arrays._op import apply, frozen
from ..execution._driver import Driver, Value
from ..kernels._kernel import Params, run_forward, run_vjp
from ..kernels._promotion import canonical_dtype, is_differentiable, to_primal_dtype
from ..kernels._x64 import jax_value_dtype
from ._arg_types import BudgetLike
from ._blockwise import blockwise
from ._extrema import max, min
from ._reduce import (
    Accumulation,
    Reduction,
    Spread,
    all,
    any,
    default_accumulation,
    mean,
    normalize_axes,
    reduce,
    sum,
)

__all__ = ["all", "any", "max", "mean", "min", "prod", "std", "sum", "var"]


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

    def forward_block(self, x: np.ndarray) -> np.ndarray:
        acc = self.accumulator_dtype(x.dtype)
        return np.prod(x, axis=self.axes, keepdims=self.keepdims, dtype=acc)

    def combine(self, acc: np.ndarray, part: np.ndarray) -> np.ndarray:
        acc *= part
        return acc

    def backward(
        self,
        driver: Driver,
        inputs: Sequence[Value],
        output: Value,
        g: Value,
        wants: Sequence[bool],
    ) -> list[Value | None]:
        (x,) = inputs
        if not wants[0] or not is_differentiable(x.dtype):
            return [None]
        zeros = driver.forward(_CountZeros(self.axes, self.keepdims), [x])
        rest = driver.forward(_NonzeroProd(self.axes, self.keepdims, self.dtype), [x])
        return [driver.forward(_ProdGrad(self.axes, self.keepdims), [x, rest, g, zeros])]


@frozen
class _CountZeros(Reduction):
    def output_dtype(self, *_: np.dtype) -> np.dtype:
        return np.dtype(np.int64)

    def forward_block(self, x: np.ndarray) -> np.ndarray:
        count = np.sum(x == 0, axis=self.axes, keepdims=self.keepdims, dtype=np.int64)
        return cast(np.ndarray, count)  # a NumPy scalar when every axis is reduced


@frozen
class _NonzeroProd(Prod):
    """The product of the nonzero elements (1 where there are none)."""

    def forward_block(self, x: np.ndarray) -> np.ndarray:
        return super().forward_block(np.where(x == 0, np.ones((), x.dtype), x))


@frozen
class _ProdGrad(Spread):
    """``g`` times the product of the other elements: ``rest / x`` without zeros,
    ``rest`` at the one zero, 0 elsewhere (two zeros or more give 0 everywhere)."""

    def forward_block(
        self, x: np.ndarray, rest: np.ndarray, g: np.ndarray, zeros: np.ndarray
    ) -> np.ndarray:
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


def prod(
    x: ArrayLike,
    /,
    *,
    axis: int | tuple[int, ...] | None = None,
    dtype: DTypeLike | None = None,
    keepdims: bool = False,
    budget: BudgetLike = None,
) -> Result:
    """Product of ``x`` over ``axis``, out of core; ``dtype`` as in `sum`.

    Its gradient is JAX's: the product of the other elements (zeros included).
    """
    d = default_accumulation("prod", x, dtype)
    return reduce(lambda axes: Prod(axes, bool(keepdims), d), x, axis, budget)


# ---------------------------------------------------------------- var and std


def _squared_deviations(
    xp: ModuleType,
    x: Any,
    m: Any,
    *,
    axes: tuple[int, ...],
    keepdims: bool,
    work: DTypeLike,
) -> Any:
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

    def _work(self, dx: np.dtype) -> np.dtype:
        dx = np.dtype(dx)
        return (
            np.dtype(np.float32)
            if dx == np.float16
            else np.result_type(dx, np.mean(np.zeros(1, dx)))
        )

    def _params(self, dx: np.dtype) -> Params:
        return (("axes", self.axes), ("keepdims", self.keepdims), ("work", self._work(dx).str))

    def output_dtype(self, dx: np.dtype, dm: np.dtype) -> np.dtype:
        return np.var(np.zeros(2, dx)).dtype

    def accumulator_dtype(self, dx: np.dtype, dm: np.dtype) -> np.dtype:
        return np.real(np.zeros(1, self._work(dx))).dtype

    def forward_block(self, x: np.ndarray, m: np.ndarray) -> np.ndarray:
        return run_forward(_squared_deviations, self._params(x.dtype), (x, m))

    def finish(self, acc: np.ndarray) -> np.ndarray:
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.asarray(acc) / np.asarray(self.divisor, np.asarray(acc).dtype)

    def backward_block(
        self, g: np.ndarray, x: np.ndarray, m: np.ndarray
    ) -> tuple[np.ndarray | None, np.ndarray | None]:
        if not is_differentiable(x.dtype):
            return (None, None)
        with np.errstate(divide="ignore", invalid="ignore"):
            g = np.asarray(g) / np.asarray(self.divisor, np.asarray(g).dtype)
        gx, gm = run_vjp(_squared_deviations, self._params(x.dtype), g, (x, m), (True, True))
        assert gx is not None and gm is not None  # both were wanted
        return (to_primal_dtype(gx, x.dtype), to_primal_dtype(gm, m.dtype))


def _correction(correction: float, ddof: float | None, what: str) -> float:
    """The standard's ``correction``, or NumPy's name for it, ``ddof``."""
    if ddof is None:
        return correction
    if correction != 0.0:
        raise TypeError(f"{what}: give correction= or NumPy's ddof=, not both.")
    return ddof


def var(
    x: ArrayLike,
    /,
    *,
    axis: int | tuple[int, ...] | None = None,
    correction: int | float = 0.0,
    keepdims: bool = False,
    ddof: int | float | None = None,
    budget: BudgetLike = None,
) -> Result:
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
        kept = var(x, axis=axes, correction=correction, keepdims=True, budget=budget)
        return _only_element(kept, "var")
    n = math.prod(t.shape[a] for a in axes)
    m = mean(x, axis=axes, keepdims=keepdims, budget=budget)
    op = _SquaredDeviations(axes, bool(keepdims), divisor=float(n - correction))
    return apply(op, x, m, budget=budget)


def _rounded_scalar(t: DiskArrayType, axes: tuple[int, ...], keepdims: bool) -> bool:
    """Whether var over ``axes`` of an array of type ``t`` is a 0-d result that JAX
    holds in fewer bits than NumPy's dtype (x64 off). Then it is computed with
    ``keepdims`` and its one element taken: a mean rounded to 32 bits would shift
    every deviation from it (and std's square root would round twice)."""
    if keepdims or not t.shape or len(axes) < len(t.shape):
        return False
    dtype = np.var(np.zeros(2, t.dtype)).dtype
    return canonical_dtype(dtype) != dtype


def _only_element(v: Result, what: str) -> Result:
    """The one element of a DiskArray of shape ``(1, ..., 1)``, as a 0-d JAX value
    (the result of ``what``)."""
    from ._layout import getitem

    t = type_of(v)
    assert t is not None  # v is a DiskArray (or a traced one)
    jax_value_dtype(t.dtype, what)  # the warning names the function called
    return getitem(v, (0,) * len(t.shape))


def _sqrt(xp: ModuleType, v: Any) -> Any:
    return xp.sqrt(v)


def std(
    x: ArrayLike,
    /,
    *,
    axis: int | tuple[int, ...] | None = None,
    correction: int | float = 0.0,
    keepdims: bool = False,
    ddof: int | float | None = None,
    budget: BudgetLike = None,
) -> Result:
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
