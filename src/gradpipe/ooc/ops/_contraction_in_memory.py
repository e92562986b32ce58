"""A `Contraction` of operands in memory, for the gradients of a 0-d product: its
result by ``jax.numpy.einsum`` on the labels (`_contract_in_memory`), and such a
result as the gradient of a DiskArray operand (`_like`)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from ..arrays._array import Result
from ..arrays._hijax import type_of
from ..planning._budget import MemoryBudget


def _like(operand: Result, grad: jax.Array, budget: MemoryBudget) -> Result:
    """``grad`` (a JAX array) as the gradient of ``operand``: a DiskArray's is a
    DiskArray (the in-memory values added to its symbolic zero, which has no file)."""
    t = type_of(operand)
    if t is None:
        return grad
    from ..arrays._hijax import DiskArrayType
    from ._elementwise import add

    return add(DiskArrayType(t.shape, t.dtype).vspace_zero(), grad, budget=budget)


def _contract_in_memory(
    x_labels: tuple[int, ...],
    y_labels: tuple[int, ...],
    out_labels: tuple[int, ...],
    conj: tuple[bool, bool],
    x: jax.Array,
    y: jax.Array,
    dtype: np.dtype,
) -> jax.Array:
    """`Contraction`'s result in ``jax.numpy`` (``einsum``), for operands in memory: a
    label of the output in neither operand is a new axis of size 1."""
    letter = {lab: chr(ord("a") + i) for i, lab in enumerate(sorted({*x_labels, *y_labels}))}
    x = jnp.conj(x) if conj[0] else x
    y = jnp.conj(y) if conj[1] else y
    present = [lab for lab in out_labels if lab in letter]
    spec = "".join(letter[lab] for lab in x_labels) + "," + "".join(letter[lab] for lab in y_labels)
    out = jnp.einsum(spec + "->" + "".join(letter[lab] for lab in present), x, y)
    sizes = iter(out.shape)
    out = jnp.reshape(out, tuple(next(sizes) if lab in letter else 1 for lab in out_labels))
    if jnp.iscomplexobj(out) and np.dtype(dtype).kind != "c":
        out = jnp.real(out)
    return out.astype(dtype)
