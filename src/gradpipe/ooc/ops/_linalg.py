"""Linear algebra of the array API standard beyond matmul (tensordot, vecdot, matrix_transpose), out of core."""

from __future__ import annotations

__all__: list[str] = []
