"""Linear algebra of the array API standard beyond matmul: tensordot, vecdot and
matrix_transpose, out of core.

`tensordot` and `vecdot` are one `Contraction` each (the primitive behind
`matmul`): their axes become labels, so no operand is permuted or reshaped on disk
and memory stays bounded; their gradients are two more contractions.
`matrix_transpose` is a `Transpose` of the last two axes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeGuard

import jax.numpy as jnp
import numpy as np

from ..arrays._array import ArrayLike, Result
from ..arrays._hijax import type_of
from ..arrays._op import apply
from ._arg_types import BudgetLike
from ._contraction import Contraction
from ._contraction_labels import _shape_dtype
from ._layout import Transpose

__all__ = ["matrix_transpose", "tensordot", "vecdot"]


def _is_int(a: object) -> TypeGuard[int | np.integer]:
    return isinstance(a, (int, np.integer)) and not isinstance(a, (bool, np.bool_))


def _operand(x: ArrayLike) -> ArrayLike:
    """A DiskArray or a NumPy array as it is (a float64 one that JAX would hold in 32
    bits while x64 is off goes to disk once, exact, as every operation's in-memory
    operands do); anything else as a JAX value (0-d, or refused by the op)."""
    if type_of(x) is not None or isinstance(x, (np.ndarray, np.generic)):
        return x
    return jnp.asarray(x)


def tensordot(
    x1: ArrayLike,
    x2: ArrayLike,
    /,
    *,
    axes: int | tuple[Sequence[int], Sequence[int]] = 2,
    budget: BudgetLike = None,
) -> Result:
    """The tensor contraction of the array API standard, out of core.

    **Arguments:**

    - `x1`, `x2`: `DiskArray`s (traced or not); a 0-d operand may be a JAX value.
    - `axes`: an int ``n`` (the last ``n`` axes of ``x1`` with the first ``n`` of
      ``x2``, in order) or a pair of sequences of axes, paired up in order.
      Contracted axes must have equal sizes (they are not broadcast).
    - `budget`: a `MemoryBudget` for this call.

    **Returns:** a `DiskArray` with the remaining axes of ``x1`` followed by those of
    ``x2`` (a 0-d JAX array when none remain), in NumPy's dtype. Differentiable in
    every floating operand.
    """
    if type_of(x1) is None and type_of(x2) is None:
        return jnp.tensordot(jnp.asarray(x1), jnp.asarray(x2), axes=axes)
    x1, x2 = _operand(x1), _operand(x2)
    sa, sb = _shape_dtype(x1)[0], _shape_dtype(x2)[0]
    ax1, ax2 = _tensordot_axes(axes, sa, sb)
    for i, j in zip(ax1, ax2):
        if sa[i] != sb[j]:
            raise ValueError(
                f"tensordot: axis {i} of x1 (size {sa[i]}, shape {sa}) and axis {j} of x2 "
                f"(size {sb[j]}, shape {sb}) are contracted, so their sizes must be equal."
            )
    a_labels = tuple(range(len(sa)))
    paired = dict(zip(ax2, ax1))
    b_labels = tuple(paired[j] if j in paired else len(sa) + j for j in range(len(sb)))
    out = tuple(i for i in a_labels if i not in ax1) + tuple(
        len(sa) + j for j in range(len(sb)) if j not in paired
    )
    return apply(Contraction(a_labels, b_labels, out, label="tensordot"), x1, x2, budget=budget)


def _tensordot_axes(
    axes: object, sa: tuple[int, ...], sb: tuple[int, ...]
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """``axes`` as two tuples of non-negative axes, checked."""
    if _is_int(axes):
        n = int(axes)
        if not 0 <= n <= min(len(sa), len(sb)):
            raise ValueError(
                f"tensordot: axes={n} must be between 0 and the smaller number of "
                f"dimensions ({min(len(sa), len(sb))}) of shapes {sa} and {sb}."
            )
        return tuple(range(len(sa) - n, len(sa))), tuple(range(n))
    if not (isinstance(axes, Sequence) and len(axes) == 2):
        raise TypeError(
            f"tensordot: axes must be an int or a pair of sequences of ints, got {axes!r}."
        )
    pair = []
    for seq, shape, name in zip(axes, (sa, sb), ("x1", "x2")):
        seq = (seq,) if _is_int(seq) else seq
        if not (isinstance(seq, Sequence) and all(_is_int(a) for a in seq)):
            raise TypeError(f"tensordot: axes for {name} must be ints, got {seq!r}.")
        norm = []
        for a in seq:
            if not -len(shape) <= a < len(shape):
                raise ValueError(
                    f"tensordot: axis {a} is out of range for {name} of shape {shape}."
                )
            norm.append(int(a) % len(shape))
        if len(set(norm)) != len(norm):
            raise ValueError(f"tensordot: axes {tuple(seq)} for {name} repeat an axis.")
        pair.append(tuple(norm))
    if len(pair[0]) != len(pair[1]):
        raise ValueError(
            f"tensordot: axes {tuple(axes[0])} and {tuple(axes[1])} must pair up one to one."
        )
    return pair[0], pair[1]


def vecdot(x1: ArrayLike, x2: ArrayLike, /, *, axis: int = -1, budget: BudgetLike = None) -> Result:
    """The dot product of vectors along ``axis``, ``sum(conj(x1) * x2, axis)``, out of core.

    As in NumPy and JAX, ``axis`` is an axis of each operand (negative ones count
    from the end, the standard's form); the other axes broadcast.

    **Arguments:**

    - `x1`, `x2`: `DiskArray`s (traced or not) of at least one dimension; ``x1`` is
      conjugated when complex.
    - `axis`: the axis summed over; its size must be the same in both operands.
    - `budget`: a `MemoryBudget` for this call.

    **Returns:** a `DiskArray` of the broadcast shape without that axis (a 0-d JAX
    array for two vectors), in NumPy's dtype. Differentiable in every floating
    operand.
    """
    if type_of(x1) is None and type_of(x2) is None:
        return jnp.vecdot(jnp.asarray(x1), jnp.asarray(x2), axis=axis)
    x1, x2 = _operand(x1), _operand(x2)
    (sa, da), (sb, _) = _shape_dtype(x1), _shape_dtype(x2)
    if not _is_int(axis):
        raise TypeError(f"vecdot: axis must be an int, got {axis!r}.")
    for shape, name in ((sa, "x1"), (sb, "x2")):
        if not -len(shape) <= axis < len(shape):
            raise ValueError(f"vecdot: axis {axis} is out of range for {name} of shape {shape}.")
    ia, ib = axis % len(sa), axis % len(sb)
    if sa[ia] != sb[ib]:
        raise ValueError(
            f"vecdot: the vectors along axis {axis} have sizes {sa[ia]} (x1, shape {sa}) "
            f"and {sb[ib]} (x2, shape {sb}); they must be equal (they are not broadcast)."
        )
    ra, rb = sa[:ia] + sa[ia + 1 :], sb[:ib] + sb[ib + 1 :]
    try:
        np.broadcast_shapes(ra, rb)
    except ValueError:
        raise ValueError(
            f"vecdot: shapes {sa} and {sb} do not broadcast together (axis {axis} aside)."
        ) from None
    nb = max(len(ra), len(rb))
    batch, k = tuple(range(nb)), nb

    def labels(rest_ndim: int, at: int) -> tuple[int, ...]:
        own = list(batch[nb - rest_ndim :])
        own.insert(at, k)
        return tuple(own)

    op = Contraction(
        labels(len(ra), ia), labels(len(rb), ib), batch, (da.kind == "c", False), label="vecdot"
    )
    return apply(op, x1, x2, budget=budget)


def matrix_transpose(x: ArrayLike, /, *, budget: BudgetLike = None) -> Result:
    """``x`` with its last two axes swapped (a stack of transposed matrices), out of core.

    **Arguments:**

    - `x`: a `DiskArray` (traced or not) of at least two dimensions.
    - `budget`: a `MemoryBudget` for this call.

    **Returns:** a `DiskArray` of shape ``(..., n, m)``. Differentiable.
    """
    t = type_of(x)
    if t is None:
        return jnp.matrix_transpose(jnp.asarray(x))
    nd = len(t.shape)
    if nd < 2:
        raise ValueError(
            f"matrix_transpose needs an array of at least two dimensions, got shape "
            f"{t.shape}; use ooc.reshape to make a vector a (1, n) matrix."
        )
    axes = (*range(nd - 2), nd - 1, nd - 2)
    return apply(Transpose(axes), x, budget=budget)
