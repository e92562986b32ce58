"""Running an operation's host code on array files: directly, or from compiled code.

Eagerly, an operation's inputs are concrete: its host code runs at once. Under
tracing, the same code runs as an ordered `io_callback` (in program order, so an
in-place `update_` happens where it was written), with each `DiskArray` passed as
its ``int32`` handle and each file it makes registered as a new handle.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import io_callback

from . import _handles
from ._array import DiskArray, _is_concrete
from ._storage import PagedFile

__all__ = ["run_on_host"]


def _is_disk(t) -> bool:
    return getattr(t, "is_disk_array", False)


def _lower(x):
    return x._handle if isinstance(x, DiskArray) else x


def _resolve(t, v):
    if _is_disk(t):
        return _handles.lookup(int(v), t.shape, t.dtype)
    return np.asarray(v, t.dtype)


def _export(t, value) -> np.ndarray:
    if not _is_disk(t):
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


def _wrap_out(t, lo):
    if _is_disk(t):
        return DiskArray._from_handle(lo, t.shape, t.dtype)
    return lo if isinstance(lo, jax.core.Tracer) else jnp.asarray(lo)


def _is_value(v) -> bool:
    return _is_concrete(v) or (isinstance(v, jax.Array) and not isinstance(v, jax.core.Tracer))


def run_on_host(host_fn, in_types, out_types, args):
    """``host_fn(*files_and_scalars)`` for ``args``; returns DiskArrays and JAX scalars.

    ``host_fn`` gets a file (`PagedFile` or `ConstantFile`) for each `DiskArray`
    argument and a 0-d NumPy value for each scalar, and returns one file or 0-d value
    (or ``None``: zeros) per entry of ``out_types``.
    """
    lo = [_lower(a) for a in args]

    def on_host(*vals):
        with _handles.callback_running():
            outs = host_fn(*[_resolve(t, v) for t, v in zip(in_types, vals)])
            return tuple(_export(t, o) for t, o in zip(out_types, outs))

    if all(_is_value(v) for v in lo):
        outs = on_host(*[np.asarray(v) for v in lo])
    else:
        specs = tuple(
            jax.ShapeDtypeStruct((), jnp.int32 if _is_disk(t) else t.dtype) for t in out_types
        )
        outs = io_callback(on_host, specs, *lo, ordered=True)
    return [_wrap_out(t, o) for t, o in zip(out_types, outs)]
