"""Extrema over axes: `max` and `min`, out of core.

They are reductions of `_reduce` whose partials are folded with ``np.maximum`` or
``np.minimum``. The gradient is shared equally among tied extrema, as in JAX: a
second pass counts the ties (`_CountEqual`) and a third spreads ``g`` over them
(`_TieShare`). NumPy refuses an extremum over an empty axis, and so do they.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

import jax.numpy as jnp
import numpy as np

from ..arrays._array import ArrayLike, Result
from ..arrays._hijax import type_of
from ..arrays._op import frozen
from ..execution._driver import Driver, Value
from ._arg_types import BudgetLike
from ._reduce import Reduction, Spread, normalize_axes, reduce

__all__ = ["Max", "Min", "max", "min"]


@frozen
class Max(Reduction):
    """Maximum over ``axes``; the gradient is shared equally among tied maxima, as in JAX."""

    backward_uses_output = True
    one_pass_kind = "max"  # its gradient can be computed in its pass (`_one_pass`)
    row_kind = "max"  # over short axes of parameters' chain, a block map (`_row_reduction`)

    @property
    def name(self) -> str:
        return "max"

    def forward_block(self, x: np.ndarray) -> np.ndarray:
        return np.max(x, axis=self.axes, keepdims=self.keepdims)

    def _pick(self, a: np.ndarray, b: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        return np.maximum(a, b, out=out)

    def combine(self, acc: np.ndarray, part: np.ndarray) -> np.ndarray:
        if isinstance(acc, np.ndarray) and acc.shape:
            return self._pick(acc, part, out=acc)
        return self._pick(acc, part)

    def backward(
        self,
        driver: Driver,
        inputs: Sequence[Value],
        output: Value,
        g: Value,
        wants: Sequence[bool],
    ) -> list[Value | None]:
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

    one_pass_kind = "min"
    row_kind = "min"

    @property
    def name(self) -> str:
        return "min"

    def forward_block(self, x: np.ndarray) -> np.ndarray:
        return np.min(x, axis=self.axes, keepdims=self.keepdims)

    def _pick(self, a: np.ndarray, b: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        return np.minimum(a, b, out=out)


@frozen
class _CountEqual(Reduction):
    """How many elements along ``axes`` equal the extremum (for tie splitting), as
    int64: float16 would miscount past 2048 ties."""

    def output_dtype(self, *_: np.dtype) -> np.dtype:
        return np.dtype(np.int64)

    def forward_block(self, x: np.ndarray, m: np.ndarray) -> np.ndarray:
        equal = x == self._expand(m, x.ndim)
        count = np.sum(equal, axis=self.axes, keepdims=self.keepdims, dtype=np.int64)
        return cast(np.ndarray, count)  # a NumPy scalar when every axis is reduced


@frozen
class _TieShare(Spread):
    """``g`` where ``x`` is the extremum ``m``, divided by the tie count ``c``."""

    def forward_block(
        self, x: np.ndarray, m: np.ndarray, g: np.ndarray, c: np.ndarray
    ) -> np.ndarray:
        m, g, c = (self._expand(v, x.ndim) for v in (m, g, c))
        with np.errstate(divide="ignore", invalid="ignore"):
            share = g / c
        # times the tie mask, as JAX's rule: a NaN or infinite cotangent gives NaN to
        # every element of its group (0 * inf), and so does a NaN extremum, which
        # equals no element (count 0: g / 0 is never finite), rather than a zero
        # gradient that would hide the NaN
        return (share * (x == m)).astype(x.dtype)


def _refuse_empty(
    name: str, shape: tuple[int, ...], dtype: np.dtype, axes: tuple[int, ...]
) -> None:
    """NumPy refuses a min or max over an empty axis (no identity) unless the result
    is empty too; a stand-in with every other side cut to 1 says which."""
    stand_in = np.empty(tuple(n and 1 for n in shape), dtype)
    try:
        getattr(np, name)(stand_in, axis=axes)
    except ValueError as error:
        raise ValueError(f"{name} over axes {axes} of shape {tuple(shape)}: {error}.") from None


def _extremum(
    op_cls: type[Max],
    x: ArrayLike,
    axis: int | tuple[int, ...] | None,
    keepdims: bool,
    budget: BudgetLike,
) -> Result:
    t = type_of(x)
    shape, dtype = (t.shape, t.dtype) if t is not None else (np.shape(x), jnp.asarray(x).dtype)
    op = op_cls(normalize_axes(axis, len(shape)), bool(keepdims))
    _refuse_empty(op.name, shape, dtype, op.axes)
    return reduce(lambda axes: op, x, axis, budget)


def max(
    x: ArrayLike,
    /,
    *,
    axis: int | tuple[int, ...] | None = None,
    keepdims: bool = False,
    budget: BudgetLike = None,
) -> Result:
    """Maximum of ``x`` over ``axis``, out of core (NaN propagates, as in NumPy); see
    `sum`. Tied maxima share the gradient equally, as in JAX."""
    return _extremum(Max, x, axis, keepdims, budget)


def min(
    x: ArrayLike,
    /,
    *,
    axis: int | tuple[int, ...] | None = None,
    keepdims: bool = False,
    budget: BudgetLike = None,
) -> Result:
    """Minimum of ``x`` over ``axis``, out of core (NaN propagates, as in NumPy); see
    `sum`. Tied minima share the gradient equally, as in JAX."""
    return _extremum(Min, x, axis, keepdims, budget)
