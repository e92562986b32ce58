"""`matmul`, the array API standard's matrix product: one `Contraction`, and
`MatMul`, its 2-D form."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from ..arrays._array import ArrayLike, Result
from ..arrays._hijax import type_of
from ..arrays._op import apply
from ._arg_types import BudgetLike
from ._contraction import Contraction
from ._contraction_labels import _shape_dtype

__all__ = ["MatMul", "matmul"]


class MatMul(Contraction):
    """The 2-D product ``op(a) @ op(b)``, ``op`` transposing where `transpose_a` /
    `transpose_b` (read in place: nothing is copied)."""

    def __init__(self, transpose_a: bool = False, transpose_b: bool = False) -> None:
        super().__init__(
            a_labels=(2, 0) if transpose_a else (0, 2),
            b_labels=(1, 2) if transpose_b else (2, 1),
            out_labels=(0, 1),
            label="matmul",
        )

    transpose_a = property(lambda self: self.a_labels == (2, 0))
    transpose_b = property(lambda self: self.b_labels == (1, 2))


def matmul(
    x1: ArrayLike,
    x2: ArrayLike,
    /,
    *,
    transpose_a: bool = False,
    transpose_b: bool = False,
    budget: BudgetLike = None,
) -> Result:
    """The matrix product ``x1 @ x2`` of the array API standard, out of core.

    Operands of two or more dimensions are stacks of matrices whose leading (batch)
    axes broadcast; a 1-D first operand is a row vector and a 1-D second one a
    column vector, their added axis removed from the result (NumPy's rules).

    **Arguments:**

    - `x1`, `x2`: `DiskArray`s (traced or not) of at least one dimension.
    - `transpose_a`, `transpose_b`: use ``x1`` / ``x2`` with its last two axes
      swapped, read in place (operands of two or more dimensions).
    - `budget`: a `MemoryBudget` for this call.

    **Returns:** a `DiskArray` of shape ``(*batch, m, n)`` (a 0-d JAX array for two
    vectors), in NumPy's dtype (``bool @ bool`` is bool; integers wrap).
    Differentiable in every floating operand: the backward pass is two more
    out-of-core products.
    """
    if type_of(x1) is None and type_of(x2) is None:
        a, b = jnp.asarray(x1), jnp.asarray(x2)
        a = jnp.swapaxes(a, -1, -2) if transpose_a else a
        b = jnp.swapaxes(b, -1, -2) if transpose_b else b
        return jnp.matmul(a, b)
    sa, sb = _shape_dtype(x1)[0], _shape_dtype(x2)[0]
    if not sa or not sb:
        raise ValueError(
            f"matmul needs operands of at least one dimension, got shapes {sa} and {sb}; "
            "multiply by a scalar with ooc.multiply."
        )
    for flag, shape, which in ((transpose_a, sa, "transpose_a"), (transpose_b, sb, "transpose_b")):
        if flag and len(shape) < 2:
            raise ValueError(
                f"matmul: {which} needs an operand of two or more dimensions, got {shape}."
            )
    ka = sa[-2] if transpose_a else sa[-1]
    kb = sb[-1] if len(sb) == 1 else sb[-1] if transpose_b else sb[-2]
    if ka != kb:
        raise ValueError(
            f"matmul: inner dimensions differ ({ka} vs {kb}) for shapes {sa} and {sb} "
            f"(transpose_a={transpose_a}, transpose_b={transpose_b}): the contracted axis "
            "of x1 is its last, of x2 its second-to-last (its only one for a vector)."
        )
    ba, bb = sa[:-2], sb[:-2]
    try:
        np.broadcast_shapes(ba, bb)
    except ValueError:
        raise ValueError(
            f"matmul: the batch shapes {ba} and {bb} (of operands {sa} and {sb}) do not "
            "broadcast together."
        ) from None
    if len(sa) == len(sb) == 2:
        op: Contraction = MatMul(bool(transpose_a), bool(transpose_b))
    else:
        nb = max(len(ba), len(bb))
        batch, (m, n, k) = tuple(range(nb)), (nb, nb + 1, nb + 2)
        mat_a = (k,) if len(sa) == 1 else (k, m) if transpose_a else (m, k)
        mat_b = (k,) if len(sb) == 1 else (n, k) if transpose_b else (k, n)
        out = batch + (m,) * (len(sa) > 1) + (n,) * (len(sb) > 1)
        op = Contraction(
            batch[nb - len(ba) :] + mat_a, batch[nb - len(bb) :] + mat_b, out, label="matmul"
        )
    return apply(op, x1, x2, budget=budget)
