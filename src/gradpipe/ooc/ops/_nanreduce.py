"""Reductions that skip NaNs (NumPy's ``nansum``, ``nanmean``, ...), out of core.

They are not in the array API standard, but xarray skips missing values by default
for floating data and asks an array's namespace for them by NumPy's names; without
them it would hand the array to NumPy, which reads it whole into memory.

Each one replaces NaNs by the reduction's identity in a blockwise kernel that is
read through by the reduction (nothing written in between), and counts the
numbers where it needs to (a mean, a variance, a maximum over a slice that may be
all NaN). A sum and a count of real data are one pass: the kernel pairs each value
with its count as one complex number (``value + 1j * is_number``), whose sum
holds both; elsewhere the count is one more pass over the data. Integer and bool
arrays hold no NaNs and go straight to the plain reduction. Gradients are those of
the same expressions in ``jax.numpy``: zero for the skipped elements.
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

import numpy as np
from numpy.typing import DTypeLike

from ..arrays._array import ArrayLike, Result
from ..arrays._hijax import type_of
from ._arg_types import BudgetLike
from ._blockwise import blockwise
from ._cumulative import cumulative_prod, cumulative_sum
from ._elementwise import astype, divide, imag, isnan, real, sqrt, where
from ._extrema import max, min
from ._persist import persist
from ._reduce import mean, sum
from ._searching import argmax, argmin
from ._statistics import prod

__all__ = [
    "nanargmax",
    "nanargmin",
    "nancumprod",
    "nancumsum",
    "nanmax",
    "nanmean",
    "nanmin",
    "nanprod",
    "nanstd",
    "nansum",
    "nanvar",
]


def _dtype(x: ArrayLike) -> np.dtype:
    t = type_of(x)
    return np.dtype(t.dtype) if t is not None else np.asarray(x).dtype


def _has_nans(x: ArrayLike) -> bool:
    return _dtype(x).kind in "fc"


def _filled(xp: ModuleType, x: Any, *, value: float) -> Any:
    return xp.where(xp.isnan(x), xp.asarray(value, dtype=x.dtype), x)


def _numbers(xp: ModuleType, x: Any, *, dtype: DTypeLike) -> Any:
    return xp.astype(xp.logical_not(xp.isnan(x)), dtype)


def _paired(xp: ModuleType, x: Any, *, dtype: DTypeLike) -> Any:
    # the value (0 for a NaN) as the real part, 1 for a number as the imaginary one
    numbers = xp.logical_not(xp.isnan(x))
    return xp.astype(xp.where(numbers, x, 0), dtype) + 1j * xp.astype(numbers, dtype)


def _squared_deviations(xp: ModuleType, x: Any, m: Any) -> Any:
    # a NaN is replaced by the mean before subtracting (not after squaring), so
    # that its deviation and the gradient through it are zero, never NaN
    d = xp.where(xp.isnan(x), m, x) - m
    return (d * xp.conj(d)).real


def _fill(x: ArrayLike, value: float, budget: BudgetLike) -> Result:
    return blockwise(_filled, "nan_to_identity", x, budget=budget, value=value)


def _count(
    x: ArrayLike, axis: int | tuple[int, ...] | None, keepdims: bool, budget: BudgetLike
) -> Result:
    """How many numbers (not NaN) ``x`` holds along ``axis``, in ``x``'s real dtype."""
    real = np.finfo(_dtype(x)).dtype.str
    ones = blockwise(_numbers, "count_numbers", x, budget=budget, dtype=real)
    return sum(ones, axis=axis, keepdims=keepdims, budget=budget)


def _sum_and_count(
    x: ArrayLike, axis: int | tuple[int, ...] | None, keepdims: bool, budget: BudgetLike
) -> tuple[Result, Result]:
    """The sum of the numbers of ``x`` along ``axis`` and how many there are. For
    real ``x``, one pass (see the module); a complex ``x`` takes two."""
    dt = _dtype(x)
    if dt.kind == "c":
        total = sum(_fill(x, 0, budget), axis=axis, keepdims=keepdims, budget=budget)
        return total, _count(x, axis, keepdims, budget)
    pair = np.result_type(dt, np.complex64)
    both = blockwise(_paired, "pair_with_count", x, budget=budget, dtype=pair.str)
    both = sum(both, axis=axis, keepdims=keepdims, budget=budget)
    return real(both, budget=budget), imag(both, budget=budget)


def _cast(result: Result, dtype: DTypeLike | None, budget: BudgetLike) -> Result:
    return result if dtype is None else astype(result, np.dtype(dtype), budget=budget)


def _stored(result: Result, budget: BudgetLike) -> Result:
    """A result combined from reductions (a sum over a count, say), written now: it
    is as small as the reductions, and a fused result costs every later consumer
    buffers of its own (xarray stacks one per group in ``groupby``)."""
    return persist(result, budget=budget) if type_of(result) is not None else result


def nansum(
    x: ArrayLike,
    /,
    *,
    axis: int | tuple[int, ...] | None = None,
    dtype: DTypeLike | None = None,
    keepdims: bool = False,
    budget: BudgetLike = None,
) -> Result:
    """Sum over ``axis`` with NaNs counted as zero (``np.nansum``), out of core; see `sum`."""
    if _has_nans(x):
        x = _fill(x, 0, budget)
    return sum(x, axis=axis, dtype=dtype, keepdims=keepdims, budget=budget)


def nanprod(
    x: ArrayLike,
    /,
    *,
    axis: int | tuple[int, ...] | None = None,
    dtype: DTypeLike | None = None,
    keepdims: bool = False,
    budget: BudgetLike = None,
) -> Result:
    """Product over ``axis`` with NaNs counted as one (``np.nanprod``); see `prod`."""
    if _has_nans(x):
        x = _fill(x, 1, budget)
    return prod(x, axis=axis, dtype=dtype, keepdims=keepdims, budget=budget)


def nanmean(
    x: ArrayLike,
    /,
    *,
    axis: int | tuple[int, ...] | None = None,
    dtype: DTypeLike | None = None,
    keepdims: bool = False,
    budget: BudgetLike = None,
) -> Result:
    """Mean of the numbers along ``axis``, NaNs left out (``np.nanmean``); NaN where
    a slice holds none. One pass for real data (the sum and the count together)."""
    if not _has_nans(x):
        return _cast(mean(x, axis=axis, keepdims=keepdims, budget=budget), dtype, budget)
    total, count = _sum_and_count(x, axis, keepdims, budget)
    return _stored(_cast(divide(total, count, budget=budget), dtype, budget), budget)


def nanvar(
    x: ArrayLike,
    /,
    *,
    axis: int | tuple[int, ...] | None = None,
    dtype: DTypeLike | None = None,
    ddof: int = 0,
    keepdims: bool = False,
    budget: BudgetLike = None,
) -> Result:
    """Variance of the numbers along ``axis`` (``np.nanvar``), ``ddof`` as NumPy's:
    the mean first, then the sum of squared deviations and the count."""
    if not _has_nans(x):
        from ._statistics import var

        out = var(x, axis=axis, correction=ddof, keepdims=keepdims, budget=budget)
        return _cast(out, dtype, budget)
    m = nanmean(x, axis=axis, keepdims=True, budget=budget)
    squares = blockwise(_squared_deviations, "nan_squared_deviations", x, m, budget=budget)
    squares = where(isnan(x), np.nan, squares, budget=budget)  # counted as missing
    total, count = _sum_and_count(squares, axis, keepdims, budget)
    return _stored(_cast(divide(total, count - ddof, budget=budget), dtype, budget), budget)


def nanstd(
    x: ArrayLike,
    /,
    *,
    axis: int | tuple[int, ...] | None = None,
    dtype: DTypeLike | None = None,
    ddof: int = 0,
    keepdims: bool = False,
    budget: BudgetLike = None,
) -> Result:
    """Standard deviation of the numbers along ``axis`` (``np.nanstd``); see `nanvar`."""
    v = nanvar(x, axis=axis, ddof=ddof, keepdims=keepdims, budget=budget)
    return _stored(_cast(sqrt(v, budget=budget), dtype, budget), budget)


def _extremum(
    reduce: Callable[..., Result],
    fill: float,
    x: ArrayLike,
    axis: int | tuple[int, ...] | None,
    keepdims: bool,
    budget: BudgetLike,
) -> Result:
    if not _has_nans(x):
        return reduce(x, axis=axis, keepdims=keepdims, budget=budget)
    best = reduce(_fill(x, fill, budget), axis=axis, keepdims=keepdims, budget=budget)
    count = _count(x, axis, keepdims, budget)
    return _stored(where(count > 0, best, np.nan, budget=budget), budget)


def nanmax(
    x: ArrayLike,
    /,
    *,
    axis: int | tuple[int, ...] | None = None,
    keepdims: bool = False,
    budget: BudgetLike = None,
) -> Result:
    """Maximum of the numbers along ``axis`` (``np.nanmax``); NaN where a slice holds
    none. Two passes: the maximum and the count."""
    return _extremum(max, -np.inf, x, axis, keepdims, budget)


def nanmin(
    x: ArrayLike,
    /,
    *,
    axis: int | tuple[int, ...] | None = None,
    keepdims: bool = False,
    budget: BudgetLike = None,
) -> Result:
    """Minimum of the numbers along ``axis`` (``np.nanmin``); see `nanmax`."""
    return _extremum(min, np.inf, x, axis, keepdims, budget)


def nanargmax(
    x: ArrayLike,
    /,
    *,
    axis: int | None = None,
    keepdims: bool = False,
    budget: BudgetLike = None,
) -> Result:
    """Index of the largest number along ``axis``, NaNs left out (``np.nanargmax``
    raises on a slice of NaNs only; here such a slice gives index 0)."""
    if _has_nans(x):
        x = _fill(x, -np.inf, budget)
    return argmax(x, axis=axis, keepdims=keepdims, budget=budget)


def nanargmin(
    x: ArrayLike,
    /,
    *,
    axis: int | None = None,
    keepdims: bool = False,
    budget: BudgetLike = None,
) -> Result:
    """Index of the smallest number along ``axis``, NaNs left out; see `nanargmax`."""
    if _has_nans(x):
        x = _fill(x, np.inf, budget)
    return argmin(x, axis=axis, keepdims=keepdims, budget=budget)


def nancumsum(
    x: ArrayLike,
    /,
    *,
    axis: int | None = None,
    dtype: DTypeLike | None = None,
    budget: BudgetLike = None,
) -> Result:
    """Running sum along ``axis`` with NaNs counted as zero (``np.nancumsum``); see
    `cumulative_sum`."""
    if _has_nans(x):
        x = _fill(x, 0, budget)
    return cumulative_sum(x, axis=axis, dtype=dtype, budget=budget)


def nancumprod(
    x: ArrayLike,
    /,
    *,
    axis: int | None = None,
    dtype: DTypeLike | None = None,
    budget: BudgetLike = None,
) -> Result:
    """Running product along ``axis`` with NaNs counted as one (``np.nancumprod``)."""
    if _has_nans(x):
        x = _fill(x, 1, budget)
    return cumulative_prod(x, axis=axis, dtype=dtype, budget=budget)
