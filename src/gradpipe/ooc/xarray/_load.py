"""The load guard: reading DiskArrays into memory for xarray, within the budget.

``.compute()``, ``.load()``, ``.values`` and everything else xarray can only do with
the data in memory come to `load`. It reads the arrays whole when together they fit
the `MemoryBudget` in force, and otherwise refuses before reading anything, with a
`MemoryError` that gives the sizes, the budget, and the ways out (reduce or select
first, write to a file, raise the budget). Nothing is ever loaded silently above it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..arrays._array import DiskArray
from ..planning._budget import MemoryBudget, format_bytes, get_budget

__all__ = ["check_fits", "load"]


def _nbytes(shape: tuple[int, ...], dtype: np.dtype | str) -> int:
    return math.prod(shape) * np.dtype(dtype).itemsize


def check_fits(
    arrays: Sequence[Any], what: str, budget: MemoryBudget | int | str | None = None
) -> None:
    """Refuse (a `MemoryError`) when ``arrays`` (anything with a ``shape`` and a
    ``dtype``) together are larger than the budget; ``what`` names the operation that
    would hold them in memory."""
    b = get_budget(budget)
    total = sum(_nbytes(x.shape, x.dtype) for x in arrays)
    if total <= b.nbytes:
        return
    sizes = ", ".join(
        f"{np.dtype(x.dtype).name}{list(x.shape)} ({format_bytes(_nbytes(x.shape, x.dtype))})"
        for x in arrays[:4]
    ) + (", ..." if len(arrays) > 4 else "")
    raise MemoryError(
        f"{what} would read {format_bytes(total)} of gradpipe.ooc arrays into memory "
        f"({sizes}), more than the {b}. Reduce or select first (.mean(...), .isel(...), "
        ".sel(...)), write the result to a file (.to_zarr(...), .to_netcdf(...)), or raise "
        "the budget (with gradpipe.ooc.MemoryBudget('...'): ...)."
    )


def load(
    *data: Any,
    budget: MemoryBudget | int | str | None = None,
    what: str = "xarray's compute()/load()/.values",
) -> tuple[Any, ...]:
    """``data`` with every DiskArray read into a NumPy array (others passed through),
    refused above the budget (see `check_fits`)."""
    arrays = [x for x in data if isinstance(x, DiskArray)]
    check_fits(arrays, what, budget)
    return tuple(x.to_numpy(force=True) if isinstance(x, DiskArray) else x for x in data)
