"""Content keys: a hashable value that two inputs share only when they are equal.

A key must tell apart everything a computation can tell apart. The failures each
rule prevents:

- Arrays are keyed by dtype, shape and a sha256 of their bytes. Keying by ``repr``
  truncates large arrays (two arrays differing in the middle collide), and keying
  by bytes alone confuses ``int64[4]`` with ``int64[2, 2]`` (or a 0-d array with
  a one-element one) or ``float32`` with ``int32`` holding the same bits. A JAX
  array's weak type is keyed too: ``jnp.asarray(2.0)`` (weak) and a strong float
  array of the same bits promote differently (``x * float16_array`` is float16 for
  the weak one, wider for the strong one), so sharing a key served one the other's
  result dtype. The dtype
  is keyed by its full description, not only ``dtype.str``, which reads ``|V16``
  for every 16-byte structured dtype whatever its fields.
- Scalars carry their type: ``1 == 1.0 == True`` in Python, and ``hash(-1) ==
  hash(-2)`` in CPython, so neither equality nor a bare hash is enough. Floats are
  keyed by their exact bits (``float.hex``), so ``-0.0`` differs from ``0.0`` and a
  NaN equals itself.
- Containers keep their kind (tuple and list differ), order and dict keys.
- A value with no defined content (an arbitrary object, a JAX tracer) has no key:
  keying it by identity or ``repr`` is how a cache returns another input's result.
- Only NumPy and JAX arrays are keyed as arrays (a masked array with its mask).
  Another array-like (an xarray ``DataArray``, a pandas ``Series``) converts to its
  values alone, dropping coordinates, an index or attributes that a step may read,
  so it has no key either.
"""

from __future__ import annotations

import hashlib
import sys
from typing import Any

from ._tracing import is_tracer

__all__ = ["UnkeyableError", "content_key"]


class UnkeyableError(TypeError):
    """A value whose content cannot be keyed."""


_SCALARS = (int, bool, str, bytes, type(None))


def _array_key(value: Any) -> tuple:
    import numpy as np

    array = np.asarray(value)
    if array.dtype.hasobject:
        raise UnkeyableError(
            "An object-dtype array has no content key; convert it to a numeric dtype."
        )
    shape = array.shape  # before np.ascontiguousarray, which makes a 0-d array 1-d
    array = np.ascontiguousarray(array)
    digest = hashlib.sha256(array.view(np.uint8).reshape(-1).data).digest() if array.size else b""
    kind = f"{type(value).__module__}.{type(value).__qualname__}"
    mask = None
    if isinstance(value, np.ma.MaskedArray):
        flags = np.ascontiguousarray(np.ma.getmaskarray(value))
        mask = hashlib.sha256(flags.view(np.uint8).reshape(-1).data).digest()
    weak = bool(getattr(value, "weak_type", False))  # JAX arrays only; NumPy has none
    return ("array", kind, array.dtype.str, str(array.dtype), shape, digest, mask, weak)


def _is_array(value: Any) -> bool:
    import numpy as np

    if isinstance(value, np.ndarray | np.generic):
        return True
    jax = sys.modules.get("jax")
    return jax is not None and isinstance(value, getattr(jax, "Array", ()))


def content_key(value: Any) -> tuple:
    """A hashable key equal for two values exactly when their contents are equal.

    Raises `UnkeyableError` for a value with no defined content, and for a tracer.
    """
    kind = type(value)
    if kind in _SCALARS:
        return (kind.__name__, value)
    if kind is float:
        return ("float", value.hex())
    if kind is complex:
        return ("complex", value.real.hex(), value.imag.hex())
    if kind is tuple or kind is list:
        return (kind.__name__, tuple(content_key(item) for item in value))
    if kind is dict:
        return ("dict", tuple((content_key(k), content_key(v)) for k, v in value.items()))
    if is_tracer(value):
        raise UnkeyableError("A JAX tracer has no content: its value is not known yet.")
    if _is_array(value):
        return _array_key(value)
    if hasattr(value, "__array__"):
        raise UnkeyableError(
            f"A {kind.__module__}.{kind.__qualname__} has no content key: it is array-like, "
            f"but may hold more than its values (coordinates, an index, attributes) and a "
            f"key of its values would miss them. Pass np.asarray(x), or the parts the step "
            f"reads, instead."
        )
    raise UnkeyableError(
        f"A {kind.__module__}.{kind.__qualname__} has no content key: only arrays, "
        f"numbers, str, bytes, None and tuples, lists and dicts of them do."
    )
