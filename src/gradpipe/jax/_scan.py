"""`truncated_scan`: a ``lax.scan`` whose gradient through the carry is cut."""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any, TypeVar

import jax
import jax.numpy as jnp

__all__ = ["truncated_scan"]

Carry = TypeVar("Carry")


def truncated_scan(
    f: Callable[[Carry, Any], tuple[Carry, Any]],
    init: Carry,
    xs: Any,
    *,
    k: int,
    length: int | None = None,
) -> tuple[Carry, Any]:
    """``jax.lax.scan(f, init, xs)`` with the carry's gradient kept for the last `k` steps.

    Long rollouts (a plume refilled every hour, a model stepped through a season)
    have gradients that grow or vanish through the carry and cost memory for every
    step. Truncating backpropagation keeps only the recent past: the carry entering
    step ``T - k`` is passed through ``jax.lax.stop_gradient``, so the final carry
    and the outputs of the last `k` steps depend differentiably on the inputs of those
    steps only (and on parameters closed over by `f`, through every step's output).
    Outputs of earlier steps keep their full gradient. The forward values are those
    of ``lax.scan``: the same body runs in the same order.

    **Arguments:**

    - `f`: the step, ``(carry, x) -> (carry, y)`` as for ``lax.scan``.
    - `init`: the initial carry.
    - `xs`: the per-step inputs, a PyTree of arrays with a leading axis of length
      ``T`` (or ``None`` with `length`).
    - `k`: how many of the last steps the carry's gradient flows through, ``k >= 1``;
      ``k >= T`` is a plain ``lax.scan``.
    - `length`: ``T``, needed only when `xs` has no leaves.

    **Returns:**

    ``(final_carry, ys)`` as ``lax.scan`` returns them.

    ```python
    decay = lambda c, q: (0.9 * c + q, None)
    grad = jax.grad(lambda q: truncated_scan(decay, 0.0, q, k=3)[0])(jnp.ones(24))
    # nonzero only in its last 3 entries: 0.81, 0.9, 1.0
    ```
    """
    if isinstance(k, bool):
        raise TypeError("truncated_scan: k must be an int, got a bool.")
    try:
        k = operator.index(k)
    except TypeError:
        raise TypeError(f"truncated_scan: k must be an int, got {type(k).__name__}.") from None
    if k < 1:
        raise ValueError(
            f"truncated_scan: k must be at least 1, got k={k}. k=1 keeps the gradient "
            f"through the last step only; to cut it there too, apply "
            f"jax.lax.stop_gradient to the carry inside f."
        )
    leaves = jax.tree_util.tree_leaves(xs)
    if length is None:
        if not leaves:
            raise ValueError("truncated_scan: xs has no arrays; pass length=T.")
        length = int(jnp.shape(leaves[0])[0])
    if k >= length:
        return jax.lax.scan(f, init, xs, length=length)

    split = length - k
    head = jax.tree_util.tree_map(lambda x: x[:split], xs)
    tail = jax.tree_util.tree_map(lambda x: x[split:], xs)
    carry, head_ys = jax.lax.scan(f, init, head, length=split)
    carry = jax.lax.stop_gradient(carry)
    carry, tail_ys = jax.lax.scan(f, carry, tail, length=k)
    ys = jax.tree_util.tree_map(lambda a, b: jnp.concatenate([a, b]), head_ys, tail_ys)
    return carry, ys
