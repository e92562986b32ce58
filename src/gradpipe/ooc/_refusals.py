"""The `TypeError`s a `DiskArray` raises under JAX transformations it does not support.

gradpipe.ooc supports `jax.jit`, `jax.grad`/`jax.vjp`/`jax.value_and_grad`,
`jax.eval_shape` and `lax.cond`/`scan`/`fori_loop`/`while_loop` with DiskArrays
closed over or carried. Every other transformation reaches one of a few hooks
(a primitive's ``jvp`` or ``batch`` rule, a type's ``leading_axis_spec`` or
``shard``), which JAX calls for several public transformations at once: ``jvp``
serves `jax.jvp`, `jax.jacfwd`, `jax.hessian` and `jax.checkpoint`. So each
refusal names the public transformation found on the Python stack (the outermost
one, as the user wrote it), and says what to use instead.
"""

from __future__ import annotations

import os
import sys

__all__ = [
    "refuse_forward_mode",
    "refuse_int_grad_input",
    "refuse_mapping",
    "refuse_scan_over",
    "refuse_sharding",
]

_API = os.sep + os.path.join("jax", "_src", "api.py")
_CHECKPOINT = os.sep + os.path.join("jax", "_src", "ad_checkpoint.py")

# the public function (in jax/_src/api.py) -> what to do instead
_ALTERNATIVES = {
    "hessian": (
        "second derivatives are not supported out of core; compute them in memory on "
        "a subset of the data, or by finite differences of the out-of-core gradient"
    ),
    "jacfwd": "use jax.jacrev on in-memory data, or jax.grad/jax.vjp (reverse mode)",
    "jacrev": (
        "jax.jacrev maps the backward pass over the output with vmap; for a scalar loss "
        "use jax.grad, else loop jax.vjp over the output's rows in Python"
    ),
    "linearize": "use jax.vjp (reverse mode), which keeps its residuals on disk",
    "jvp": "use jax.vjp or jax.grad (reverse mode)",
    "vmap": (
        "loop in Python over the batch, or stack the batch into one DiskArray and use a "
        "blocked operation on it"
    ),
    "pmap": "run out-of-core operations outside jax.pmap/shard_map, on the host",
    "checkpoint": (
        "remove jax.checkpoint (jax.remat) around out-of-core operations: their residuals "
        "are already on disk, not in memory; checkpoint only the in-memory part"
    ),
}


def _transformation(default: str) -> str:
    """The outermost public JAX transformation on the stack, else ``default``.

    Found by the qualified names of JAX's own functions (``jacfwd.<locals>.jacfun``);
    `jax.hessian` shows as ``jacfwd`` around ``jacrev``.
    """
    found: list[str] = []  # innermost first
    frame = sys._getframe(1)
    while frame is not None:
        code = frame.f_code
        if code.co_filename.endswith(_CHECKPOINT):
            found.append("checkpoint")
        elif code.co_filename.endswith(_API):
            name = getattr(code, "co_qualname", code.co_name).split(".")[0].lstrip("_")
            if name in _ALTERNATIVES:
                found.append(name)
        frame = frame.f_back
    if not found:
        return default
    if found[-1] == "jacfwd" and "jacrev" in found:
        return "hessian"
    return found[-1]


def _message(what: str, kind: str) -> str:
    name = _transformation(kind)
    return (
        f"gradpipe.ooc does not support jax.{name} on DiskArrays: {what}. "
        f"{_ALTERNATIVES[name][0].upper()}{_ALTERNATIVES[name][1:]}. Supported: jax.jit, "
        "jax.grad, jax.vjp, jax.value_and_grad, jax.eval_shape, lax.cond/scan/while_loop "
        "with DiskArrays closed over or carried."
    )


def refuse_forward_mode(op) -> None:
    """For a primitive's ``jvp``/``lin`` rule: forward mode and what builds on it."""
    raise TypeError(_message(f"{op!r} was reached by forward-mode differentiation", "jvp"))


def refuse_mapping(what: str) -> None:
    """For ``batch`` rules and a type's ``inc_rank``/``dec_rank``."""
    raise TypeError(_message(what, "vmap"))


def refuse_sharding(what: str) -> None:
    """For a type's ``shard``/``unshard``/``nospec`` (``shard_map``, ``pmap``)."""
    raise TypeError(_message(what, "pmap"))


def refuse_scan_over(shape) -> None:
    """For a type's ``leading_axis_spec``: ``lax.scan``/``lax.map`` over its rows."""
    raise TypeError(
        f"lax.scan/lax.map cannot iterate over the rows of a DiskArray{list(shape)}. "
        "Close over it or carry it instead, or loop in Python over row blocks "
        "(ooc.slice_rows)."
    )


def refuse_stacked_handles() -> None:
    """For `raise_val` of a handle with a leading axis: JAX stacked DiskArrays."""
    raise TypeError(
        "gradpipe.ooc: a JAX transformation tried to stack DiskArrays along a new axis "
        "(jax.grad through lax.scan/fori_loop carrying a DiskArray saves one per "
        "iteration; vmap batches them). Differentiate a Python loop over the steps "
        "instead, or keep the carried DiskArray out of the differentiated loop."
    )


def refuse_int_grad_input(x) -> None:
    """Refuse an int or bool DiskArray as an input of `jax.grad`, as JAX refuses ints.

    `jax.grad` checks its inputs' dtypes in ``_check_input_dtype_revderiv``, but only
    for its own array type; a `DiskArray`'s type is asked for there, so the check is
    made here when that function is the caller (with its ``allow_int``).
    """
    frame = sys._getframe(1)
    for _ in range(10):
        if frame is None:
            return
        code = frame.f_code
        if code.co_name == "check_arg":  # it turns any TypeError into "not a JAX type"
            return  # the same function asks again right after, outside it
        if code.co_name == "_check_input_dtype_revderiv" and code.co_filename.endswith(_API):
            name = frame.f_locals.get("name", "grad")
            if not frame.f_locals.get("allow_int", True):
                raise TypeError(
                    f"jax.{name} requires real- or complex-valued inputs (input dtype that "
                    f"is a sub-dtype of np.inexact), but got a DiskArray of {x.dtype.name} "
                    f"{list(x.shape)}. Differentiate with respect to a float copy "
                    "(x.astype(np.float32)), close over the array instead of passing it "
                    "as a differentiated argument, or use jax.vjp or allow_int=True "
                    "(its gradient is then float0, as for in-memory ints)."
                )
            return
        frame = frame.f_back
