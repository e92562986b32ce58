"""How JAX's own operators and primitives take a DiskArray.

Two things JAX does not know about a hijax type, taught here once, at import
(`install`), leaving JAX's rules unchanged for every other operand:

- a traced JAX value on the left of an arithmetic operator hands a traced
  DiskArray on the right to the DiskArray's own operator (`route_jax_operators`);
- JAX's functions a user applies to arrays inside a program (``stop_gradient``,
  ``checkpoint_name``, ``optimization_barrier``, the callbacks and
  ``jax.debug.print``) take a DiskArray, and the ones that cannot are refused by
  name (`route_jax_primitives`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import jax
import jax.numpy as jnp
import numpy as np

from . import _handles, _refusals
from ._array import DiskArray, _is_concrete
from ._hijax import DiskArrayType, ShapedArray, type_of

__all__ = ["install", "route_jax_operators", "route_jax_primitives", "stop_gradient_with"]

if TYPE_CHECKING:
    from jax.extend.core import Primitive


def install() -> None:
    """Teach JAX both things (idempotent)."""
    route_jax_operators()
    route_jax_primitives()


# ---------------------------------------------------------------- JAX values on the left

# The `ShapedArray` operator hooks that hand a DiskArray right operand over. Not the
# comparisons: Python tries `x.__gt__(s)` after `s.__lt__(x)` declines, whatever the
# classes.
_DEFERRED_OPERATORS = (
    "add", "sub", "mul", "truediv", "floordiv", "mod", "divmod", "pow", "matmul",
    "and", "or", "xor", "lshift", "rshift",
)  # fmt: skip


def _defer_to_disk_array(name: str, jax_hook: Callable[..., Any]) -> Callable[..., Any]:
    """``ShapedArray._<name>`` that hands a DiskArray right operand to its own hook."""

    def hook(x: Any, other: Any, *args: Any) -> Any:
        t = type_of(other)
        if t is not None:  # `x + other` is `other.__radd__(x)`
            return getattr(t, f"_r{name}")(other, x)
        return jax_hook(x, other, *args)

    hook.gradpipe_defers = jax_hook  # type: ignore[attr-defined]  # a mark on the function
    return hook


def route_jax_operators() -> None:
    """Make ``s + x`` work for a traced JAX value ``s`` and a traced DiskArray ``x``.

    Under `jax.jit` and `jax.grad` both are tracers of one Python class
    (``DynamicJaxprTracer``, ``LinearizeTracer``), and Python tries the reflected
    ``x.__radd__(s)`` only for operands of different classes. So ``s + x`` calls
    ``s.__add__(x)`` alone, which JAX forwards to ``ShapedArray._add(s, x)``.
    JAX's rule does not know a DiskArray's type and declines, so without this
    ``ooc.min(v) + ooc.std(v, axis=0)`` under `jax.grad` fails with "unsupported
    operand type(s) for +: 'LinearizeTracer' and 'LinearizeTracer'". Each
    arithmetic and bitwise hook of `ShapedArray` (JAX's tracer-to-aval operator
    forwarding, which `DiskArrayType`'s own hooks rely on too) is wrapped to pass a
    DiskArray right operand to `DiskArrayType`'s reflected hook; any other operand
    reaches JAX's rule unchanged. Idempotent; a hook JAX lacks is left alone.
    """
    for name in _DEFERRED_OPERATORS:
        jax_hook = getattr(ShapedArray, f"_{name}", None)
        if jax_hook is None or hasattr(jax_hook, "gradpipe_defers"):
            continue
        setattr(ShapedArray, f"_{name}", staticmethod(_defer_to_disk_array(name, jax_hook)))


# ---------------------------------------------------------------- JAX's own primitives


#: How a DiskArray's gradient is stopped where a program evaluates (set by
#: `ops._elementwise`, which this layer does not import): a step of its chain that
#: passes the values and, in a loss's own pass, stops the gradient there
#: (`execution._one_pass`). Without it the DiskArray itself is returned.
_stopped: Callable[[Any], Any] | None = None


def stop_gradient_with(stopped: Callable[[Any], Any]) -> None:
    """Make ``stopped(x)`` what `jax.lax.stop_gradient` of a DiskArray ``x`` evaluates to."""
    global _stopped
    _stopped = stopped


def _passed_through(prim: Primitive) -> Callable[..., Any]:
    """An identity's rule (stop_gradient, checkpoint_name, optimization_barrier): a
    DiskArray comes out as it went in; other operands still go through ``prim``.

    JAX asks for ``to_lojax`` only where it evaluates or lowers, after autodiff has
    applied ``prim``'s own jvp rule, so stop_gradient's gradient stays zero.
    """

    def rule(*args: Any, **params: Any) -> Any:
        if not prim.multiple_results:
            if prim.name == "stop_gradient" and _stopped is not None:
                return _stopped(args[0])
            return args[0]
        others = iter(prim.bind(*[a for a in args if type_of(a) is None], **params))
        return [a if type_of(a) is not None else next(others) for a in args]

    return rule


def _handle_of(x: DiskArray) -> Any:  # np.int32, or a traced int32
    h = x._handle
    return np.int32(h) if _is_concrete(h) else h


def _disk_array_at(handle: Any, t: DiskArrayType) -> DiskArray:
    """The DiskArray behind ``handle`` in a callback: a view, the program keeps the file."""
    h = int(np.asarray(handle))
    f = _handles.lookup(h, t.shape, t.dtype)
    return DiskArray(None if h == _handles.ZERO_HANDLE else f, t.shape, t.dtype, h)


def _called_back(prim: Primitive) -> Callable[..., Any]:
    """A callback's rule (jax.debug.callback, jax.pure_callback, io_callback): each
    DiskArray travels as its int32 handle and reaches the callback as a DiskArray."""

    def rule(*args: Any, callback: Callable[..., Any], **params: Any) -> Any:
        types = [type_of(a) for a in args]
        lo = [a if t is None else _handle_of(a) for a, t in zip(args, types)]
        # closed-over files live as long as the program that names them (as in `_host`)
        held = tuple(
            a._file for a, t in zip(args, types) if t is not None and _is_concrete(a._handle)
        )

        def with_disk_arrays(*values: Any, _held: tuple[Any, ...] = held) -> Any:
            with _handles.callback_running():
                return callback(
                    *(v if t is None else _disk_array_at(v, t) for v, t in zip(values, types))
                )

        return prim.bind(*lo, callback=with_disk_arrays, **params)

    return rule


def _printed(prim: Primitive) -> Callable[..., Any]:
    """jax.debug.print's rule: a `jax.debug.callback` (so each DiskArray arrives as
    one) that runs JAX's own printing with the DiskArrays among the arguments it
    formats as given (its ``static_args``), so one prints as ``print(x)`` does."""

    def rule(*args: Any, **params: Any) -> list[Any]:
        if not {"static_args", "ordered", "partitioned"} <= params.keys():  # another JAX
            _refusals.refuse_jax_function(prim.name, next(filter(None, map(type_of, args))).shape)
        static = dict(params["static_args"])
        at = [i for i in range(len(static) + len(args)) if i not in static]  # flat positions
        disk = [type_of(a) is not None for a in args]

        def show(*values: Any) -> None:
            fixed: dict[int, Any] = dict(static)
            dynamic: list[Any] = []
            for i, v, d in zip(at, values, disk):
                if d:
                    fixed[i] = v
                else:
                    dynamic.append(v)
            prim.impl(*dynamic, **{**params, "static_args": tuple(fixed.items())})

        jax.debug.callback(
            show, *args, ordered=params["ordered"], partitioned=params["partitioned"]
        )
        return []

    return rule


def _teach(prim: Primitive | None, rule: Callable[[Primitive], Callable[..., Any]] | None) -> None:
    """Give ``prim`` a DiskArray operand: ``rule(prim)`` applies, or ``None`` refuses."""
    if prim is None or getattr(prim.is_high, "gradpipe_disk_arrays", False):
        return
    jax_is_high, jax_to_lojax = prim.is_high, prim.to_lojax
    lower = rule(prim) if rule is not None else None

    def is_high(*avals: Any, **params: Any) -> bool:
        disk = next((a for a in avals if isinstance(a, DiskArrayType)), None)
        if disk is None:
            return jax_is_high(*avals, **params)
        if lower is None:  # refused when bound: under jit that is before its type check
            _refusals.refuse_jax_function(prim.name, disk.shape)
        return True

    def to_lojax(*args: Any, **params: Any) -> Any:
        if all(type_of(a) is None for a in args):
            return jax_to_lojax(*args, **params)
        assert lower is not None  # is_high refused the DiskArray operand
        return lower(*args, **params)

    is_high.gradpipe_disk_arrays = True  # type: ignore[attr-defined]  # a mark on the function
    # this primitive's own rules, replaced on the instance (JAX's kept for the rest)
    prim.is_high, prim.to_lojax = is_high, to_lojax  # type: ignore[method-assign]


def _primitive(function: Callable[[Any], Any], name: str) -> Primitive | None:
    """JAX's primitive ``name`` as ``function`` binds it (traced once on a float32), or
    None where this JAX version binds something else."""
    eqns = jax.make_jaxpr(function)(np.float32(0)).eqns
    return next((e.primitive for e in eqns if e.primitive.name == name), None)


def route_jax_primitives() -> None:
    """Make JAX's own functions that a user applies to arrays take a DiskArray.

    JAX applies a primitive to a value of a hijax type only when the primitive
    says so (``is_high``) and can lower it (``to_lojax``); the others are recorded
    as they are and fail while the program is lowered, with "'DiskArray' object has
    no attribute 'val'". So each primitive below is taught about DiskArrays, its
    own rules kept for everything else (idempotent):

    - `jax.lax.stop_gradient`, `jax.ad_checkpoint.checkpoint_name` and
      `jax.lax.optimization_barrier` return the DiskArray (the gradient is zero for
      the first, the identity's for the others);
    - `jax.debug.callback`, `jax.pure_callback` and `jax.experimental.io_callback`
      call back with a concrete DiskArray; `jax.debug.print` prints it as ``print``;
    - `jax.lax.with_sharding_constraint` and `jax.numpy.array` (of a traced
      DiskArray, which would copy it into memory) are refused with a `TypeError`.

    Each primitive is found by tracing its public function once, not imported from
    JAX's private modules.
    """
    from jax.ad_checkpoint import checkpoint_name
    from jax.experimental import io_callback

    value = jax.ShapeDtypeStruct((), np.float32)
    taught = [
        (jax.lax.stop_gradient, "stop_gradient", _passed_through),
        (lambda x: checkpoint_name(x, "name"), "name", _passed_through),
        (jax.lax.optimization_barrier, "optimization_barrier", _passed_through),
        (lambda x: jax.debug.callback(print, x), "debug_callback", _called_back),
        (lambda x: jax.pure_callback(lambda a: a, value, x), "pure_callback", _called_back),
        (lambda x: io_callback(lambda a: a, value, x), "io_callback", _called_back),
        (lambda x: jax.debug.print("{}", x), "debug_print", _printed),
        (lambda x: jnp.array(x, copy=True), "copy", None),
    ]
    for function, name, rule in taught:
        _teach(_primitive(function, name), rule)
    from jax.extend.core import primitives

    _teach(getattr(primitives, "sharding_constraint_p", None), None)
