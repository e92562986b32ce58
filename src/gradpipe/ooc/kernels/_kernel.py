"""Block kernels: written once against an array namespace, differentiated by JAX.

A kernel is a function ``kernel(xp, *blocks, **params)`` that computes one output
block from input blocks with the functions of the array namespace ``xp``. The
forward pass runs it with ``xp = numpy`` (so results have NumPy's dtypes and
values); the backward pass is JAX's VJP of the same function with
``xp = jax.numpy``, traced once per block shape and dtype and evaluated with NumPy
(`_numpy_eval`), so no operation needs a hand-written derivative and every
gradient is the one `jax.grad` gives for the same `jax.numpy` function.

The trace runs with 64-bit types enabled for its thread only, so float64 blocks
keep float64 derivatives whatever the process's ``jax_enable_x64`` says.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import jax
import jax.numpy as jnp
import numpy as np
from jax._src.interpreters import partial_eval as _pe
from jax.extend.core import ClosedJaxpr
from numpy.typing import DTypeLike

from . import _numpy_eval
from ._x64 import jax_value_dtype

__all__ = ["check_vjp", "kernel_dtype", "run_forward", "run_in_jax", "run_vjp", "vjp_reads"]

_lock = threading.Lock()

#: A block kernel: ``kernel(xp, *blocks, **params)`` (see the module).
Kernel = Callable[..., Any]
#: A kernel's parameters as ``(name, value)`` pairs (hashable, for the caches).
Params = tuple[tuple[str, Any], ...]
#: The stand-in blocks a VJP is traced on: ``(shape, dtype.str)`` for each input.
Key = tuple[tuple[tuple[int, ...], str], ...]


class BlockType(Protocol):
    """What a VJP's stand-in blocks are made from: an input's shape and dtype."""

    @property
    def shape(self) -> tuple[int, ...]: ...

    @property
    def dtype(self) -> DTypeLike: ...


def run_forward(kernel: Kernel, params: Params, blocks: Sequence[Any]) -> np.ndarray:
    """``kernel(numpy, *blocks, **params)``, with NumPy's floating-point warnings off
    (``log(0)`` is ``-inf`` as in NumPy and JAX, not a warning per tile)."""
    with np.errstate(all="ignore"):
        return np.asarray(kernel(np, *blocks, **dict(params)))


def run_in_jax(kernel: Kernel, params: Params, values: Sequence[Any]) -> jax.Array:
    """The same kernel on in-memory values: with NumPy when every value is concrete
    (so 0-d results have NumPy's values, special cases included, as DiskArray
    results do), with ``jax.numpy`` when one is traced. Either way a JAX array."""
    python = (bool, int, float, complex)
    if any(isinstance(v, jax.core.Tracer) for v in values) or all(
        isinstance(v, python) for v in values
    ):
        return kernel(jnp, *values, **dict(params))
    arrays = [v if isinstance(v, python) else np.asarray(v) for v in values]
    out = run_forward(kernel, params, arrays)
    return jnp.asarray(out, jax_value_dtype(out.dtype, "an operation on in-memory values"))


@functools.lru_cache(maxsize=4096)
def kernel_dtype(kernel: Kernel, params: Params, dtypes: tuple[np.dtype, ...]) -> np.dtype:
    """The dtype NumPy gives the kernel on inputs of ``dtypes`` (empty stand-ins)."""
    stand_ins = [np.empty(0, d) for d in dtypes]
    return run_forward(kernel, params, stand_ins).dtype


def run_vjp(
    kernel: Kernel,
    params: Params,
    g: np.ndarray,
    blocks: Sequence[np.ndarray],
    wants: Sequence[bool],
) -> list[np.ndarray | None]:
    """The cotangents of the wanted ``blocks`` given the output cotangent ``g``.

    **Returns:** one array per block, shaped like it (``None`` where not wanted);
    a broadcast input's cotangent is summed over the axes it was broadcast along.
    """
    key = tuple((np.shape(b), np.asarray(b).dtype.str) for b in blocks)
    jaxpr, out_dtype, used = _vjp_program(kernel, params, key, tuple(bool(w) for w in wants))
    g = np.asarray(g)
    if g.dtype != out_dtype:
        g = g.astype(out_dtype)
    args = [a for a, u in zip((g, *blocks), used) if u]
    outs = iter(_numpy_eval.evaluate(jaxpr, *args))
    return [next(outs) if w else None for w in wants]


def check_vjp(
    kernel: Kernel,
    params: Params,
    types: Sequence[BlockType],
    wants: Sequence[bool],
    label: str,
) -> None:
    """Refuse, with a `TypeError` naming ``label``, a gradient JAX cannot take.

    Called while JAX traces the backward pass (before any data moves) on stand-in
    blocks of the inputs' dtypes whose sides are cut to 2 (size-1 sides stay 1, so
    broadcasting is kept).
    """
    key = _stand_in_key(types)
    try:
        jaxpr, _, _ = _vjp_program(kernel, params, key, tuple(bool(w) for w in wants))
        missing = _numpy_eval.unsupported(jaxpr)
        if missing:
            raise NotImplementedError(f"no host rule for JAX's {', '.join(missing)}")
    except Exception as error:  # JAX's own refusal (no derivative rule), or a missing rule
        message = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise TypeError(
            f"{label} is not differentiable out of core: JAX cannot differentiate its "
            f"kernel ({message}). Stop the gradient before it (jax.lax.stop_gradient) or "
            "compute it in memory."
        ) from None


def _stand_in_key(types: Sequence[BlockType]) -> Key:
    """The stand-in blocks a VJP is traced on: the inputs' dtypes, sides cut to 2
    (size-1 sides stay 1, so broadcasting is kept)."""
    return tuple((tuple(min(n, 2) for n in t.shape), np.dtype(t.dtype).str) for t in types)


def vjp_reads(
    kernel: Kernel, params: Params, types: Sequence[BlockType], wants: Sequence[bool]
) -> tuple[bool, ...]:
    """Which input blocks the kernel's VJP reads (the VJP of ``a - b`` reads
    neither, of ``a * b`` both): a fused backward pass need not compute the others.
    Decided on the stand-in shapes of `check_vjp`."""
    key = _stand_in_key(types)
    _, _, used = _vjp_program(kernel, params, key, tuple(bool(w) for w in wants))
    return used[1:]


def vjp_zeros(
    kernel: Kernel, params: Params, types: Sequence[BlockType], wants: Sequence[bool]
) -> tuple[bool, ...]:
    """Which wanted inputs get a cotangent that is zero whatever the output's (that
    of ``copysign(a, b)`` for ``b``): the VJP is linear in the output's cotangent, so
    one that does not read it is zero. JAX prunes such a cotangent as a symbolic zero
    (a ``0 * inf`` behind it never runs); so must the out-of-core backward pass."""
    key = _stand_in_key(types)
    return _vjp_zeros(kernel, params, key, tuple(bool(w) for w in wants))


@functools.lru_cache(maxsize=1024)
def _vjp_zeros(
    kernel: Kernel, params: Params, key: Key, wants: tuple[bool, ...]
) -> tuple[bool, ...]:
    """`vjp_zeros` for one kernel and stand-in types: decided once (every eager
    backward pass asks again)."""
    closed, _, used = _vjp_program(kernel, params, key, wants)
    jaxpr = closed.jaxpr
    n = len(jaxpr.outvars)
    zero = []
    for j in range(n):
        if not used[0]:  # nothing reads the cotangent at all
            zero.append(True)
            continue
        _, reads = _pe.dce_jaxpr(jaxpr, [k == j for k in range(n)])
        zero.append(not reads[0])
    it = iter(zero)
    return tuple(next(it) if w else False for w in wants)


@functools.lru_cache(maxsize=1024)
def _vjp_program(
    kernel: Kernel, params: Params, key: Key, wants: tuple[bool, ...]
) -> tuple[ClosedJaxpr, np.dtype, tuple[bool, ...]]:
    specs = [jax.ShapeDtypeStruct(shape, np.dtype(dtype)) for shape, dtype in key]
    kwargs = dict(params)

    def f(*blocks: jax.Array) -> jax.Array:
        return kernel(jnp, *blocks, **kwargs)

    def back(g: jax.Array, *blocks: jax.Array) -> tuple[jax.Array, ...]:
        wanted = [b for b, w in zip(blocks, wants) if w]

        def of_wanted(*values: jax.Array) -> jax.Array:
            it = iter(values)
            return f(*[next(it) if w else b for b, w in zip(blocks, wants)])

        _, pull = jax.vjp(of_wanted, *wanted)
        return pull(g)

    with _lock, jax.enable_x64(True):
        out = jax.eval_shape(f, *specs)
        closed = jax.make_jaxpr(back)(jax.ShapeDtypeStruct(out.shape, out.dtype), *specs)
        # without the forward work the cotangents do not need (the primal output of
        # ``a - b``), and without the inputs no step reads
        jaxpr, used = _pe.dce_jaxpr(closed.jaxpr, [True] * len(closed.jaxpr.outvars))
    return ClosedJaxpr(jaxpr, closed.consts), np.dtype(out.dtype), tuple(used)
