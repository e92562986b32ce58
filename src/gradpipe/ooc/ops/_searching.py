"""Searching functions of the array API standard (argmax, argmin, ...), out of core."""

from __future__ import annotations

__all__: list[str] = []
