"""The arguments of the manipulation functions, checked as NumPy checks them.

Axes are counted from 0 (an out-of-range one is NumPy's `AxisError`, both an
`IndexError` and a `ValueError`), shapes are tuples of ints, and a `repeat` count
array is read into memory (it decides the output's shape, so it must be concrete).
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Any, cast

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike as JaxArrayLike
from numpy.typing import DTypeLike

from ..arrays._array import ArrayLike, DiskArray, _is_concrete
from ..arrays._hijax import type_of
from ..kernels._promotion import canonical_dtype
from ._arg_types import AxesLike, BudgetLike, ShapeLike

__all__ = [
    "array_list",
    "as_int",
    "as_ints",
    "dtype_of",
    "in_memory",
    "is_disk",
    "not_disk",
    "normalize_axes",
    "normalize_axis",
    "repeat_counts",
    "shape_of",
]


def shape_of(x: ArrayLike) -> tuple[int, ...]:
    """The shape of a DiskArray (traced or not) or of an in-memory value."""
    t = type_of(x)
    return t.shape if t is not None else tuple(np.shape(x))


def dtype_of(x: ArrayLike) -> np.dtype:
    """The dtype of a DiskArray (traced or not) or of an in-memory value."""
    t = type_of(x)
    if t is not None:
        return t.dtype
    return np.dtype(x.dtype) if hasattr(x, "dtype") else np.asarray(x).dtype


def is_disk(*xs: ArrayLike) -> bool:
    """Whether any of ``xs`` is a DiskArray (else a function runs on ``jax.numpy``)."""
    return any(type_of(x) is not None for x in xs)


def not_disk(x: ArrayLike) -> JaxArrayLike:
    """``x``, which `is_disk` found not to be a DiskArray, as ``jax.numpy`` takes it
    (no conversion: the type a checker cannot narrow by itself)."""
    return cast("JaxArrayLike", x)


def in_memory(values: Sequence[ArrayLike], dtype: DTypeLike) -> list[jax.Array]:
    """``values`` as JAX arrays of NumPy's promoted ``dtype``, as JAX holds it (32-bit
    for 64-bit while x64 is off, as ``jax.numpy`` computes)."""
    dtype = canonical_dtype(dtype)
    return [jnp.asarray(v, dtype) for v in values]


def as_int(value: Any, what: str) -> int:
    """``value`` as an int (a bool is refused, as an axis or a count)."""
    if isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{what} must be an int, got a bool ({value!r}).")
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{what} must be an int, got {type(value).__name__}.") from None


def as_ints(value: ShapeLike, what: str) -> tuple[int, ...]:
    """An int or a tuple (or list) of ints, as a tuple."""
    if isinstance(value, (tuple, list)):
        return tuple(as_int(v, what) for v in value)
    return (as_int(value, what),)


def normalize_axis(axis: int, ndim: int, fn: str) -> int:
    """``axis`` (in ``[-ndim, ndim)``) counted from 0."""
    a = as_int(axis, f"{fn}: axis")
    if not -ndim <= a < ndim:
        raise np.exceptions.AxisError(
            f"{fn}: axis {a} is out of range for an array of {ndim} dimensions "
            f"(valid: {-ndim} to {ndim - 1})."
        )
    return a % ndim


def normalize_axes(axis: AxesLike, ndim: int, fn: str) -> tuple[int, ...]:
    """An axis or a tuple of distinct axes, each counted from 0."""
    axes = tuple(normalize_axis(a, ndim, fn) for a in as_ints(axis, f"{fn}: axis"))
    if len(set(axes)) != len(axes):
        raise ValueError(f"{fn}: repeated axis in {axis!r}.")
    return axes


def array_list(arrays: Sequence[ArrayLike], fn: str) -> list[ArrayLike]:
    """The ``arrays`` argument of `concat`/`stack`: a non-empty tuple or list."""
    if not isinstance(arrays, (tuple, list)):
        raise TypeError(
            f"{fn}: arrays must be a tuple or a list of arrays, got {type(arrays).__name__}."
        )
    if not arrays:
        raise ValueError(f"{fn}: needs at least one array.")
    return list(arrays)


def repeat_counts(repeats: ArrayLike, budget: BudgetLike) -> np.ndarray | int:
    """``repeats`` as an int, or as a 0-d/1-D int64 array of counts (a DiskArray
    of counts read from disk, within the budget)."""
    t = type_of(repeats)
    if t is None and not hasattr(repeats, "shape"):
        return as_int(repeats, "repeat: repeats")
    traced = TypeError(
        "repeat: repeats is a traced array, but the output's shape depends on its "
        "values. Pass an int, or a concrete array (outside jax.jit)."
    )
    if t is not None:
        if not isinstance(repeats, DiskArray) or not _is_concrete(repeats._handle):
            raise traced
        counts = repeats.to_numpy(budget=budget)
    else:
        try:
            counts = np.asarray(repeats)
        except Exception:  # a tracer: JAX refuses to give its values
            raise traced from None
    if counts.dtype.kind not in "iu":
        raise TypeError(f"repeat: repeats must have an integer dtype, got {counts.dtype}.")
    if counts.ndim > 1:
        raise ValueError(f"repeat: repeats must be 0-d or 1-d, got shape {counts.shape}.")
    return int(counts) if counts.ndim == 0 else counts.astype(np.int64)
