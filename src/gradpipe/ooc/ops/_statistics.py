"""Statistical functions of the array API standard (prod, var, std, min, cumulative sums, ...), out of core."""

from __future__ import annotations

__all__: list[str] = []
