"""Running an operation's host code on array files: directly, or from compiled code.

Eagerly, an operation's inputs are concrete: its host code runs at once. Under
tracing, the same code runs as an ordered `io_callback` (in program order, so an
in-place `update_` happens where it was written), with each `DiskArray` passed as
its ``int32`` handle and each file it makes registered as a new handle.
"""

from __future__ import annotations

import os
import sys
import weakref
from collections.abc import Callable, Sequence
from types import FrameType
from typing import Any, TypeAlias

import jax
import jax.numpy as jnp
import numpy as np
from jax._src import core as _core
from jax.experimental import io_callback

from ..execution._compute_device import called_back
from ..planning._resident import ResidentFile, to_memory
from ..storage._paged_file import PagedFile
from . import _handles
from ._array import DiskArray, _is_concrete
from ._hijax import DiskArrayType, ShapedArray

__all__ = ["run_on_host"]

#: An operation's input or output type: a DiskArray's, or an in-memory value's.
_Type: TypeAlias = "DiskArrayType | ShapedArray"


def _is_disk(t: _Type) -> bool:
    return getattr(t, "is_disk_array", False)


def _lower(x: Any) -> Any:
    return x._handle if isinstance(x, DiskArray) else x


def _resolve(t: _Type, v: Any, unread: bool = False) -> Any:
    if unread and isinstance(v, jax.Array) and not t.shape:
        return v  # (`run_on_host`'s ``unread``)
    if _is_disk(t):
        return _handles.lookup(int(v), t.shape, t.dtype)
    if t.shape:  # an in-memory (resident) operand (a JAX array's kept where it is)
        keep = isinstance(v, jax.Array) and np.dtype(v.dtype) == t.dtype
        return ResidentFile(v if keep else np.asarray(v, t.dtype))
    return np.asarray(v, t.dtype)


def _export(t: _Type, value: Any) -> np.ndarray | jax.Array | np.int32:
    if not _is_disk(t):
        if t.shape:  # the gradient of a resident operand
            return to_memory(value, t.shape, t.dtype)
        if isinstance(value, jax.Array) and np.dtype(value.dtype) == t.dtype:
            return value  # a loss its device computes (`_running_tails`), not waited for
        return np.asarray(0 if value is None else value, t.dtype)
    if value is None or isinstance(value, _handles.ZeroFile):  # e.g. an unwanted gradient
        return np.int32(_handles.ZERO_HANDLE)
    if isinstance(value, np.ndarray):  # the gradient of a 0-d DiskArray, summed in memory
        f = PagedFile.create(t.shape, t.dtype, t.shape)
        f.write(None, value)
        value = f.commit()
    if np.dtype(value.dtype) != t.dtype:  # the type JAX holds must say what the file holds
        raise TypeError(
            f"an out-of-core operation made a {np.dtype(value.dtype).name} array where its "
            f"output type says {t.dtype.name}; make its output_dtype (or backward) agree."
        )
    return np.int32(_handles.register(value, unclaimed=True))


def _wrap_out(t: _Type, lo: Any) -> DiskArray | jax.Array:
    if _is_disk(t):
        return DiskArray._from_handle(lo, t.shape, t.dtype)
    # (`device_put`, not `jnp.asarray`, which dispatches a conversion program beside
    # the transfer: on a TPU v5e host 0.55 ms against 0.93 ms a small array, and an
    # eager step 0.3 ms shorter, least squares and MLP alike)
    return lo if isinstance(lo, (jax.core.Tracer, jax.Array)) else jax.device_put(lo)


def _is_value(v: object) -> bool:
    """A concrete value, computed on the host at once outside a trace: a handle, a
    JAX array, or a NumPy array or scalar (parameters JAX's eager `grad` was handed
    as NumPy arrays stay NumPy arrays; staging them would compile a callback each call)."""
    if isinstance(v, (np.ndarray, np.generic, int, float, complex)):
        return True
    return isinstance(v, jax.Array) and not isinstance(v, jax.core.Tracer)


def _staging() -> bool:
    """Whether a JAX trace (jit, grad, ...) is recording operations right now.

    Under a trace an operation is staged even when every input is concrete (a
    closed-over `DiskArray` and Python numbers): run at trace time instead, its
    result would be a file made once, baked into the compiled program as a
    constant handle and released when the trace ends, so the first call would read
    a released array, and a later ``update_`` of the closed-over array would never
    be seen by the compiled program.
    """
    ctx, eval_trace = getattr(_core, "trace_ctx", None), getattr(_core, "EvalTrace", None)
    if ctx is not None and eval_trace is not None:
        return not isinstance(ctx.trace, eval_trace)
    return _core.unsafe_am_i_under_a_jit()  # pragma: no cover - other jax layouts


_programs_with_callbacks: weakref.WeakSet[Any] = weakref.WeakSet()
_LOOP_SOURCES = (os.sep + os.path.join("lax", "control_flow") + os.sep,)


def _starts_program() -> bool:
    """Whether the callback being staged now is the first one of an outermost program.

    That callback releases the intermediates of earlier runs (`_handles.sweep`)
    before it runs, so a jitted function that takes no `DiskArray` argument (its
    data closed over) does not leave one run's temporaries on disk per call. Only a
    callback staged directly in the outermost ``jit`` trace, before any callback of
    a nested ``jit``, ``scan`` or ``cond`` in it, qualifies: sweeping from inside a
    nested program would release files the enclosing program still reads, and
    sweeping from the body of an eagerly run ``scan``/``fori_loop``/``while_loop``
    would release the `DiskArray` carried from one iteration to the next.
    """
    if not (hasattr(_core, "trace_ctx") and hasattr(_core, "unsafe_get_trace_stack")):
        return False  # pragma: no cover - other jax layouts: never sweep early
    stack = _core.unsafe_get_trace_stack(_core.trace_ctx.trace)
    outer = [t for t in stack if type(t).__name__ == "DynamicJaxprTrace"]
    if not outer:
        return False
    first = outer[0] not in _programs_with_callbacks
    _programs_with_callbacks.add(outer[0])
    return first and len(outer) == 1 and not _in_loop_body()


def _in_loop_body() -> bool:
    frame: FrameType | None = sys._getframe(2)
    while frame is not None:
        if any(src in frame.f_code.co_filename for src in _LOOP_SOURCES):
            return True
        frame = frame.f_back
    return False


def run_on_host(
    host_fn: Callable[..., Sequence[Any]],
    in_types: Sequence[_Type],
    out_types: Sequence[_Type],
    args: Sequence[Any],
    unread: Sequence[int] = (),
) -> list[DiskArray | jax.Array]:
    """``host_fn(*files_and_values)`` for ``args``; returns DiskArrays and JAX arrays.

    ``host_fn`` gets a file (`PagedFile` or `ConstantFile`) for each `DiskArray`
    argument, a `ResidentFile` for each in-memory array and a 0-d NumPy value for
    each scalar, and returns one file or in-memory value (or ``None``: zeros) per
    entry of ``out_types``. The scalars at the positions ``unread``, run eagerly, are
    handed over as the JAX arrays they are: reading one waits for every program
    queued on its device before it.
    """
    lo = [_lower(a) for a in args]
    # The files of concrete DiskArrays (closed-over data) become constant handles in
    # a staged program: the callback holds them, so they live as long as any
    # compiled program that names them, even after the caller drops its reference.
    held = tuple(a._file for a in args if isinstance(a, DiskArray) and _is_concrete(a._handle))

    staged = not all(_is_value(v) for v in lo) or _staging()
    starts = staged and _starts_program()

    def on_host(*vals: Any, _held: tuple[Any, ...] = held) -> tuple[Any, ...]:
        if starts:
            _handles.sweep()
        with _handles.callback_running():
            outs = host_fn(
                *[_resolve(t, v, k in unread) for k, (t, v) in enumerate(zip(in_types, vals))]
            )
            return tuple(_export(t, o) for t, o in zip(out_types, outs))

    outs: Sequence[Any]
    if not staged:
        # a NumPy array is copied (as JAX copies one it stages): the chains made
        # here may be read after the caller changed it in place
        outs = on_host(*[v if k in unread else _held(v) for k, v in enumerate(lo)])
    else:

        def on_host_as_words(*vals: Any) -> tuple[np.ndarray | np.int32, ...]:
            with called_back():
                outs = on_host(*vals)
                return tuple(_to_words(np.asarray(o), t) for o, t in zip(outs, out_types))

        specs = tuple(_callback_spec(t) for t in out_types)
        words = io_callback(on_host_as_words, specs, *lo, ordered=True)
        outs = [_from_words(w, t) for w, t in zip(words, out_types)]
    return [_wrap_out(t, o) for t, o in zip(out_types, outs)]


def _held(v: Any) -> Any:
    """An eager operation's in-memory input as its host function gets it: a NumPy
    array copied, a JAX array (not 0-d) as it is, on its device (`ResidentFile`),
    any other value as a NumPy one."""
    if isinstance(v, np.ndarray):
        return np.array(v)
    if isinstance(v, jax.Array) and v.ndim:
        return v
    return np.asarray(v)


# 64-bit values leave a callback as 32-bit words. JAX checks a callback's results
# after converting them for the x64 setting of the thread the callback runs on, and
# XLA may run it on a thread of its own, which a `with jax.enable_x64(True)` block
# does not reach: there a float64 result became float32 ("Incorrect output dtype for
# return value #0: Expected: float64, Actual: float32"), and the ordered callback's
# error then failed every later call in the process. Words are the same bits on
# every thread.


def _is_wide(t: _Type) -> bool:
    """A value JAX narrows while x64 is off: 64-bit parts (complex128's are)."""
    if _is_disk(t):
        return False
    dtype = np.dtype(t.dtype)
    return dtype.itemsize >= (16 if dtype.kind == "c" else 8)


def _callback_spec(t: _Type) -> jax.ShapeDtypeStruct:
    if _is_disk(t):
        return jax.ShapeDtypeStruct((), jnp.int32)
    if _is_wide(t):
        return jax.ShapeDtypeStruct((*t.shape, np.dtype(t.dtype).itemsize // 4), jnp.uint32)
    return jax.ShapeDtypeStruct(t.shape, t.dtype)


def _to_words(value: np.ndarray | np.int32, t: _Type) -> np.ndarray | np.int32:
    if not _is_wide(t):
        return value
    return np.ascontiguousarray(value).reshape((*t.shape, 1)).view(np.uint32)


def _from_words(words: Any, t: _Type) -> Any:
    if not _is_wide(t):
        return words
    dtype = np.dtype(t.dtype)
    if dtype.kind == "c":  # lax.bitcast_convert_type has no complex types
        half = np.dtype(f"f{dtype.itemsize // 2}")
        n = words.shape[-1] // 2
        real = jax.lax.bitcast_convert_type(words[..., :n], half)
        imag = jax.lax.bitcast_convert_type(words[..., n:], half)
        return jax.lax.complex(real, imag)
    return jax.lax.bitcast_convert_type(words, dtype)
