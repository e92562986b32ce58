"""Indexing functions of the array API standard (take, take_along_axis), out of core."""

from __future__ import annotations

__all__: list[str] = []
