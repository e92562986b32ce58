"""Dtypes of operands and results: NumPy's promotion rules.

Every `gradpipe.ooc` operation gives the dtype NumPy (>= 2, NEP 50) gives for the
same operation on in-memory arrays:

- a `DiskArray`, a NumPy scalar (``np.float32(2)``) or a 0-d NumPy array is
  *strong*: its dtype takes part in promotion (``float16 * np.float32(2)`` is
  float32);
- a Python ``bool``/``int``/``float``/``complex`` is *weak*: it takes the dtype of
  the other operands where its kind allows (``float32 + 1.0`` stays float32,
  ``int8 + 1`` stays int8, ``int8 + 1.5`` is float64), and an int that does not
  fit is an `OverflowError` (``uint8 + 300``), as in NumPy;
- a 0-d JAX value is strong, unless JAX marks it weakly typed (a Python number
  JAX traced, such as an argument of `jax.grad`): then it acts like a Python
  number of its kind, as in ``jax.numpy``.

JAX holds 64-bit values only while ``jax_enable_x64`` is on: what that flag
changes (default dtypes, and the dtype of a 0-d result, which becomes a JAX
value) is in `_x64`. `DiskArray` results are not affected: their data stays on
disk in NumPy's dtype. (A weakly typed JAX scalar that NumPy's rule would widen
to 64 bits keeps the 32-bit value JAX holds; the result still has NumPy's dtype,
as the host computes in it.)
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import numpy as np
from numpy.typing import DTypeLike

__all__ = [
    "canonical_dtype",
    "is_constant",
    "is_differentiable",
    "operand_dtypes",
    "to_primal_dtype",
]

_WEAK_STAND_IN = {"b": False, "i": 0, "u": 0, "f": 0.0, "c": 0j}


class Typed(Protocol):
    """The abstract type of a DiskArray operand (traced or not): its dtype decides."""

    @property
    def dtype(self) -> DTypeLike: ...


#: The abstract type of an operand that is a DiskArray (traced or not), else None.
TypeOf = Callable[[Any], Typed | None]


def is_constant(x: Any) -> bool:
    """Whether ``x`` is a host-side constant of an operation (not traced, no gradient)."""
    if isinstance(x, (bool, int, float, complex, np.generic)):
        return True
    return isinstance(x, np.ndarray) and x.shape == ()


def is_differentiable(dtype: DTypeLike) -> bool:
    """Floating or complex: the dtypes JAX differentiates (others get no gradient)."""
    return _inexact(np.dtype(dtype))


@functools.lru_cache(maxsize=64)
def _inexact(dtype: np.dtype) -> bool:
    return bool(np.issubdtype(dtype, np.inexact))


def _role(x: Any, type_of: TypeOf) -> tuple[str, Any]:
    """``("strong", dtype)`` or ``("weak", python_value)`` for one operand."""
    t = type_of(x)
    if t is not None:
        return "strong", t.dtype
    if isinstance(x, (np.generic, np.ndarray)):
        return "strong", x.dtype
    if isinstance(x, (bool, int, float, complex)):
        return "weak", x
    dtype = getattr(x, "dtype", None)
    if dtype is None:
        raise TypeError(
            f"gradpipe.ooc operands must be DiskArrays, numbers or 0-d JAX values, got "
            f"{type(x).__name__}."
        )
    if getattr(x, "weak_type", False) or getattr(getattr(x, "aval", None), "weak_type", False):
        return "weak", _WEAK_STAND_IN[np.dtype(dtype).kind]
    return "strong", np.dtype(dtype)


def operand_dtypes(args: Sequence[Any], type_of: TypeOf, what: str) -> list[np.dtype]:
    """The dtype each operand enters ``what`` with.

    Strong operands keep theirs; weak ones (Python numbers, weakly typed JAX
    values) take ``np.result_type`` of the strong dtypes and themselves (NEP 50).
    A Python int out of range of its dtype raises `OverflowError`, as in NumPy.
    """
    roles = [_role(a, type_of) for a in args]
    strong = [v for kind, v in roles if kind == "strong"]
    out = []
    for a, (kind, v) in zip(args, roles):
        if kind == "strong":
            out.append(np.dtype(v))
            continue
        dtype = np.result_type(*strong, v)
        if isinstance(a, (bool, int, float, complex)):
            try:
                np.asarray(a, dtype)
            except OverflowError as error:
                raise OverflowError(f"{what}: {error}") from None
        out.append(np.dtype(dtype))
    return out


def canonical_dtype(dtype: DTypeLike) -> np.dtype:
    """The dtype JAX stores ``dtype`` as now (32-bit for 64-bit ones while x64 is off)."""
    import jax

    canonicalize = getattr(jax.dtypes, "canonicalize_dtype", None)
    if canonicalize is not None:
        return np.dtype(canonicalize(dtype))
    with warnings.catch_warnings():  # "float64 is not available" while x64 is off
        warnings.simplefilter("ignore")
        return np.dtype(jax.numpy.result_type(dtype))


def to_primal_dtype(grad: np.ndarray, dtype: DTypeLike) -> np.ndarray:
    """A gradient block in its primal's dtype: the real part for a real primal of a
    complex computation, as JAX's transpose of a real-to-complex cast gives."""
    dtype = np.dtype(dtype)
    grad = np.asarray(grad)
    if grad.dtype == dtype:
        return grad
    if np.iscomplexobj(grad) and dtype.kind != "c":
        grad = grad.real
    return grad.astype(dtype)
