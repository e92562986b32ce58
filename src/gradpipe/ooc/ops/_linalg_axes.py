"""The `linalg` functions of a few entries or of whole axes: `diagonal`, `trace`,
`outer`, `cross`, `vector_norm` and `matrix_norm`.

Each is written with the namespace's own out-of-core functions (reshape and strided
indexing, reductions, elementwise kernels), so memory stays bounded whatever the
matrix size and their gradients come with those functions.
"""

from __future__ import annotations

import builtins
import math
from typing import Any, Literal

import numpy as np
from numpy.typing import DTypeLike

from ..arrays._array import ArrayLike, Result
from ._arg_types import BudgetLike
from ._elementwise import (
    abs,
    astype,
    conj,
    multiply,
    not_equal,
    power,
    real,
    sqrt,
    subtract,
)
from ._extrema import max, min
from ._layout import getitem
from ._linalg_dense import _matrix_shape, svdvals
from ._manip_args import dtype_of, normalize_axes, normalize_axis, shape_of
from ._manipulation import concat, expand_dims, reshape
from ._reduce import sum

__all__ = ["cross", "diagonal", "matrix_norm", "outer", "trace", "vector_norm"]


def diagonal(x: ArrayLike, /, *, offset: int = 0, budget: BudgetLike = None) -> Result:
    """The ``offset`` diagonal of each matrix of ``x`` (``offset > 0`` above the main
    one), out of core: a strided slice of the matrices seen as rows of ``M*N``."""
    shape = _matrix_shape(x, "diagonal")
    if isinstance(offset, bool) or not isinstance(offset, (int, np.integer)):
        raise TypeError(f"diagonal: offset must be an int, got {offset!r}.")
    m, n = shape[-2:]
    k = int(offset)
    length = builtins.max(0, builtins.min(m, n - k) if k >= 0 else builtins.min(m + k, n))
    start = k if k >= 0 else -k * n
    stop = start + (length - 1) * (n + 1) + 1 if length else start
    flat = reshape(x, (*shape[:-2], m * n), budget=budget)
    return getitem(flat, (Ellipsis, slice(start, stop, n + 1)), budget=budget)


def trace(
    x: ArrayLike, /, *, offset: int = 0, dtype: DTypeLike | None = None, budget: BudgetLike = None
) -> Result:
    """The sum of the ``offset`` diagonal of each matrix of ``x``; ``dtype`` as in `sum`."""
    return sum(diagonal(x, offset=offset, budget=budget), axis=-1, dtype=dtype, budget=budget)


def outer(x1: ArrayLike, x2: ArrayLike, /, *, budget: BudgetLike = None) -> Result:
    """The outer product of two vectors: ``out[i, j] = x1[i] * x2[j]``, out of core."""
    s1, s2 = shape_of(x1), shape_of(x2)
    if len(s1) != 1 or len(s2) != 1:
        raise ValueError(f"outer needs two 1-D arrays, got shapes {s1} and {s2}.")
    return multiply(reshape(x1, (s1[0], 1), budget=budget), x2, budget=budget)


def cross(x1: ArrayLike, x2: ArrayLike, /, *, axis: int = -1, budget: BudgetLike = None) -> Result:
    """The cross product of 3-element vectors along ``axis`` (other axes broadcast)."""
    s1, s2 = shape_of(x1), shape_of(x2)
    if not s1 or not s2:
        raise ValueError("cross needs arrays of at least one dimension.")
    a1 = normalize_axis(axis, len(s1), "cross") - len(s1)
    a2 = normalize_axis(axis, len(s2), "cross") - len(s2)
    if a1 != a2:
        raise ValueError(f"cross: axis {axis} names different axes of shapes {s1} and {s2}.")
    if s1[a1] != 3 or s2[a2] != 3:
        raise ValueError(
            f"cross: the vectors along axis {axis} must have 3 elements, got shapes {s1} and {s2}."
        )

    def part(x: ArrayLike, i: int) -> Result:
        return getitem(x, (Ellipsis, slice(i, i + 1)) + (slice(None),) * (-a1 - 1), budget=budget)

    u = [part(x1, i) for i in range(3)]
    v = [part(x2, i) for i in range(3)]

    def term(i: int, j: int) -> Result:
        return subtract(
            multiply(u[i], v[j], budget=budget), multiply(u[j], v[i], budget=budget), budget=budget
        )

    return concat([term(1, 2), term(2, 0), term(0, 1)], axis=a1, budget=budget)


def _abs_squared(x: ArrayLike, budget: BudgetLike) -> Result:
    if dtype_of(x).kind == "c":
        return real(multiply(x, conj(x, budget=budget), budget=budget), budget=budget)
    return multiply(x, x, budget=budget)


def vector_norm(
    x: ArrayLike,
    /,
    *,
    axis: int | tuple[int, ...] | None = None,
    keepdims: bool = False,
    ord: float = 2,
    budget: BudgetLike = None,
) -> Result:
    """The ``ord``-norm of ``x`` over ``axis`` (an int, a tuple, or None: every entry).

    ``ord`` is any non-zero real (``sum(|x|**ord)**(1/ord)``), ``inf``/``-inf``
    (the largest/smallest ``|x|``) or ``0`` (the number of non-zero entries). The
    result is real (float32 for complex64 input). Differentiable.
    """
    shape = shape_of(x)
    axes = None if axis is None else normalize_axes(axis, len(shape), "vector_norm")
    kw: dict[str, Any] = dict(axis=axes, keepdims=keepdims, budget=budget)
    if isinstance(ord, bool) or not isinstance(ord, (int, float, np.integer, np.floating)):
        raise ValueError(f"vector_norm: ord must be a real number, got {ord!r}.")
    ord = float(ord)
    if ord == 2:
        return sqrt(sum(_abs_squared(x, budget), **kw), budget=budget)
    a = abs(x, budget=budget)
    if ord == math.inf:
        return max(a, **kw)
    if ord == -math.inf:
        return min(a, **kw)
    if ord == 0:
        return sum(astype(not_equal(x, 0, budget=budget), dtype_of(a), budget=budget), **kw)
    if ord == 1:
        return sum(a, **kw)
    return power(sum(power(a, ord, budget=budget), **kw), 1.0 / ord, budget=budget)


def matrix_norm(
    x: ArrayLike,
    /,
    *,
    keepdims: bool = False,
    ord: float | Literal["fro", "nuc"] = "fro",
    budget: BudgetLike = None,
) -> Result:
    """The ``ord``-norm of each matrix of ``x``: ``"fro"`` (Frobenius), ``"nuc"``
    (the sum of singular values), ``1``/``-1`` (largest/smallest column sum of
    ``|x|``), ``inf``/``-inf`` (rows), ``2``/``-2`` (largest/smallest singular
    value). Differentiable (the singular-value ones through `svdvals`)."""
    _matrix_shape(x, "matrix_norm")
    if ord == "fro":
        return vector_norm(x, axis=(-2, -1), keepdims=keepdims, budget=budget)
    if ord in ("nuc", 2, -2):
        s = svdvals(x, budget=budget)
        pick = sum if ord == "nuc" else max if ord == 2 else min
        out = pick(s, axis=-1, keepdims=keepdims, budget=budget)
        return expand_dims(out, -1, budget=budget) if keepdims else out
    if ord in (1, -1, math.inf, -math.inf):
        along = -2 if ord in (1, -1) else -1
        pick = max if ord > 0 else min
        sums = sum(abs(x, budget=budget), axis=along, keepdims=True, budget=budget)
        out = pick(sums, axis=(-2, -1), keepdims=keepdims, budget=budget)
        return out
    raise ValueError(
        f"matrix_norm: ord must be 'fro', 'nuc', 1, -1, 2, -2, inf or -inf, got {ord!r}."
    )
