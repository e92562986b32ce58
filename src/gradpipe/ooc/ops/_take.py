"""`take` and `take_along_axis`: integer-array indexing along one axis, as a
`Gather` (`_indexing`)."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ..arrays._array import ArrayLike, DiskArray, Result
from ..arrays._hijax import type_of
from ..arrays._op import apply
from ._arg_types import BudgetLike
from ._indexing import Gather, check_bounds
from ._layout import getitem

__all__ = ["take", "take_along_axis"]


# ---------------------------------------------------------------- take, take_along_axis


def _axis(axis: object, ndim: int, what: str) -> int:
    if isinstance(axis, (bool, np.bool_)) or not isinstance(axis, (int, np.integer)):
        raise TypeError(f"{what}: axis must be an int, got {axis!r}.")
    if not -ndim <= axis < ndim:
        raise np.exceptions.AxisError(
            f"{what}: axis {axis} is out of bounds for an array of {ndim} dimensions."
        )
    return int(axis) % ndim


def _integers(indices: Any, what: str) -> Any:
    """``indices`` as an integer array: a DiskArray, a traced JAX value, or NumPy."""
    if type_of(indices) is None and not isinstance(indices, jax.core.Tracer):
        indices = np.asarray(indices)
        if indices.size == 0 and indices.dtype.kind not in "biu":
            indices = indices.astype(np.intp)  # ``[]``
    dtype = np.dtype(indices.dtype)
    if dtype.kind not in "iu":
        raise TypeError(f"{what}: indices must have an integer dtype, got {dtype}.")
    return indices


def _in_memory(value: Any) -> Any:
    """An index in memory: a DiskArray read whole, anything else as it is."""
    return value.to_numpy() if type_of(value) is not None else value


def take(
    x: ArrayLike,
    indices: ArrayLike | list[int],
    /,
    *,
    axis: int | None = None,
    budget: BudgetLike = None,
) -> Result:
    """The elements of ``x`` at ``indices`` along ``axis`` (as ``np.take``), out of core.

    **Arguments:**

    - `x`: a `DiskArray` of at least one dimension.
    - `indices`: integers (a `DiskArray`, NumPy array or list); negative ones count
      from the end; out-of-range ones raise `IndexError` (for a `DiskArray`, when
      the gather reads them).
    - `axis`: the axis to take along; optional for a 1-D ``x`` only.

    **Returns:** ``x`` with ``axis`` replaced by the axes of ``indices``. Its
    gradient adds the cotangent back at each index (repeats add up).
    """
    t = type_of(x)
    if t is None:
        return jnp.take(jnp.asarray(x), jnp.asarray(_in_memory(indices)), axis=axis)
    nd = len(t.shape)
    if nd == 0:
        raise ValueError("take: x must have at least one dimension, got a 0-d array.")
    if axis is None and nd != 1:
        raise ValueError(
            f"take: axis is required for a {nd}-d array (the standard asks for it); "
            "flatten first (ooc.reshape(x, (-1,))) to take from all elements."
        )
    axis = _axis(0 if axis is None else axis, nd, "take")
    key = (slice(None),) * axis + (_integers(indices, "take"),)
    return getitem(x, key, budget=budget)


def take_along_axis(
    x: ArrayLike, indices: ArrayLike | list[int], /, *, axis: int = -1, budget: BudgetLike = None
) -> Result:
    """``np.take_along_axis``: ``out[..., j, ...] = x[..., indices[..., j, ...], ...]``.

    **Arguments:**

    - `x`: a `DiskArray`.
    - `indices`: integers with as many dimensions as ``x`` (a `DiskArray`, NumPy
      array or list), broadcasting against ``x`` except along ``axis``.
    - `axis`: the axis to take along (default: the last).

    **Returns:** the broadcast shape, with ``indices``'s side along ``axis``. Its
    gradient is the scatter-add of the cotangent (repeats add up).
    """
    t = type_of(x)
    if t is None:
        values = jnp.asarray(_in_memory(indices))
        return jnp.take_along_axis(jnp.asarray(x), values, axis=axis)
    idx = _integers(indices, "take_along_axis")
    nd, ishape = len(t.shape), tuple(np.shape(idx))
    if len(ishape) != nd or nd == 0:
        raise ValueError(
            "take_along_axis: indices must have as many dimensions as x (at least one), "
            f"got shapes {ishape} and {t.shape}."
        )
    axis = _axis(axis, nd, "take_along_axis")
    out = []
    for a, (n, k) in enumerate(zip(t.shape, ishape)):
        if a != axis and n != k and 1 not in (n, k):
            raise ValueError(
                f"take_along_axis: x of shape {t.shape} and indices of shape {ishape} do "
                f"not broadcast along axis {a}."
            )
        out.append(k if a == axis or n == 1 else n)
    if isinstance(idx, np.ndarray):
        check_bounds(idx, t.shape[axis], axis)
        idx = DiskArray.from_numpy(idx, budget=budget)
    sources = tuple(
        ("index", 0) if a == axis else ("out", a, 0, int(n != 1)) for a, n in enumerate(t.shape)
    )
    op = Gather(sources, (tuple(range(nd)),), tuple(out), "take_along_axis")
    return apply(op, x, idx, budget=budget)
