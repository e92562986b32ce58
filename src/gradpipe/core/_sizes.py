"""Sizes in bytes: the one parser for every size argument of gradpipe.

The rule, used by `MemoryBudget`, ``gradpipe serve --max-body-size`` and every
other argument that takes a number of bytes:

- an int (or a string of digits) is a number of bytes;
- ``kB``/``KB``, ``MB``, ``GB``, ``TB``, ``PB`` are powers of 1000 (SI), and
  ``KiB``, ``MiB``, ``GiB``, ``TiB``, ``PiB`` powers of 1024 (IEC), as in the
  IEC 80000-13 standard; ``B`` is bytes. A unit is written as here, or all in
  lower or upper case (``mib``, ``MIB``), and a space may separate number and
  unit; mixed cases such as ``Mb`` (megabits) or ``mB`` (millibytes) are refused;
- a decimal number with a unit is allowed when it is a whole number of bytes
  (``"1.5GiB"``, ``"2.5kB"``), as is an exponent (``"1e9"``);
- everything else is refused with a `ValueError` naming the argument: a bare
  letter such as ``"64M"`` or ``"1G"`` (it means 10^6 to some tools and 2^20 to
  others), a negative size, a fractional number of bytes (``"0.5B"``, ``"1.3kB"``
  is fine but ``"1.0001kB"`` is not), and anything that is not a size at all.

The failure it prevents: ``MemoryBudget("16MB")`` used to mean 16 * 10^6 bytes
while ``--max-body-size 16MB`` meant 16 * 2^20, so the same text gave two limits
4.9% apart, and ``"64M"`` was accepted by both with different meanings.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal, InvalidOperation

__all__ = ["format_size", "parse_size"]

_UNITS = {
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "pb": 10**15,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
    "pib": 2**50,
}
_CANONICAL = {unit: unit.upper().replace("I", "i") for unit in _UNITS}
_AMBIGUOUS = {"k", "m", "g", "t", "p", "ki", "mi", "gi", "ti", "pi"}
_SIZE = re.compile(r"\s*([+-]?(?:\d+(?:_\d+)*)?(?:\.\d*)?(?:[eE][+-]?\d+)?)\s*([A-Za-z]*)\s*")
_EXAMPLES = "e.g. 4096, '512MiB' (2^20 bytes each) or '2GB' (10^9 bytes each)"


def parse_size(value: int | float | str, *, name: str = "size") -> int:
    """A number of bytes from an int or a string such as ``"512MiB"`` or ``"2GB"``.

    See the module docstring (and the "Sizes" section of the pipelines guide) for
    the rule: SI units (``kB``, ``MB``, ``GB``) are powers of 1000, IEC units
    (``KiB``, ``MiB``, ``GiB``) powers of 1024, a bare number is bytes.

    **Arguments:**

    - `value`: an int, a float holding a whole number (``1e9``), or a string.
    - `name`: the argument's name, used in the error (``"--max-body-size"``).

    **Returns:**

    The number of bytes, an int >= 0. Callers check their own minimum.

    Raises `TypeError` for a value of another type (``bool`` included) and
    `ValueError` naming `name` for an ambiguous, negative, fractional or unreadable
    size.

    ```python
    parse_size("64MiB")   # 67108864
    parse_size("64MB")    # 64000000
    parse_size("64M")     # ValueError: ambiguous
    ```
    """
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise TypeError(
            f"{name} takes a number of bytes as an int or a string ({_EXAMPLES}), "
            f"got {type(value).__name__}."
        )
    if isinstance(value, int):
        number, factor, text = Decimal(value), 1, repr(value)
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{name} = {value!r} is not a size ({_EXAMPLES}).")
        number, factor, text = Decimal(value), 1, repr(value)
    else:
        text = repr(value)
        match = _SIZE.fullmatch(value)
        if match is None or not any(c.isdigit() for c in match.group(1)):
            raise ValueError(f"{name} = {text} is not a size ({_EXAMPLES}).")
        digits, unit = match.group(1), match.group(2).lower()
        if unit in _AMBIGUOUS:
            raise ValueError(
                f"{name} = {text} is ambiguous: {match.group(2)!r} means 10^"
                f"{3 * ' kmgtp'.index(unit[0])} to some tools and 2^"
                f"{10 * ' kmgtp'.index(unit[0])} to others. Write "
                f"'{digits}{match.group(2)[0].upper()}iB' (powers of 1024) or "
                f"'{digits}{match.group(2)[0].upper()}B' (powers of 1000)."
            )
        written = match.group(2)
        if unit == "":
            factor = 1
        elif unit in _UNITS and written in (unit, written.upper(), _CANONICAL[unit], "kB"):
            factor = _UNITS[unit]
        elif unit in _UNITS:
            raise ValueError(
                f"{name} = {text}: {written!r} mixes cases ('Mb' reads as megabits, 'mB' "
                f"as millibytes); write {_CANONICAL[unit]!r}."
            )
        else:
            raise ValueError(
                f"{name} = {text} has an unknown unit {match.group(2)!r}; use B, kB, MB, "
                f"GB, TB (powers of 1000) or KiB, MiB, GiB, TiB (powers of 1024)."
            )
        try:
            number = Decimal(digits.replace("_", ""))
        except InvalidOperation:
            raise ValueError(f"{name} = {text} is not a size ({_EXAMPLES}).") from None
    if number < 0:
        raise ValueError(f"{name} = {text} is negative; a size is a number of bytes >= 0.")
    nbytes = number * factor
    if nbytes != nbytes.to_integral_value():
        raise ValueError(
            f"{name} = {text} is {nbytes} bytes, not a whole number of bytes. Give a "
            f"whole number of bytes, or a smaller unit."
        )
    return int(nbytes)


def format_size(nbytes: int) -> str:
    """``nbytes`` for people, in the largest IEC unit below it: ``"512.0 MiB"``."""
    for unit, size in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= size:
            return f"{nbytes / size:.1f} {unit}"
    return f"{nbytes} B"
