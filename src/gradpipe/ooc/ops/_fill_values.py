"""Fill values of `full`, `full_like` and `pad`: their default dtype, and traced ones.

A fill value is a Python number, a NumPy scalar or a 0-d JAX value. A JAX value
traced by `jax.grad` or `jax.jit` (a parameter) has no value to write when the
array is made: the array is then computed from it tile by tile, and its gradient
(the sum of the result's cotangent) flows back to it, as ``jnp.full`` gives.
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np
from numpy.typing import DTypeLike

from ..arrays._array import DiskArray, Result
from ..arrays._hijax import type_of
from ..kernels._promotion import canonical_dtype
from ..kernels._x64 import default_dtypes, number_dtype
from ._arg_types import BudgetLike

__all__ = ["FillValue", "as_number", "fill_dtype", "is_traced", "traced_full"]

#: What `full` fills with: a Python number, a NumPy scalar, or a 0-d JAX value.
FillValue = complex | np.generic | jax.Array

_KIND_DEFAULT = {"i": "integral", "u": "integral", "f": "real floating", "c": "complex floating"}


def is_traced(value: Any) -> bool:
    """Whether ``value`` is a JAX value being traced (its data unknown until run)."""
    return isinstance(value, jax.core.Tracer)


def as_number(value: FillValue) -> complex | np.generic:
    """A concrete fill value as a number to write (a JAX value as a Python number)."""
    if isinstance(value, jax.Array):
        return np.asarray(value).item()
    return value


def fill_dtype(value: Any) -> np.dtype:
    """The dtype of an array filled with ``value`` when none is given: a Python number's
    is the default of its kind (`_x64`); a value with a dtype (a NumPy scalar, a JAX
    value) keeps it, as in NumPy and ``jax.numpy``, unless JAX marks it weakly typed,
    which then acts like a Python number of its kind."""
    dtype = getattr(value, "dtype", None)
    if dtype is None:
        return number_dtype(value)
    dtype = np.dtype(dtype)
    weak = getattr(getattr(value, "aval", None), "weak_type", False)  # JAX values have one
    if weak and dtype.kind != "b":
        return default_dtypes()[_KIND_DEFAULT[dtype.kind]]
    return dtype


def _fill(xp: Any, base: Any, value: Any, *, dtype: str) -> Any:
    """``value`` converted to ``dtype``, in ``base``'s shape (its data is not read)."""
    return xp.broadcast_to(xp.astype(value, np.dtype(dtype)), base.shape)


def traced_full(
    shape: tuple[int, ...],
    value: Any,
    dtype: DTypeLike,
    budget: BudgetLike,
    like: Any = None,
) -> Result:
    """An array of ``shape`` and ``dtype`` holding the traced 0-d ``value`` everywhere;
    differentiable in ``value``. (A 0-d result is a JAX value, as every 0-d result.)

    The result is computed from one element of ``like`` (a non-empty DiskArray of
    ``shape``'s rank, whose values are not used), or else of a new one-element file:
    made while JAX traces, that file is a constant of the compiled program.
    """
    from ._blockwise import blockwise
    from ._manipulation import broadcast_to

    dtype = np.dtype(dtype)
    if value.ndim:
        raise ValueError(
            f"full: a traced fill value must be 0-d, got shape {tuple(value.shape)}; "
            "broadcast it with ooc.broadcast_to after filling, or pass a number."
        )
    value = value.astype(canonical_dtype(dtype))  # in JAX: a bfloat16 value too
    if not shape:
        return value
    t = type_of(like) if like is not None else None
    if t is not None and len(t.shape) == len(shape) and all(t.shape):
        one = like[(slice(0, 1),) * len(shape)]
    else:
        one = DiskArray.full((1,) * len(shape), 0, dtype, budget=budget)
    filled = blockwise(_fill, "full", one, value, budget=budget, dtype=dtype.str)
    return broadcast_to(filled, shape, budget=budget)
