"""Base64 for array buffers in JSON bodies, strict and fast.

CPython's ``binascii`` reads and writes base64 at 150–300 MB/s, which made it the
largest cost of a JSON request carrying a few megabytes of array (about 20 ms to
read a 4 MB float32 array). ``pybase64`` (in the ``serve`` extra) does the same with
SIMD instructions at several GB/s. Without it, ``binascii`` is used.

Decoding is strict, and the same either way: a character outside the standard
alphabet (``A-Z a-z 0-9 + /``), a newline, or padding anywhere but at the end of the
last group of four is an error, never skipped.
"""

from __future__ import annotations

import binascii
from types import ModuleType

pybase64: ModuleType | None  # None without the serve extra
try:
    import pybase64
except ImportError:  # pragma: no cover - the serve extra installs it
    pybase64 = None

__all__ = ["b64decode", "b64encode"]


def b64decode(text: str | bytes | memoryview) -> bytes:
    """The bytes of base64 text; `ValueError` (a `binascii.Error`) if it is not
    strict base64."""
    if pybase64 is not None:
        return pybase64.b64decode(text, validate=True)
    raw = binascii.a2b_base64(text, strict_mode=True)
    # binascii also takes padding after a complete group ("AAAA="); pybase64 does not.
    tail = text[-3:]
    if len(text) % 4 or tail == "===" or tail == b"===":
        raise binascii.Error("Excess padding after the last group")
    return raw


def b64encode(raw: bytes | memoryview) -> bytes:
    """The base64 text of ``raw`` (a C-contiguous buffer), without a newline."""
    if pybase64 is not None:
        return pybase64.b64encode(raw)
    return binascii.b2a_base64(raw, newline=False)
