"""Statistical functions of the array API standard (prod, var, std, min, ...), out of core."""

from __future__ import annotations

__all__: list[str] = []
