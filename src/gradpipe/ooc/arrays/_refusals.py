"""The `TypeError`s a `DiskArray` raises under JAX transformations it does not support.

gradpipe.ooc supports `jax.jit`, `jax.grad`/`jax.vjp`/`jax.value_and_grad`,
`jax.eval_shape` and `lax.cond`/`scan`/`fori_loop`/`while_loop` with DiskArrays
closed over or carried. Every other transformation reaches one of a few hooks
(a primitive's ``jvp`` or ``batch`` rule, a type's ``leading_axis_spec``,
``shard``, ``sharding`` or ``lower_val``), which JAX calls for several public
transformations at once: ``jvp`` serves `jax.jvp`, `jax.jacfwd`, `jax.hessian`
and `jax.checkpoint`; ``sharding`` is read by `jax.jacfwd`/`jax.jacrev` (to build
the basis they map over) and `jax.shard_map` (to check its specs); ``lower_val``
runs inside `jax.checkpoint` even without a gradient. So each refusal names the
public transformation found on the Python stack (the outermost one, as the user
wrote it), and says what to use instead.

JAX's own functions that cannot take a DiskArray are named too
(`refuse_jax_function`): `jax.device_put` and, of a traced DiskArray,
`jnp.zeros_like` and its kin read ``sharding`` (each is found on the stack, as
above); `jax.lax.with_sharding_constraint`, and `jax.numpy.array` of a traced
DiskArray, by the primitive they bind (see `_jax_hooks.route_jax_primitives`).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from types import FrameType
from typing import NoReturn

from ._array import DiskArray

__all__ = [
    "refuse_checkpoint",
    "refuse_forward_mode",
    "refuse_int_grad_input",
    "refuse_jax_function",
    "refuse_mapping",
    "refuse_scan_over",
    "refuse_traced",
    "refuse_sharding",
    "refuse_sharding_spec",
]

_API = os.sep + os.path.join("jax", "_src", "api.py")
_CHECKPOINT = os.sep + os.path.join("jax", "_src", "ad_checkpoint.py")
# JAX's modules whose every function belongs to one transformation (jax.pmap runs
# through shard_map's: the outermost one found names it)
_MODULES = {
    _CHECKPOINT: "checkpoint",
    os.sep + os.path.join("jax", "_src", "shard_map.py"): "shard_map",
    os.sep + os.path.join("jax", "_src", "pmap.py"): "pmap",
}

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
    "shard_map": "run out-of-core operations outside jax.pmap/shard_map, on the host",
    "checkpoint": (
        "remove jax.checkpoint (jax.remat) around out-of-core operations: their residuals "
        "are already on disk, not in memory; checkpoint only the in-memory part"
    ),
}


def _transformations() -> list[str]:
    """The public JAX transformations on the stack, innermost first.

    Found by the qualified names of JAX's own functions (``jacfwd.<locals>.jacfun``);
    `jax.hessian` shows as ``jacfwd`` around ``jacrev``, or, before ``jacrev`` runs,
    as ``jacfwd`` of a function that ``jacrev`` made.
    """
    found: list[str] = []
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        code = frame.f_code
        module = next((m for m in _MODULES if code.co_filename.endswith(m)), None)
        if module is not None:
            found.append(_MODULES[module])
        elif code.co_filename.endswith(_API):
            name = _qualname(code).split(".")[0].lstrip("_")
            if name == "jacfwd" and _qualname(frame.f_locals.get("fun")).startswith("jacrev"):
                found.append("jacrev")
            if name in _ALTERNATIVES:
                found.append(name)
        frame = frame.f_back
    return found


def _transformation(default: str) -> str:
    """The outermost public JAX transformation on the stack, else ``default``."""
    found = _transformations()
    if not found:
        return default
    if found[-1] == "jacfwd" and "jacrev" in found:
        return "hessian"
    return found[-1]


def _qualname(code_or_function: object) -> str:
    code = getattr(code_or_function, "__code__", code_or_function)
    return getattr(code, "co_qualname", getattr(code, "co_name", ""))


def _message(what: str, kind: str) -> str:
    name = _transformation(kind)
    return (
        f"gradpipe.ooc does not support jax.{name} on DiskArrays: {what}. "
        f"{_ALTERNATIVES[name][0].upper()}{_ALTERNATIVES[name][1:]}. Supported: jax.jit, "
        "jax.grad, jax.vjp, jax.value_and_grad, jax.eval_shape, lax.cond/scan/while_loop "
        "with DiskArrays closed over or carried."
    )


def refuse_forward_mode(op: object) -> NoReturn:
    """For a primitive's ``jvp``/``lin`` rule: forward mode and what builds on it."""
    raise TypeError(_message(f"{op!r} was reached by forward-mode differentiation", "jvp"))


def refuse_mapping(what: str) -> NoReturn:
    """For ``batch`` rules and a type's ``inc_rank``/``dec_rank``."""
    raise TypeError(_message(what, "vmap"))


def refuse_sharding(what: str) -> NoReturn:
    """For a type's ``shard``/``unshard``/``nospec`` (``shard_map``, ``pmap``)."""
    raise TypeError(_message(what, "pmap"))


_READ_SHARDING = {"jacfwd", "jacrev", "shard_map", "pmap"}
_LAX = os.sep + os.path.join("jax", "_src", "lax", "lax.py")


def refuse_sharding_spec(shape: Sequence[int]) -> NoReturn:
    """For a type's ``sharding``: refused under a transformation that reads it.

    `jax.jacfwd`/`jax.jacrev` read it to build their basis and `jax.shard_map` to
    check its specs; so do `jax.device_put` (to find the data's device) and, of a
    traced DiskArray, `jnp.zeros_like` and its kin (to place the new array).
    Elsewhere JAX asks with ``getattr(x, "sharding", default)``, so outside those
    it stays absent (an `AttributeError`), as before.
    """
    what = f"a DiskArray{list(shape)} lives on disk and has no device sharding"
    if not _READ_SHARDING.intersection(_transformations()):
        if _called_from(_API, "device_put"):
            refuse_jax_function("device_put", shape)
        if _called_from(_LAX, "full_like"):
            refuse_jax_function("full_like", shape)
        raise AttributeError(f"'DiskArrayType' object has no attribute 'sharding' ({what})")
    raise TypeError(_message(what, "pmap"))


def _called_from(filename: str, function: str) -> bool:
    frame: FrameType | None = sys._getframe(2)
    while frame is not None:
        if frame.f_code.co_name == function and frame.f_code.co_filename.endswith(filename):
            return True
        frame = frame.f_back
    return False


# JAX's own functions that cannot take a DiskArray: the primitive they bind (see
# `_jax_hooks.route_jax_primitives`) or the function found on the stack -> (the public
# function, why not, what to do instead)
_FUNCTIONS = {
    "device_put": (
        "jax.device_put",
        "its data stays on disk, on no device",
        "Compute on it with the gradpipe.ooc functions, or read it into memory outside "
        "jax.jit/grad: jax.device_put(x.to_numpy())",
    ),
    "sharding_constraint": (
        "jax.lax.with_sharding_constraint",
        "a DiskArray lives on disk and has no device sharding",
        "Constrain in-memory values only: out-of-core operations run on the host",
    ),
    "copy": (
        "jax.numpy.array",
        "it would copy the data into memory, which is not read while JAX traces",
        "Use the gradpipe.ooc functions on it (ooc.asarray(x) copies it on disk), or "
        "return it from the traced function and read it outside with np.asarray(x)",
    ),
    "full_like": (
        "jax.numpy.zeros_like/ones_like/full_like/empty_like",
        "the new array would take its device sharding, and a DiskArray on disk has none",
        "Use ooc.zeros_like(x)/ooc.full_like(x, value) for an array on disk, or "
        "jnp.zeros(x.shape, x.dtype) for one in memory",
    ),
    "debug_print": (
        "jax.debug.print",
        "this version of JAX passes jax.debug.print arguments in a way gradpipe.ooc does not know",
        "Use jax.debug.callback, whose callback receives the DiskArray",
    ),
}


def refuse_jax_function(key: str, shape: Sequence[int]) -> NoReturn:
    """For JAX's own function ``key`` (the primitive it binds, or its name on the stack)."""
    function, why, instead = _FUNCTIONS[key]
    raise TypeError(
        f"gradpipe.ooc: {function} cannot take a DiskArray{list(shape)}: {why}. {instead}."
    )


def refuse_checkpoint(shape: Sequence[int]) -> None:
    """For a type's ``lower_val``: refused while `jax.checkpoint` lowers a DiskArray.

    `jax.checkpoint` (`jax.remat`) lowers its body's DiskArrays to their int32
    handles and never raises its results back: a DiskArray it returned came back as
    a bare int32 handle (eagerly, a silent wrong answer) or failed with "no
    attribute _handle" (under `jax.jit`). So a DiskArray reaching it is refused,
    with or without a gradient, whatever the body returns.
    """
    frame: FrameType | None = sys._getframe(
        1
    )  # every lowering asks: a plain walk, not _transformations
    while frame is not None and not frame.f_code.co_filename.endswith(_CHECKPOINT):
        frame = frame.f_back
    if frame is not None:
        raise TypeError(
            _message(
                f"it hands a DiskArray{list(shape)} result back as a bare file handle",
                "checkpoint",
            )
        )


def refuse_scan_over(shape: Sequence[int]) -> NoReturn:
    """For a type's ``leading_axis_spec``: ``lax.scan``/``lax.map`` over its rows.

    JAX asks the same of a loop's per-step results (``unmapped_leading_aval``) when
    it stacks them, which is `refuse_stacked_handles`'s case.
    """
    if sys._getframe(2).f_code.co_name == "unmapped_leading_aval":
        refuse_stacked_handles()
    raise TypeError(
        f"lax.scan/lax.map cannot iterate over the rows of a DiskArray{list(shape)}. "
        "Close over it or carry it instead, or loop in Python over row blocks "
        "(ooc.slice_rows)."
    )


def refuse_stacked_handles() -> NoReturn:
    """For `raise_val` of a handle with a leading axis: JAX stacked DiskArrays."""
    raise TypeError(
        "gradpipe.ooc: a JAX transformation tried to stack DiskArrays along a new axis "
        "(lax.scan returning one per step as its ys; jax.grad through lax.scan/fori_loop "
        "carrying a DiskArray saves one per iteration; vmap batches them). Differentiate "
        "a Python loop over the steps instead, keep the carried DiskArray out of the "
        "differentiated loop, or collect per-step DiskArrays in a Python list."
    )


def refuse_int_grad_input(x: DiskArray) -> None:
    """Refuse an int or bool DiskArray as an input of `jax.grad`, as JAX refuses ints.

    `jax.grad` checks its inputs' dtypes in ``_check_input_dtype_revderiv``, but only
    for its own array type; a `DiskArray`'s type is asked for there, so the check is
    made here when that function is the caller (with its ``allow_int``).
    """
    frame: FrameType | None = sys._getframe(1)
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


def refuse_traced(*_: object) -> NoReturn:
    """Refuse ``x[key] = value`` on a traced DiskArray (its aval's ``_setitem`` too)."""
    raise TypeError(
        "x[...] = value writes into a DiskArray in place, which JAX cannot trace (inside "
        "jax.jit/grad). Compute the new array instead: ooc.where(mask, value, x), or "
        "write it outside the traced function with ooc.update_(x, new)."
    )
