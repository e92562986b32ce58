"""Linear algebra of the array API standard beyond matmul, out of core."""

from __future__ import annotations

__all__: list[str] = []
