"""`sort` and `argsort` of the array API standard, out of core, one line at a time.

Each tile holds whole lines along the sorted axis and as many lines as the budget
allows; every line is sorted in memory (NumPy's stable sort) and written back. An
array whose single line along the axis does not fit in the budget is refused with a
`MemoryError` that says so: an external sort that merges runs across tiles is not
built. `sort` is differentiable (its gradient puts each cotangent back where its
value came from, as `jax.numpy.sort`'s does); `argsort` returns indices of the
default index dtype (int32 while ``jax_enable_x64`` is off, int64 while on), which
carry no gradient.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import cast

import jax
import numpy as np

from ..arrays._array import ArrayLike, Result
from ..arrays._hijax import type_of
from ..arrays._op import CustomOp, apply, frozen
from ..execution._driver import Driver, Value
from ..kernels._promotion import to_primal_dtype
from ..kernels._x64 import index_dtype
from ..planning._budget import plan_tiles
from ..storage._paged_file import PagedFile, Region
from ._arg_types import BudgetLike
from ._reshape import tile_regions

__all__ = ["argsort", "sort"]


def _line_order(block: np.ndarray, axis: int, descending: bool) -> np.ndarray:
    """Indices that sort ``block`` along ``axis``, stably (ties keep their order also
    when descending, as the standard asks; NaNs last ascending, first descending)."""
    if not descending:
        return np.argsort(block, axis=axis, kind="stable")
    n = block.shape[axis]
    flipped = np.argsort(np.flip(block, axis), axis=axis, kind="stable")
    return n - 1 - np.flip(flipped, axis)


@frozen
class _SortLines(CustomOp):
    """Sort (``indices=False``) or argsort (``indices=True``) along ``axis``."""

    axis: int
    descending: bool
    indices: bool
    index: str = "<i8"  # the dtype of the indices argsort gives

    @property
    def name(self) -> str:
        return "argsort" if self.indices else "sort"

    def output_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        return shape

    def output_dtype(self, dtype: np.dtype) -> np.dtype:
        return np.dtype(self.index) if self.indices else dtype

    def _tiles(self, driver: Driver, shape: tuple[int, ...], itemsize: int) -> Iterator[Region]:
        """Regions of whole lines along the axis, as many lines as the budget allows."""
        n = shape[self.axis]
        others = tuple(s for a, s in enumerate(shape) if a != self.axis)

        def bytes_for(tile: tuple[int, ...]) -> int:
            # the block, its order (int64), the result and a write in flight
            return math.prod(tile) * n * (3 * itemsize + 2 * 8)

        if bytes_for((1,) * len(others)) > driver.budget.nbytes:
            raise MemoryError(
                f"{self.name}: one line of {n} elements along axis {self.axis} needs "
                f"{bytes_for((1,) * len(others))} bytes, more than the {driver.budget}. "
                "gradpipe.ooc sorts whole lines in memory (an external merge sort across "
                "tiles is not built): raise the budget or sort along a shorter axis."
            )
        tile = plan_tiles(others, bytes_for, driver.budget, what=self.name)
        for region in tile_regions(others, tile) if others else [()]:
            full = list(region)
            full.insert(self.axis, slice(0, n))
            yield tuple(full)

    def forward(self, driver: Driver, x: Value) -> PagedFile:
        with driver.writing(x.shape, self.output_dtype(x.dtype)) as out:
            for region in self._tiles(driver, x.shape, x.dtype.itemsize):
                block = driver.read(x, region)
                order = _line_order(block, self.axis, self.descending)
                if self.indices:
                    result = order.astype(self.index, copy=False)
                else:
                    result = np.take_along_axis(block, order, self.axis)
                out.write(region, np.ascontiguousarray(result))
        return out

    def backward(
        self,
        driver: Driver,
        inputs: Sequence[Value],
        output: Value,
        g: Value,
        wants: Sequence[bool],
    ) -> list[PagedFile | None]:
        (x,) = inputs
        if self.indices or not wants[0]:
            return [None]
        with driver.writing(x.shape, x.dtype) as grad:
            for region in self._tiles(driver, x.shape, 2 * x.dtype.itemsize):
                order = _line_order(driver.read(x, region), self.axis, self.descending)
                gx = np.empty(order.shape, g.dtype)
                np.put_along_axis(gx, order, driver.read(g, region), self.axis)
                grad.write(region, to_primal_dtype(gx, x.dtype))
        return [grad]


def _sort(
    x: ArrayLike,
    axis: int,
    descending: bool,
    stable: bool,
    indices: bool,
    budget: BudgetLike,
) -> Result:
    import jax.numpy as jnp

    name = "argsort" if indices else "sort"
    t = type_of(x)
    if t is None:  # in memory: JAX's
        fn = jnp.argsort if indices else jnp.sort
        value = cast("jax.typing.ArrayLike", x)  # not a DiskArray; JAX checks the rest
        return fn(value, axis=axis, descending=descending, stable=stable)
    if not t.shape:
        raise ValueError(f"{name}: a 0-d array has no axis to sort along.")
    if t.dtype.kind == "c":
        raise TypeError(f"{name}: complex arrays have no order (the standard sorts real numbers).")
    nd = len(t.shape)
    if not -nd <= axis < nd:
        raise np.exceptions.AxisError(axis, nd)
    # every sort here is stable: `stable=False` allows any order of ties, stable included
    index = index_dtype(t.shape[axis], name).str
    return apply(_SortLines(axis % nd, bool(descending), indices, index), x, budget=budget)


def sort(
    x: ArrayLike,
    /,
    *,
    axis: int = -1,
    descending: bool = False,
    stable: bool = True,
    budget: BudgetLike = None,
) -> Result:
    """``x`` sorted along ``axis`` (ascending unless ``descending``), out of core.

    Each line along the axis is sorted in memory, so one line must fit in the budget
    (a `MemoryError` says so otherwise). The sort is always stable, and NaNs go last
    (first when descending), as in NumPy. Differentiable: the gradient puts each
    cotangent back at the position its value came from.
    """
    return _sort(x, axis, descending, stable, False, budget)


def argsort(
    x: ArrayLike,
    /,
    *,
    axis: int = -1,
    descending: bool = False,
    stable: bool = True,
    budget: BudgetLike = None,
) -> Result:
    """The indices that sort ``x`` along ``axis`` (see `sort`), of the default index
    dtype (int32 while ``jax_enable_x64`` is off, int64 while on); no gradient."""
    return _sort(x, axis, descending, stable, True, budget)
