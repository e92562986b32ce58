"""What the creation functions share: their arguments, and arrays written by rows.

A shape is checked as NumPy checks it (`as_shape`); default dtypes are
``jax.numpy``'s (`default_float`, and `python_numbers_dtype` for Python numbers and
lists of them); an array is written one block of rows at a time (`from_rows`), a
0-d one being a JAX array (`zero_d`); `triangle` zeroes one side of a diagonal
(`tril`, `triu`).
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from numpy.typing import DTypeLike

from ..arrays._array import ArrayLike, DiskArray, Result
from ..arrays._hijax import type_of
from ..execution._held_results import hold_in_memory, result_file
from ..kernels._x64 import default_dtypes, jax_value_dtype, number_dtype
from ..planning._budget import get_budget
from ._arg_types import BudgetLike

__all__ = [
    "as_shape",
    "default_float",
    "from_rows",
    "python_numbers_dtype",
    "shape_dtype_like",
    "triangle",
    "zero_d",
]


def as_shape(shape: Any) -> tuple[int, ...]:
    """``shape`` (an int or a sequence of ints) as a tuple of non-negative ints."""
    if isinstance(shape, (int, np.integer)) and not isinstance(shape, bool):
        shape = (shape,)
    try:
        shape = tuple(operator.index(n) for n in shape)
    except TypeError:
        raise TypeError(f"a shape must be an int or a tuple of ints, got {shape!r}.") from None
    if any(n < 0 for n in shape):
        raise ValueError(f"negative dimensions are not allowed, got shape {shape}.")
    return shape


def default_float(dtype: DTypeLike | None = None) -> np.dtype:
    """``dtype``, or the default floating dtype (as `jax.numpy`'s) for ``None``."""
    return np.dtype(dtype) if dtype is not None else default_dtypes()["real floating"]


def zero_d(value: ArrayLike, dtype: DTypeLike) -> jax.Array:
    """A 0-d result: a JAX array, of a 32-bit dtype for a 64-bit one while x64 is off."""
    value = np.asarray(value, dtype)
    return jnp.asarray(value, jax_value_dtype(value.dtype, "a 0-d array"))


def from_rows(
    shape: tuple[int, ...],
    dtype: DTypeLike,
    rows: Callable[[int, int], np.ndarray],
    budget: BudgetLike,
) -> Result:
    """A DiskArray of ``shape`` whose rows ``a:b`` are ``rows(a, b)``."""
    dtype = np.dtype(dtype)
    if not shape:
        return zero_d(rows(0, 1), dtype)
    nbytes = math.prod(shape) * dtype.itemsize
    if not hold_in_memory(nbytes, get_budget(budget)):
        return DiskArray.from_row_blocks(shape, dtype, rows, budget=budget)
    # a small one (an arange of a loss's classes) held in memory, as a small result
    # of a pass is: no file made and removed each step
    f = result_file(shape, dtype, shape, held=True)
    f.write(tuple(slice(0, n) for n in shape), np.asarray(rows(0, shape[0]), dtype))
    return DiskArray._wrap(f.commit())


def shape_dtype_like(x: ArrayLike, dtype: DTypeLike | None) -> tuple[tuple[int, ...], np.dtype]:
    """The shape of ``x``, and its dtype unless ``dtype`` is given."""
    t = type_of(x)
    if t is None:
        x = np.asarray(x)
        return x.shape, np.dtype(x.dtype if dtype is None else dtype)
    return t.shape, np.dtype(t.dtype if dtype is None else dtype)


def python_numbers_dtype(obj: object) -> np.dtype | None:
    """The default dtype for a Python number or a (nested) list or tuple of them:
    that of the widest kind among them (bool < int < float < complex), float for an
    empty list; None when anything else is inside."""
    kinds = (bool, int, float, complex)  # narrowest first (a bool is an int too)
    widest, todo = None, [obj]
    while todo:
        item = todo.pop()
        if isinstance(item, (list, tuple)):
            todo.extend(item)
            continue
        kind = next((k for k in kinds if isinstance(item, k)), None)
        if kind is None:
            return None
        if widest is None or kinds.index(kind) > kinds.index(widest):
            widest = kind
    return number_dtype((widest or float)(0))


def triangle(x: ArrayLike, k: int, lower: bool, name: str, budget: BudgetLike) -> Result:
    """``x`` with the elements above (``lower``) or below the ``k``-th diagonal of its
    last two axes zeroed: `tril` and `triu`."""
    from ._elementwise import where

    t = type_of(x)
    if t is None or len(t.shape) < 2:
        raise ValueError(f"{name}: x must be an array of at least 2 dimensions.")
    n, m = t.shape[-2:]

    def rows(a: int, b: int) -> np.ndarray:
        r = np.arange(a, b)[:, None]
        c = np.arange(m)[None, :]
        return (c - r <= k) if lower else (c - r >= k)

    mask = from_rows((n, m), bool, rows, budget)
    zero = np.zeros((), t.dtype)
    return where(mask, x, zero, budget=budget)
