"""A host program's products of a vector with a matrix's rows, computed in batches.

The gradient of ``X @ w`` with respect to ``w`` is ``r @ X``: a vector contracted
with the rows of a block of the data, in every least-squares-like loss's pass. XLA
on the CPU computes that product as one matrix-vector product, at a fraction of the
memory's speed; cut into batches of rows (a batched product, then a sum of the
batches' results) it runs about twice as fast (`benchmarks/piece_products.py`). A
host program of a loss's pass (`_tile_program`) is evaluated step by step with such
products spelled so; its other steps are bound as they were traced.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np
from jax.extend.core import Literal

__all__ = ["evaluate"]

#: rows of a batch at least (fewer and the batches' sum costs more than it saves)
_ROWS = 16
#: batches at most
_BATCHES = 64
#: the types batched: each batch's result is rounded to its type before the sum,
#: which in a narrower float (float16, bfloat16) loses what XLA's one product keeps
_TYPES = (np.dtype(np.float32), np.dtype(np.float64))


def evaluate(closed: Any, args: Sequence[Any]) -> list[Any]:
    """The outputs of the closed jaxpr ``closed`` for ``args`` (as
    `jax.core.eval_jaxpr`), its products of a vector with a matrix's rows batched."""
    jaxpr = closed.jaxpr
    env: dict[Any, Any] = dict(zip(jaxpr.constvars, closed.consts))
    env.update(zip(jaxpr.invars, args))
    for eqn in jaxpr.eqns:
        values = [_read(env, v) for v in eqn.invars]
        batches = _batches(eqn)
        if batches:
            lhs, rhs = values
            got: Any = _batched(batches, lhs, rhs, eqn.params)
        else:
            params = eqn.primitive.get_bind_params(eqn.params)
            if isinstance(params, tuple):  # (JAX before 0.7: sub-functions, params)
                subfuns, params = params
                values = [*subfuns, *values]
            ctx = getattr(eqn, "ctx", None)
            with ctx.manager if ctx is not None else contextlib.nullcontext():
                got = eqn.primitive.bind(*values, **params)
        env.update(zip(eqn.outvars, got if eqn.primitive.multiple_results else [got]))
    return [_read(env, v) for v in jaxpr.outvars]


def _read(env: dict[Any, Any], atom: Any) -> Any:
    return atom.val if isinstance(atom, Literal) else env[atom]


def _batches(eqn: Any) -> int:
    """Into how many batches of rows ``eqn`` is cut: a product of a vector (n,) with
    a matrix (n, k) over their n, of 32- or 64-bit floats; 0 where it is not one,
    or n is too small or has no divisor to make batches of."""
    if eqn.primitive.name != "dot_general" or len(eqn.invars) != 2:
        return 0
    (lc, rc), (lb, rb) = eqn.params["dimension_numbers"]
    lhs, rhs = (v.aval for v in eqn.invars)
    shapes = sorted([lhs.shape, rhs.shape], key=len)
    if (
        lb
        or rb
        or tuple(lc) != (0,)
        or tuple(rc) != (0,)
        or [len(s) for s in shapes] != [1, 2]
        or not all(np.dtype(a.dtype) in _TYPES for a in (lhs, rhs))
    ):
        return 0
    n = shapes[0][0]
    for b in range(min(_BATCHES, n // _ROWS), 1, -1):
        if n % b == 0:
            return b
    return 0


def _batched(b: int, lhs: Any, rhs: Any, params: dict[str, Any]) -> Any:
    """``dot_general`` of ``lhs`` and ``rhs`` (a vector and a matrix, either way
    round, contracted over their first axes) as ``b`` batches of rows."""
    vector_first = np.ndim(lhs) == 1
    vector, matrix = (lhs, rhs) if vector_first else (rhs, lhs)
    precision = params.get("precision")
    if isinstance(precision, tuple) and not vector_first:  # (one per operand)
        precision = precision[::-1]
    n, k = matrix.shape
    rows = jax.numpy.reshape(vector, (b, 1, n // b))
    block = jax.numpy.reshape(matrix, (b, n // b, k))
    parts = jax.lax.dot_general(
        rows,
        block,
        (((2,), (1,)), ((0,), (0,))),
        precision=precision,
        preferred_element_type=params.get("preferred_element_type"),
    )
    return jax.numpy.sum(parts, axis=(0, 1), dtype=parts.dtype)
