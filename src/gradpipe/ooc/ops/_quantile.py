"""Quantiles and medians (NumPy's ``quantile``, ``median`` and their NaN-skipping
``nanquantile`` and ``nanmedian``), out of core.

They are not in the array API standard, but xarray asks an array's namespace for
them by NumPy's names (``DataArray.quantile``, ``median``, and their groupby and
resample forms); without them it would hand the array to NumPy, which reads it
whole, or fail. A quantile over some axes needs every element along those axes at
once, so they are the core axes of a `CoreAxes` kernel: whole in memory for each
element of the other axes, which are cut into tiles by the budget (a median over
time of a (time, lat, lon) variable holds one time series per grid point, and as
many grid points as fit). One element's axes that do not fit are refused with a
`MemoryError`; a median over every axis reads the whole array, within the budget.

- **Values and dtypes are NumPy's**: the forward pass runs NumPy's function on each
  tile (its NaN handling and every ``method``), and the result has the dtype NumPy
  gives (float64 for ints, bools and float32 data with a float64 ``q``; float32
  for float32 data with a Python float ``q``), whatever ``jax_enable_x64`` says. A
  0-d result becomes a JAX value, converted as the out-of-core guide says.
- **Gradients** are those of ``jax.numpy``'s function of the same name (JAX's VJP,
  evaluated per tile on the host), for the methods JAX has (``linear``, ``lower``,
  ``higher``, ``midpoint``, ``nearest``); the others refuse a gradient.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from types import ModuleType
from typing import Any

import numpy as np

from ..arrays._array import ArrayLike, Result
from ..arrays._hijax import type_of
from ..arrays._op import apply, frozen
from ..kernels._kernel import run_in_jax
from ._arg_types import BudgetLike
from ._core_axes import CoreAxes
from ._reduce import normalize_axes

__all__ = ["median", "nanmedian", "nanquantile", "quantile"]

#: The methods ``jax.numpy.quantile`` has, so the ones with a gradient here.
_JAX_METHODS = ("linear", "lower", "higher", "midpoint", "nearest")
#: NumPy's methods (the forward pass runs NumPy's function, so all of them work).
_NUMPY_METHODS = (
    "inverted_cdf",
    "averaged_inverted_cdf",
    "closest_observation",
    "interpolated_inverted_cdf",
    "hazen",
    "weibull",
    "median_unbiased",
    "normal_unbiased",
    *_JAX_METHODS,
)


# ---------------------------------------------------------------- kernels


def _q_value(xp: ModuleType, q: tuple[float, ...], q_shape: tuple[int, ...], q_dtype: str) -> Any:
    """``q`` as the caller gave it: a Python float (``q_dtype`` empty, a weak scalar
    that keeps float32 data float32, as NumPy's NEP 50), else an array of its dtype."""
    if not q_dtype:
        return q[0]
    value = np.asarray(q, dtype=q_dtype).reshape(q_shape)
    return value if xp is np else xp.asarray(value)


def _quantile_kernel(
    xp: ModuleType,
    x: Any,
    *,
    q: tuple[float, ...],
    q_shape: tuple[int, ...],
    q_dtype: str,
    axes: tuple[int, ...],
    method: str,
    keepdims: bool,
    skip_nan: bool,
) -> Any:
    if xp is not np and method not in _JAX_METHODS:
        raise NotImplementedError(f"jax.numpy's quantile has no method {method!r}")
    fn = xp.nanquantile if skip_nan else xp.quantile
    return fn(x, _q_value(xp, q, q_shape, q_dtype), axis=axes, method=method, keepdims=keepdims)


def _median_kernel(
    xp: ModuleType, x: Any, *, axes: tuple[int, ...], keepdims: bool, skip_nan: bool
) -> Any:
    fn = xp.nanmedian if skip_nan else xp.median
    return fn(x, axis=axes, keepdims=keepdims)


# ---------------------------------------------------------------- the operation


@frozen
class Quantile(CoreAxes):
    """A quantile or median kernel over whole reduced axes (see the module).

    Its output's shape and dtype are NumPy's (`CoreAxes` would take ``jax.numpy``'s,
    which differ: float32 for int8 data, a refusal-free bool): the quantile axes
    lead, then the kept axes (the reduced ones as size 1 with ``keepdims``).
    """

    def _result(
        self, shapes: Sequence[tuple[int, ...]], dtypes: Sequence[Any]
    ) -> tuple[tuple[int, ...], np.dtype]:
        p = dict(self.params)
        axes, keepdims = p["axes"], p["keepdims"]
        stand_in = self._stand_in(0, shapes[0])
        kept = tuple(
            1 if a in axes else n for a, n in enumerate(stand_in) if keepdims or a not in axes
        )
        return tuple(p.get("q_shape", ())) + kept, _numpy_dtype(self, np.dtype(dtypes[0]))


@functools.lru_cache(maxsize=1024)
def _numpy_dtype(op: Quantile, dtype: np.dtype) -> np.dtype:
    """The dtype NumPy's function gives on ``dtype`` data; NumPy's refusal (a
    quantile of bools, which it cannot interpolate) as a `TypeError` naming it."""
    params = {**dict(op.params), "axes": (0,), "keepdims": False}
    try:
        with np.errstate(all="ignore"):
            return np.asarray(op.kernel(np, np.zeros(2, dtype), **params)).dtype
    except TypeError as error:
        raise TypeError(
            f"{op.label} of a {dtype} array: NumPy refuses it ({error}). Convert the "
            "data first (ooc.astype(x, ooc.float64))."
        ) from None


def _reduce_quantile(
    kernel: Any, label: str, x: ArrayLike, axis: Any, budget: BudgetLike, **params: Any
) -> Result:
    t = type_of(x)
    ndim = len(t.shape) if t is not None else np.ndim(x)
    axes = normalize_axes(axis, ndim)
    params = {**params, "axes": axes}
    frozen_params = tuple(sorted(params.items()))
    if t is None:  # in memory: NumPy, or jax.numpy for a traced value
        return run_in_jax(kernel, frozen_params, (x,))
    keepdims = params["keepdims"]
    n_q = len(params.get("q_shape", ()))
    n_out = n_q + (ndim if keepdims else ndim - len(axes))
    out_core = tuple(range(n_q)) + (tuple(n_q + a for a in axes) if keepdims else ())
    op = Quantile(
        kernel,
        label,
        (tuple(a - ndim for a in axes),),
        tuple(a - n_out for a in out_core),
        frozen_params,
    )
    _numpy_dtype(op, np.dtype(t.dtype))  # NumPy's refusal, before any pass
    return apply(op, x, budget=budget)


def _check_method(method: str, label: str) -> str:
    if method not in _NUMPY_METHODS:
        raise ValueError(
            f"{label}: method must be one of NumPy's {list(_NUMPY_METHODS)}, got {method!r}."
        )
    return method


def _as_q(q: Any, label: str) -> dict[str, Any]:
    """``q`` as hashable parameters: its values, shape and dtype ('' for a Python float)."""
    if type_of(q) is not None:
        raise TypeError(
            f"{label}: q must be a number or a NumPy array of numbers in [0, 1], not a "
            "DiskArray (read it with .to_numpy() first)."
        )
    weak = isinstance(q, (int, float)) and not isinstance(q, bool)
    try:
        values = np.asarray(q, dtype=None if weak else getattr(q, "dtype", None))
    except Exception:  # a traced value, a string
        raise TypeError(
            f"{label}: q must be concrete numbers (a float or a NumPy array), got {q!r}; "
            "under jax.jit pass q as a constant."
        ) from None
    if values.ndim > 1:
        raise ValueError(f"{label}: q must be a number or a 1-D array, got shape {values.shape}.")
    if values.dtype.kind not in "biuf" or np.any((values < 0) | (values > 1)):
        raise ValueError(f"{label}: q must hold numbers in [0, 1], got {q!r}.")
    return {
        "q": tuple(float(v) for v in values.ravel()),
        "q_shape": values.shape,
        "q_dtype": "" if weak else values.dtype.str,
    }


# ---------------------------------------------------------------- the functions


def quantile(
    x: ArrayLike,
    /,
    q: float | Sequence[float] | np.ndarray,
    *,
    axis: int | tuple[int, ...] | None = None,
    method: str = "linear",
    keepdims: bool = False,
    overwrite_input: bool = False,
    budget: BudgetLike = None,
) -> Result:
    """The ``q``-th quantiles of ``x`` over ``axis``, as ``np.quantile`` gives them,
    out of core (whole ``axis`` in memory per element of the other axes; see the module).

    **Arguments:**

    - `x`: a `DiskArray` (or an in-memory array: then NumPy's, as a JAX value).
    - `q`: a number or a 1-D array of numbers in [0, 1]; an array's quantiles make
      the result's first axis.
    - `axis`: the axes reduced (all by default).
    - `method`: NumPy's (``"linear"``, ``"lower"``, ``"nearest"``, ...).
    - `keepdims`: keep the reduced axes, of size 1.
    - `overwrite_input`: NumPy's; ignored (the data on disk is never changed).
    - `budget`: a `MemoryBudget` for this call.

    **Returns:** a `DiskArray` in NumPy's dtype (a 0-d JAX value when nothing remains).
    A NaN in a reduced line gives NaN (see `nanquantile`).
    """
    return _reduce_quantile(
        _quantile_kernel,
        "quantile",
        x,
        axis,
        budget,
        **_as_q(q, "quantile"),
        method=_check_method(method, "quantile"),
        keepdims=bool(keepdims),
        skip_nan=False,
    )


def nanquantile(
    x: ArrayLike,
    /,
    q: float | Sequence[float] | np.ndarray,
    *,
    axis: int | tuple[int, ...] | None = None,
    method: str = "linear",
    keepdims: bool = False,
    overwrite_input: bool = False,
    budget: BudgetLike = None,
) -> Result:
    """`quantile`, skipping NaNs (``np.nanquantile``): an all-NaN line gives NaN."""
    return _reduce_quantile(
        _quantile_kernel,
        "nanquantile",
        x,
        axis,
        budget,
        **_as_q(q, "nanquantile"),
        method=_check_method(method, "nanquantile"),
        keepdims=bool(keepdims),
        skip_nan=True,
    )


def median(
    x: ArrayLike,
    /,
    *,
    axis: int | tuple[int, ...] | None = None,
    keepdims: bool = False,
    overwrite_input: bool = False,
    budget: BudgetLike = None,
) -> Result:
    """The median of ``x`` over ``axis``, as ``np.median`` gives it (float64 for ints
    and bools), out of core; arguments as in `quantile`."""
    return _reduce_quantile(
        _median_kernel, "median", x, axis, budget, keepdims=bool(keepdims), skip_nan=False
    )


def nanmedian(
    x: ArrayLike,
    /,
    *,
    axis: int | tuple[int, ...] | None = None,
    keepdims: bool = False,
    overwrite_input: bool = False,
    budget: BudgetLike = None,
) -> Result:
    """`median`, skipping NaNs (``np.nanmedian``): an all-NaN line gives NaN."""
    return _reduce_quantile(
        _median_kernel, "nanmedian", x, axis, budget, keepdims=bool(keepdims), skip_nan=True
    )
