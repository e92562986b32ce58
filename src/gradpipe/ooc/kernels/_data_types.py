"""The array API's data type functions, for `gradpipe.ooc`.

Data types are NumPy's dtype objects (see `_constants`); the functions accept
DiskArrays (traced or not), dtypes, and the Python scalars the standard allows, and
answer as NumPy 2 does.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np
from numpy.typing import DTypeLike

__all__ = ["FloatInfo", "can_cast", "finfo", "iinfo", "isdtype", "result_type"]


def _dtype_of(x: Any) -> np.dtype | None:
    """``x``'s dtype for a DiskArray (traced or not), an array or a dtype; else None."""
    dtype = getattr(x, "dtype", None)
    if dtype is not None and not isinstance(x, type):
        return np.dtype(dtype)
    try:
        return np.dtype(x)
    except TypeError:
        return None


class _ScalarsOnly(ValueError, TypeError):
    """Only Python scalars were given: a `ValueError`, and a `TypeError` too, which is
    what xarray (asking one argument at a time) takes for "no promotion needed"."""


def result_type(*arrays_and_dtypes: Any) -> np.dtype:
    """The dtype the standard's promotion gives its arguments (arrays, dtypes, or
    Python scalars, which are weak as in NumPy 2)."""
    if not arrays_and_dtypes:
        raise ValueError("result_type needs at least one array or dtype.")
    args: list[np.dtype | complex] = []
    for a in arrays_and_dtypes:
        if isinstance(a, (bool, int, float, complex)):
            args.append(a)
            continue
        dtype = _dtype_of(a)
        if dtype is None:
            raise TypeError(f"result_type: {a!r} is neither an array, a dtype nor a scalar.")
        args.append(dtype)
    if all(isinstance(a, (bool, int, float, complex)) for a in args):
        raise _ScalarsOnly("result_type needs at least one array or dtype besides scalars.")
    return np.result_type(*args)


def can_cast(from_: Any, to: DTypeLike, /) -> bool:
    """Whether ``from_`` (an array or dtype) casts to ``to`` by the standard's
    promotion rules (no loss: NumPy's ``"safe"`` casting)."""
    dtype = _dtype_of(from_)
    if dtype is None:
        raise TypeError(f"can_cast: {from_!r} is neither an array nor a dtype.")
    return bool(np.can_cast(dtype, np.dtype(to), casting="safe"))


@dataclasses.dataclass(frozen=True)
class FloatInfo:
    """Machine limits of a floating dtype, as the standard gives them: Python floats
    (NumPy's `finfo` gives NumPy scalars). For a complex dtype, those of its parts."""

    bits: int
    eps: float
    max: float
    min: float
    smallest_normal: float
    dtype: np.dtype


def finfo(type: Any, /) -> FloatInfo:
    """Machine limits of a floating or complex dtype (or an array's), as Python floats."""
    dtype = _dtype_of(type)
    if dtype is None or dtype.kind not in "fc":
        raise TypeError(f"finfo: {type!r} is not a floating or complex dtype or array.")
    info = np.finfo(dtype)
    return FloatInfo(
        bits=int(info.bits),
        eps=float(info.eps),
        max=float(info.max),
        min=float(info.min),
        smallest_normal=float(info.smallest_normal),
        dtype=np.dtype(info.dtype),  # float32 for complex64, as the standard says
    )


def iinfo(type: Any, /) -> np.iinfo[Any]:
    """Machine limits of an integer dtype (or an array's): NumPy's `iinfo`."""
    return np.iinfo(_dtype_of(type))


_KINDS: dict[str, Callable[[np.dtype], bool]] = {
    "bool": lambda d: d.kind == "b",
    "signed integer": lambda d: d.kind == "i",
    "unsigned integer": lambda d: d.kind == "u",
    "integral": lambda d: d.kind in "iu",
    "real floating": lambda d: d.kind == "f",
    "complex floating": lambda d: d.kind == "c",
    "numeric": lambda d: d.kind in "iufc",
}


def isdtype(dtype: DTypeLike, kind: DTypeLike | str | tuple[Any, ...]) -> bool:
    """Whether ``dtype`` is of ``kind``: a dtype, one of the standard's kind names
    (``"bool"``, ``"signed integer"``, ``"unsigned integer"``, ``"integral"``,
    ``"real floating"``, ``"complex floating"``, ``"numeric"``), or a tuple of them."""
    dtype = np.dtype(dtype)
    if isinstance(kind, tuple):
        return any(isdtype(dtype, k) for k in kind)
    if isinstance(kind, str):
        if kind not in _KINDS:
            raise ValueError(f"isdtype: unknown kind {kind!r}; one of {sorted(_KINDS)}.")
        return _KINDS[kind](dtype)
    return dtype == np.dtype(kind)
