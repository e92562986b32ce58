"""Which values a component accepts for a field of another dtype or type, and how.

A value the caller sends is cast to the field's declared dtype only when the cast
keeps the value the caller meant; otherwise the call is refused, naming the field.
The rules under the default ``casting="checked"`` (the table in
``docs/guides/components.md`` lists them):

- **bool** goes only to bool, and only bool goes to bool: ``True`` sent where a
  number is expected (or ``1`` where a flag is) is a mistake more often than not.
- **integers** (signed or unsigned) go to any integer dtype when every value fits
  (``-1`` into ``uint8`` or ``300`` into ``int8`` would wrap around), and to float
  and complex dtypes, rounded to the nearest representable value; a value beyond
  the float dtype's finite range (``70000`` into ``float16``) is refused.
- **floats** go to float and complex dtypes, rounded to the nearest representable
  value (so ``0.1`` becomes float32's nearest, and a value below the smallest
  subnormal becomes zero, as any rounding would); a finite value beyond the finite
  range (``1e40`` into ``float32``) would become ``inf`` and is refused. NaN and
  infinities stay what they are. Floats never go to integer or bool dtypes, even
  integral ones.
- **complex** goes only to complex dtypes, each part as a float: casting to a real
  dtype would drop the imaginary part.
- Strings, objects and other non-numbers are refused (``"1.5"`` is not a number).

Static (non-array) fields are validated by pydantic in strict mode as JSON would
be read: ``"2"`` or ``2.0`` for an ``int``, ``"1.5"`` or ``True`` for a ``float``,
``1`` or ``"true"`` for a ``bool`` are refused, while a list for a ``tuple`` and a
value for an ``Enum`` (what JSON can carry) are accepted.

``casting="unchecked"`` restores NumPy's and pydantic's lax behaviour: any numeric
or bool array is cast with ``astype`` (wrapping, truncating, overflowing to
``inf``), and static fields are coerced by pydantic's lax mode.
"""

from __future__ import annotations

import json
from typing import Any, Literal

import jax
import jax.numpy as jnp
import numpy as np
import pydantic

__all__ = [
    "CASTINGS",
    "Casting",
    "as_numbers",
    "cast_numbers",
    "cast_problem",
    "check_casting",
    "kind",
    "kind_problem",
    "static_problem",
]

Casting = Literal["checked", "unchecked"]
CASTINGS: tuple[str, ...] = ("checked", "unchecked")


def check_casting(casting: Any) -> None:
    """Refuse a ``casting=`` setting that is not one of `CASTINGS`."""
    if casting not in CASTINGS:
        raise ValueError(
            f"Component casting= must be 'checked' (refuse casts that change a value) or "
            f"'unchecked' (NumPy's and pydantic's lax casts), got {casting!r}."
        )


def kind(dtype: Any) -> str | None:
    """``"b"``, ``"u"``, ``"i"``, ``"f"`` (JAX's float types included) or ``"c"``; ``None``
    for anything that is not a number."""
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return "b"
    if np.issubdtype(dtype, np.unsignedinteger):
        return "u"
    if np.issubdtype(dtype, np.signedinteger):
        return "i"
    if jnp.issubdtype(dtype, jnp.floating):
        return "f"
    if np.issubdtype(dtype, np.complexfloating):
        return "c"
    return None


# Which kinds of source may go to which kinds of field under "checked"; values are
# checked on top of this (integer range, float overflow).
_ACCEPTS = {
    "b": frozenset("b"),
    "u": frozenset("ui"),
    "i": frozenset("ui"),
    "f": frozenset("uif"),
    "c": frozenset("uifc"),
}


def kind_problem(src: Any, dst: Any, casting: str = "checked") -> str | None:
    """Why a value of dtype ``src`` never goes to a field of dtype ``dst`` (looking
    at the dtypes alone), or ``None``."""
    src, dst = np.dtype(src), np.dtype(dst)
    if src == dst:
        return None
    a, b = kind(src), kind(dst)
    if a is None:
        return f"expected numbers for a {dst.name} field, got dtype {src}"
    if b is None:
        return f"the field's dtype {dst} holds no numbers"
    if casting == "unchecked" or a in _ACCEPTS[b]:
        return None
    why = {
        "b": "a bool is not a number here; send numbers (or 0 and 1 of the field's dtype)",
        "c": "casting would drop the imaginary part",
        "f": "a float would be truncated",
    }.get(a, "")
    if b == "b":
        why = "only bool values go to a bool field; send true/false"
    return f"expected {dst.name}, got {src.name}, which is not cast to it: {why}"


def cast_problem(value: Any, dst: Any, casting: str = "checked") -> str | None:
    """Why ``value`` (a NumPy or JAX array) cannot be cast to ``dst`` without changing
    a value, or ``None``. Reads the values only when the dtypes differ."""
    dst = np.dtype(dst)
    src = np.dtype(value.dtype)
    problem = kind_problem(src, dst, casting)
    if problem or src == dst or casting == "unchecked" or value.size == 0:
        return problem
    xp = jnp if isinstance(value, jax.Array) else np
    a, b = kind(src), kind(dst)
    if b in ("u", "i"):
        info = np.iinfo(dst)
        if np.can_cast(src, dst):
            return None
        low, high = int(xp.min(value)), int(xp.max(value))
        if low < info.min or high > info.max:
            return (
                f"values from {low} to {high} do not fit in {dst.name} ({info.min} to "
                f"{info.max}); a cast would wrap them around"
            )
        return None
    # To a float or complex dtype: a finite value (each part of a complex one) must
    # stay finite; rounding to the nearest representable value is accepted.
    real = jnp.finfo(dst).dtype
    for part in (value.real, value.imag) if a == "c" else (value,):
        with np.errstate(over="ignore", invalid="ignore"):
            lost = xp.isfinite(part) & ~xp.isfinite(part.astype(real))
        if bool(xp.any(lost)):
            first = part[lost][0] if xp is np else part[lost][0].item()
            return (
                f"the value {first} is beyond the range of {dst.name} (largest finite "
                f"{float(jnp.finfo(dst).max):g}): a cast would make it inf"
            )
    return None


# -- nested lists of numbers -------------------------------------------------------


def as_numbers(value: Any) -> np.ndarray:
    """A number or nested list of numbers as the NumPy array NumPy infers, refusing a
    list that mixes ``True``/``False`` with numbers (NumPy would read them as 1 and 0).
    Strings and other objects come back with a non-numeric dtype for `kind_problem`
    to refuse."""
    array = np.asarray(value)
    if isinstance(value, list | tuple) and kind(array.dtype) not in ("b", None):
        stack = [value]
        while stack:
            for item in stack.pop():
                if isinstance(item, bool | np.bool_):
                    raise ValueError(
                        f"the list mixes true/false with numbers, which would be read as 1 "
                        f"and 0; send numbers only (got {item!r} among {array.dtype} values)"
                    )
                if isinstance(item, list | tuple):
                    stack.append(item)
    return array


def cast_numbers(value: Any, dtype: Any) -> np.ndarray:
    """JSON numbers (a number or nested lists) as an array of ``dtype``, under the
    ``"checked"`` rules: a ``ValueError`` says why when a value would change (``1.5``
    for an integer dtype, ``1e40`` for float32, ``true`` for a number, ``"1.5"``)."""
    array = as_numbers(value)
    problem = cast_problem(array, dtype)
    if problem:
        raise ValueError(problem)
    with np.errstate(all="ignore"):
        return array.astype(dtype)


# -- static fields ------------------------------------------------------------------


def static_problem(adapter: pydantic.TypeAdapter, value: Any) -> str | None:
    """Why pydantic's lax mode would coerce ``value`` into something the caller did not
    send (``"2"`` into ``2``), or ``None``: the value must validate in strict mode,
    either as given or as JSON (which allows a list for a tuple and a value for an
    Enum). Values that are not JSON are judged by strict mode alone when it accepts
    them, else left to the lax validation that follows."""
    try:
        adapter.validate_python(value, strict=True)
        return None
    except pydantic.ValidationError:
        pass
    try:
        text = json.dumps(value, allow_nan=True)
    except (TypeError, ValueError):
        return None  # not JSON (a NumPy scalar, an object): lax validation decides
    try:
        adapter.validate_json(text, strict=True)
        return None
    except pydantic.ValidationError as error:
        try:
            adapter.validate_python(value)
        except pydantic.ValidationError:
            return None  # refused anyway: let pydantic's own message say why
        first = error.errors()[0]
        return (
            f"{first['msg']} (got {value!r}, which would be coerced; send the value "
            f"itself, or build the Component with casting='unchecked')"
        )
