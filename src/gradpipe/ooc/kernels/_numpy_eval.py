"""Evaluating a jaxpr with NumPy, on the host, inside or outside a callback.

Block kernels are differentiated by JAX (`_kernel`), but their backward passes run
inside the ordered host callbacks that carry out-of-core work, where calling back
into JAX's runtime can deadlock. So the backward pass is traced once per block
shape with `jax.make_jaxpr` (tracing runs no computation) and the resulting jaxpr is
evaluated here, primitive by primitive, with NumPy. The table grows with JAX's
primitive set, not with the number of array functions; a primitive missing from it
is refused by name. Its rules live by family in `_numpy_elementwise`,
`_numpy_layout`, `_numpy_reductions` and `_numpy_linalg`; this module holds the
evaluator and the primitives that run programs of their own (calls, ``cond``,
``custom_linear_solve``).

Every result is cast to the dtype the jaxpr says, so NumPy's own promotion never
leaks into the values.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from . import _numpy_elementwise, _numpy_layout, _numpy_linalg, _numpy_reductions
from ._numpy_elementwise import Rule

if TYPE_CHECKING:
    from jax.extend.core import ClosedJaxpr, Jaxpr

__all__ = ["evaluate", "supports", "unsupported"]

#: A rule for a primitive that runs a program of its own: (parameters, operands).
CallRule = Callable[[dict[str, Any], list[np.ndarray]], list[np.ndarray]]


def evaluate(closed_jaxpr: ClosedJaxpr, *args: np.ndarray) -> list[np.ndarray]:
    """The outputs of ``closed_jaxpr`` on NumPy ``args``, computed with NumPy."""
    return _eval(closed_jaxpr.jaxpr, closed_jaxpr.consts, args)


def supports(name: str) -> bool:
    """Whether a JAX primitive of this name can be evaluated here."""
    return name in _RULES or name in _CALLS


def unsupported(closed_jaxpr: ClosedJaxpr) -> list[str]:
    """The primitives of ``closed_jaxpr`` (nested calls included) this table lacks."""
    missing: list[str] = []

    def inner_programs(value: Any) -> list[Jaxpr]:
        """The jaxprs a parameter holds: one, or a tuple of them (cond's branches,
        custom_linear_solve's named tuple)."""
        if hasattr(value, "eqns"):
            return [value]
        if hasattr(getattr(value, "jaxpr", None), "eqns"):
            return [value.jaxpr]
        if isinstance(value, (tuple, list)):
            return [j for v in value for j in inner_programs(v)]
        return []

    def walk(jaxpr: Jaxpr) -> None:
        for eqn in jaxpr.eqns:
            name = eqn.primitive.name
            if name not in _RULES and name not in _CALLS and name not in missing:
                missing.append(name)
            for value in eqn.params.values():
                for inner in inner_programs(value):
                    walk(inner)

    walk(closed_jaxpr.jaxpr)
    return missing


def _eval(jaxpr: Jaxpr, consts: Sequence[Any], args: Sequence[Any]) -> list[np.ndarray]:
    env: dict[Any, Any] = {}

    def read(v: Any) -> np.ndarray:
        if hasattr(v, "val") and not hasattr(v, "count"):  # a Literal
            return np.asarray(v.val, _dtype_of(v))
        return env[v]

    for v, c in zip(jaxpr.constvars, consts):
        env[v] = np.asarray(c)
    for v, a in zip(jaxpr.invars, args):
        env[v] = np.asarray(a)
    for eqn in jaxpr.eqns:
        name = eqn.primitive.name
        ins = [read(v) for v in eqn.invars]
        if name in _CALLS:
            outs = _CALLS[name](eqn.params, ins)
        else:
            rule = _RULES.get(name)
            if rule is None:
                raise NotImplementedError(
                    f"gradpipe.ooc cannot run JAX's `{name}` primitive on the host (in the "
                    "backward pass of a block kernel). Write the kernel with other jax.numpy "
                    "functions, or give the operation its own backward_block."
                )
            outs = rule(*ins, **eqn.params)
            if not eqn.primitive.multiple_results:
                outs = [outs]
        for v, o in zip(eqn.outvars, outs):
            if type(v).__name__ == "DropVar":
                continue
            env[v] = _as(o, _dtype_of(v))
    return [read(v) for v in jaxpr.outvars]


def _dtype_of(v: Any) -> np.dtype:
    dtype = v.aval.dtype
    try:
        return np.dtype(dtype)
    except TypeError:  # float0 and JAX's extended dtypes
        return np.dtype(bool)


def _as(x: Any, dtype: np.dtype) -> np.ndarray:
    x = np.asarray(x)
    return x if x.dtype == dtype else x.astype(dtype)


# ------------------------------------------------- primitives that run programs


def _calls_jaxpr(key: str) -> CallRule:
    def call(params: dict[str, Any], ins: list[np.ndarray]) -> list[np.ndarray]:
        inner = params[key]
        jaxpr = getattr(inner, "jaxpr", inner)
        consts = getattr(inner, "consts", ())
        return _eval(jaxpr, consts, ins)

    return call


def _cond(params: dict[str, Any], ins: list[np.ndarray]) -> list[np.ndarray]:
    """``cond``: the branch the first operand names, on the other operands."""
    index, *operands = ins
    branch = params["branches"][int(np.clip(index, 0, len(params["branches"]) - 1))]
    return _eval(getattr(branch, "jaxpr", branch), getattr(branch, "consts", ()), operands)


_CALLS: dict[str, CallRule] = {
    "cond": _cond,
    "pjit": _calls_jaxpr("jaxpr"),
    "jit": _calls_jaxpr("jaxpr"),
    "closed_call": _calls_jaxpr("call_jaxpr"),
    "core_call": _calls_jaxpr("call_jaxpr"),
    "remat": _calls_jaxpr("jaxpr"),
    "checkpoint": _calls_jaxpr("jaxpr"),
    "custom_jvp_call": _calls_jaxpr("call_jaxpr"),
    "custom_vjp_call": _calls_jaxpr("call_jaxpr"),
    "custom_vjp_call_jaxpr": _calls_jaxpr("fun_jaxpr"),
}


def _custom_linear_solve(
    *args: np.ndarray, const_lengths: Any, jaxprs: Any, **_: Any
) -> list[np.ndarray]:
    """The ``solve`` branch, as JAX's own implementation runs it."""
    lengths = list(const_lengths)
    offsets = np.cumsum([0, *lengths])
    solve_consts = list(args[offsets[2] : offsets[3]])
    b = list(args[offsets[-1] :])
    return _eval(jaxprs.solve.jaxpr, jaxprs.solve.consts, solve_consts + b)


def _platform_index(*, platforms: Sequence[Sequence[str] | None], **_: Any) -> np.int32:
    """Which of a platform-dependent computation's branches runs here: the host CPU's,
    else the default (``None``) one (JAX 0.12 writes e.g. ``det`` this way)."""
    for i, names in enumerate(platforms):
        if names is not None and "cpu" in names:
            return np.int32(i)
    return np.int32(next(i for i, names in enumerate(platforms) if names is None))


def _identities(*xs: np.ndarray, **_: Any) -> list[np.ndarray]:
    """``optimization_barrier``: its operands, unchanged."""
    return list(xs)


_RULES: dict[str, Rule] = {
    **_numpy_elementwise.RULES,
    **_numpy_layout.RULES,
    **_numpy_reductions.RULES,
    **_numpy_linalg.RULES,
    "custom_linear_solve": _custom_linear_solve,
    # new in JAX 0.12: platform-dependent code selects a branch with `platform_index`
    "platform_index": _platform_index,
    "optimization_barrier": _identities,
}
