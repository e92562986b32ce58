"""The searching functions of the array API standard (argmax, argmin, count_nonzero,
searchsorted), out of core. (`where` is elementwise: `_elementwise`.)

Their results are indices or counts in the default index dtype (int32 while
``jax_enable_x64`` is off, int64 while on, as in ``jax.numpy``), and carry no
gradient: as for JAX's integer outputs, `jax.grad` through them gives zero. The
dtype is chosen when the function is called (`index_dtype`) and held by the
operation; an index that would not fit in it is refused.
"""

from __future__ import annotations

import itertools
import math
from typing import Literal, cast

import jax
import jax.numpy as jnp
import numpy as np

from ..arrays._array import ArrayLike, Result
from ..arrays._hijax import type_of
from ..arrays._op import BlockParallelOp, CustomOp, apply, frozen
from ..execution._driver import Driver, Value
from ..kernels._x64 import index_dtype
from ..planning._budget import plan_tiles
from ..storage._paged_file import PagedFile, Region
from ._arg_types import BudgetLike
from ._reduce import Reduction, normalize_axes, reduce

__all__ = ["argmax", "argmin", "count_nonzero", "searchsorted"]

_INDEX = np.dtype(np.int64)  # what indices are computed in, before the result's dtype


# ---------------------------------------------------------------- argmax, argmin


def _better(
    kind: str, v: np.ndarray, i: np.ndarray, best_v: np.ndarray, best_i: np.ndarray
) -> np.ndarray:
    """Where ``(v, i)`` beats ``(best_v, best_i)``: a larger (smaller) value, NaN
    beating numbers, and on a tie the smaller index, as NumPy's first occurrence."""
    if v.dtype.kind in "fc":
        nan, best_nan = np.isnan(v), np.isnan(best_v)
    else:
        nan = best_nan = np.zeros(v.shape, bool)
    with np.errstate(invalid="ignore"):
        wins = v > best_v if kind == "max" else v < best_v
        ties = (v == best_v) | (nan & best_nan)
    return (wins & ~best_nan) | (nan & ~best_nan) | (ties & (i < best_i))


@frozen
class ArgExtremum(CustomOp):
    """The index of the first maximum (``kind="max"``) or minimum along ``axis``
    (``None``: over the flattened array, in C order), NaN counting as the extremum.

    Each output tile keeps the best value and its index seen so far while the tiles
    of the reduced axes are read one by one.
    """

    kind: str
    axis: int | None
    keepdims: bool = False
    index: str = _INDEX.str

    @property
    def name(self) -> str:
        return f"arg{self.kind}"

    def _axes(self, ndim: int) -> tuple[int, ...]:
        return tuple(range(ndim)) if self.axis is None else (self.axis,)

    def output_shape(self, s: tuple[int, ...]) -> tuple[int, ...]:
        axes = self._axes(len(s))
        return tuple(
            1 if a in axes else n for a, n in enumerate(s) if self.keepdims or a not in axes
        )

    def output_dtype(self, dx: np.dtype) -> np.dtype:
        return np.dtype(self.index)

    def _block_best(
        self, block: np.ndarray, region: Region, shape: tuple[int, ...], axes: tuple[int, ...]
    ) -> tuple[np.ndarray, np.ndarray]:
        """The best value and its index over the reduced axes of one block."""
        kept = [a for a in range(block.ndim) if a not in axes]
        moved = np.transpose(block, kept + list(axes))
        lead = moved.shape[: len(kept)]
        flat = moved.reshape(*lead, -1)
        local = (np.argmax if self.kind == "max" else np.argmin)(flat, axis=-1)
        value = np.take_along_axis(flat, local[..., None], axis=-1)[..., 0]
        local_coords = np.unravel_index(local, tuple(block.shape[a] for a in axes))
        coords = [c + region[a].start for c, a in zip(local_coords, axes)]
        index = np.ravel_multi_index(coords, tuple(shape[a] for a in axes))
        return value, np.asarray(index, _INDEX)

    def forward(self, driver: Driver, x: Value) -> PagedFile | np.ndarray:
        shape, axes = tuple(x.shape), self._axes(len(x.shape))
        item = np.dtype(x.dtype).itemsize

        def bytes_for(tile: tuple[int, ...]) -> int:
            kept = math.prod(t for a, t in enumerate(tile) if a not in axes)
            return 3 * math.prod(tile) * item + 4 * kept * (item + 8)

        tile = [max(t, 1) for t in plan_tiles(shape, bytes_for, driver.budget, what=self.name)]
        out_shape = self.output_shape(shape)
        dtype = self.output_dtype(x.dtype)
        out = driver.allocate(out_shape, dtype) if out_shape else None
        grid = [range(0, n, t) for n, t in zip(shape, tile)]
        kept_grid = [[0] if a in axes else g for a, g in enumerate(grid)]
        result: np.ndarray | None = None
        try:
            for corner in itertools.product(*kept_grid):
                best: tuple[np.ndarray, np.ndarray] | None = None  # value, index
                for red in itertools.product(*[grid[a] for a in axes]):
                    starts = list(corner)
                    for a, s in zip(axes, red):
                        starts[a] = s
                    region = tuple(slice(s, min(s + t, n)) for s, t, n in zip(starts, tile, shape))
                    v, i = self._block_best(driver.read(x, region), region, shape, axes)
                    if best is None:
                        best = (v, i)
                    else:
                        take = _better(self.kind, v, i, *best)
                        best = (np.where(take, v, best[0]), np.where(take, i, best[1]))
                assert best is not None  # no reduced axis is empty (`_arg` refuses it)
                best_i = best[1]
                if out is None:
                    result = np.asarray(best_i, dtype).reshape(())
                    continue
                if self.keepdims:
                    best_i = np.expand_dims(best_i, axes)
                out_r = tuple(
                    slice(0, 1) if a in axes else slice(s, min(s + t, n))
                    for a, (s, t, n) in enumerate(zip(corner, tile, shape))
                    if self.keepdims or a not in axes
                )
                out.write(out_r, best_i.astype(dtype))
        except BaseException:
            if out is not None:
                out.discard()
            raise
        if out is not None:
            return out.commit()
        assert result is not None  # a 0-d output: its one tile was computed
        return result


def _arg(kind: str, x: ArrayLike, axis: int | None, keepdims: bool, budget: BudgetLike) -> Result:
    name = f"arg{kind}"
    t = type_of(x)
    shape = t.shape if t is not None else np.shape(x)
    if axis is not None:
        if not isinstance(axis, (int, np.integer)) or isinstance(axis, bool):
            raise TypeError(f"{name}: axis must be an int or None, got {axis!r}.")
        (axis,) = normalize_axes(axis, len(shape))
    if math.prod(shape) == 0 and (axis is None or shape[axis] == 0):
        raise ValueError(f"{name}: attempt to get {name} of an empty sequence (shape {shape}).")
    index = index_dtype(math.prod(shape) if axis is None else shape[axis], name)
    if t is None:
        fn = jnp.argmax if kind == "max" else jnp.argmin
        return jnp.asarray(fn(jnp.asarray(x), axis=axis, keepdims=bool(keepdims)), index)
    return apply(ArgExtremum(kind, axis, bool(keepdims), index.str), x, budget=budget)


def argmax(
    x: ArrayLike,
    /,
    *,
    axis: int | None = None,
    keepdims: bool = False,
    budget: BudgetLike = None,
) -> Result:
    """The index of the first maximum of ``x`` along ``axis`` (``None``: of the
    flattened array), out of core; a NaN is the maximum, as in NumPy.

    **Returns:** a `DiskArray` of the default index dtype (int32 while
    ``jax_enable_x64`` is off, int64 while on), or a 0-d JAX array. No gradient.
    """
    return _arg("max", x, axis, keepdims, budget)


def argmin(
    x: ArrayLike,
    /,
    *,
    axis: int | None = None,
    keepdims: bool = False,
    budget: BudgetLike = None,
) -> Result:
    """The index of the first minimum of ``x`` along ``axis``; see `argmax`."""
    return _arg("min", x, axis, keepdims, budget)


# ---------------------------------------------------------------- count_nonzero


@frozen
class CountNonzero(Reduction):
    """How many elements along ``axes`` are nonzero (NaN is), as ``index`` ints."""

    index: str = _INDEX.str

    @property
    def name(self) -> str:
        return "count_nonzero"

    def output_dtype(self, dx: np.dtype) -> np.dtype:
        return np.dtype(self.index)

    def forward_block(self, x: np.ndarray) -> np.ndarray:
        return np.sum(x != 0, axis=self.axes, keepdims=self.keepdims, dtype=self.index)


def count_nonzero(
    x: ArrayLike,
    /,
    *,
    axis: int | tuple[int, ...] | None = None,
    keepdims: bool = False,
    budget: BudgetLike = None,
) -> Result:
    """The number of nonzero elements of ``x`` along ``axis``, out of core.

    **Returns:** a `DiskArray` of the default index dtype (see `argmax`), or a 0-d
    JAX array.
    """
    t = type_of(x)
    shape = t.shape if t is not None else np.shape(x)
    size = math.prod(shape[a] for a in normalize_axes(axis, len(shape)))
    index = index_dtype(size, "count_nonzero").str
    return reduce(lambda axes: CountNonzero(axes, bool(keepdims), index), x, axis, budget)


# ---------------------------------------------------------------- searchsorted


@frozen
class SearchSorted(BlockParallelOp):
    """For each element ``v`` of ``x2``, how many elements of ``x1`` sort before it
    (``side="left"``) or not after it (``"right"``): the insertion index in sorted
    ``x1``. A sum over tiles of ``x1`` of each tile's count, so ``x1`` is never whole
    in memory; with ``sort_tiles`` each tile of an unsorted ``x1`` is sorted first."""

    side: Literal["left", "right"] = "left"
    sort_tiles: bool = False
    index: str = _INDEX.str

    @property
    def name(self) -> str:
        return "searchsorted"

    def output_shape(self, s1: tuple[int, ...], s2: tuple[int, ...]) -> tuple[int, ...]:
        return s2

    def output_dtype(self, d1: np.dtype, d2: np.dtype) -> np.dtype:
        return np.dtype(self.index)

    def reduction_shape(self, s1: tuple[int, ...], s2: tuple[int, ...]) -> tuple[int, ...]:
        return s1

    def index_map(
        self, out_r: Region, red_r: Region, s1: tuple[int, ...], s2: tuple[int, ...]
    ) -> tuple[Region, Region | None]:
        return (red_r, out_r if s2 else None)

    def forward_block(self, a: np.ndarray, v: np.ndarray) -> np.ndarray:
        a = np.sort(a) if self.sort_tiles else a
        return np.searchsorted(a, v, side=self.side).astype(self.index)


def searchsorted(
    x1: ArrayLike,
    x2: ArrayLike,
    /,
    *,
    side: Literal["left", "right"] = "left",
    sorter: ArrayLike | None = None,
    budget: BudgetLike = None,
) -> Result:
    """The indices where the elements of ``x2`` would be inserted into the 1-d ``x1``
    (sorted ascending, or put in order by the permutation ``sorter``) to keep it
    sorted, out of core; ``side`` says whether an equal element goes left or right.

    A count of the elements of ``x1`` before each value does not depend on their
    order, so with a ``sorter`` each tile of ``x1`` is sorted in memory instead of
    gathering ``x1[sorter]``; ``sorter`` itself is not read.

    **Returns:** an array of the default index dtype (see `argmax`) shaped like
    ``x2`` (a 0-d JAX array for a scalar).
    """
    if side not in ("left", "right"):
        raise ValueError(f"searchsorted: side must be 'left' or 'right', got {side!r}.")
    t1, t2 = type_of(x1), type_of(x2)
    s1 = t1.shape if t1 is not None else np.shape(x1)
    if len(s1) != 1:
        raise ValueError(f"searchsorted: x1 must be 1-d, got shape {tuple(s1)}.")
    if sorter is not None:
        ts = type_of(sorter)
        s_shape = ts.shape if ts is not None else np.shape(sorter)
        if tuple(s_shape) != tuple(s1):
            raise ValueError(
                f"searchsorted: sorter must have x1's shape {tuple(s1)}, got {tuple(s_shape)}."
            )
    index = index_dtype(s1[0], "searchsorted")
    if t1 is None and t2 is None:
        # a sorter is passed to JAX as given (x1 and x2 are in memory)
        in_memory_sorter = cast("jax.typing.ArrayLike | None", sorter)
        out = jnp.searchsorted(jnp.asarray(x1), jnp.asarray(x2), side=side, sorter=in_memory_sorter)
        return jnp.asarray(out, index)
    if t1 is None:
        raise TypeError(
            "searchsorted: x1 must be a DiskArray when x2 is one (convert it with "
            "DiskArray.from_numpy)."
        )
    return apply(SearchSorted(side, sorter is not None, index.str), x1, x2, budget=budget)
