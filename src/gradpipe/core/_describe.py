"""Short descriptions of values for summaries and error messages."""

from __future__ import annotations

from typing import Any

__all__ = ["describe"]


def describe(value: Any) -> str:
    """``float32[500, 5]`` for an array, ``(float32[5], int)`` for a tuple, and so on."""
    shape = getattr(value, "shape", None)
    dtype = getattr(value, "dtype", None)
    if shape is not None and dtype is not None:
        return f"{dtype}[{', '.join(str(d) for d in shape)}]"
    if isinstance(value, tuple):
        return "(" + ", ".join(describe(v) for v in value) + ("," if len(value) == 1 else "") + ")"
    if isinstance(value, list):
        return "[" + ", ".join(describe(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k!r}: {describe(v)}" for k, v in value.items()) + "}"
    return type(value).__name__
