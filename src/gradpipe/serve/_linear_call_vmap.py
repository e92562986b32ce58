"""A batching rule for ``jax.custom_derivatives.linear_call`` (JAX has none).

`RemoteComponent` writes its derivative as a ``linear_call`` (a linear map with a
custom transpose: ``/jvp`` forward, ``/vjp`` backward). Without a batching rule,
``vmap`` of a gradient of a remote component fails with ``NotImplementedError``. The
rule is the obvious one: broadcast every operand to the batch, move the batch axis
first, and batch the linear map and its transpose as jaxprs. Each callback inside
keeps its own ``vmap_method`` (``"sequential"``: one request per element), so the
answer is the per-element one.

This touches JAX internals (``linear_call_p``, ``batch_jaxpr``,
``fancy_primitive_batchers``), identical in jax 0.10.2 to 0.12; it is registered only
where JAX has no rule of its own, and only by `install`.
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp

__all__ = ["install"]


def _rule(axis_data: Any, args: Any, dims: Any, *, callee: Any, transpose_thunk: Any,
          num_callee_consts: int, num_res: int) -> tuple[list[Any], list[int]]:  # fmt: skip
    from jax._src.custom_derivatives import linear_call_p
    from jax._src.interpreters import batching

    size = axis_data.size
    moved = [
        jnp.broadcast_to(x, (size, *jnp.shape(x))) if d is None
        else jnp.moveaxis(x, d, 0)
        for x, d in zip(args, dims)
    ]  # fmt: skip
    batched_callee, _ = batching.batch_jaxpr(callee, axis_data, [True] * len(moved), True)

    def batched_transpose_thunk() -> Any:
        transpose, t_consts = transpose_thunk()
        n_consts = len(t_consts)
        in_batched = [False] * n_consts + [True] * (len(transpose.in_avals) - n_consts)
        batched, _ = batching.batch_jaxpr(transpose, axis_data, in_batched, True)
        return batched, t_consts

    outs = linear_call_p.bind(
        *moved, callee=batched_callee, transpose_thunk=batched_transpose_thunk,
        num_callee_consts=num_callee_consts, num_res=num_res,
    )  # fmt: skip
    return outs, [0] * len(outs)


def install() -> None:
    """Register the rule, unless JAX already batches ``linear_call`` itself."""
    from jax._src.custom_derivatives import linear_call_p
    from jax._src.interpreters import batching

    batching.fancy_primitive_batchers.setdefault(linear_call_p, _rule)
