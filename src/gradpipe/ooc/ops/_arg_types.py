"""The types of the arguments the namespace's functions share besides arrays.

`BudgetLike`, a ``budget=``: a `MemoryBudget`, a size (bytes, or text such as
``"2GB"``), or ``None`` for the default budget; `DeviceLike`, a ``device=``: the
disk (`Device`, or ``"disk"``), or ``None``; `ShapeLike` and `AxesLike`, a shape
and an ``axis=``: an int, or a sequence of ints.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeAlias

from ..arrays._device import Device
from ..planning._budget import MemoryBudget

__all__ = ["AxesLike", "BudgetLike", "DeviceLike", "ShapeLike"]

BudgetLike: TypeAlias = "MemoryBudget | int | str | None"
DeviceLike: TypeAlias = "Device | str | None"
ShapeLike: TypeAlias = "int | Sequence[int]"
AxesLike: TypeAlias = "int | Sequence[int]"
