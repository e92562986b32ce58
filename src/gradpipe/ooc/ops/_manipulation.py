"""Manipulation functions of the array API standard (reshape, concat, stack, ...), out of core."""

from __future__ import annotations

__all__: list[str] = []
