"""`AxisGather`: ``out[i, j, ...] = x[f0(i), f1(j), ...]``, one index map per axis.

Roll (``f(i) = (i - shift) mod n``), tile (``f(i) = i mod n``) and repeat
(``f(i) = i // times``, or by a count per element) are all of this form. Their
output tiles do not read one box of the input (a roll wraps around, a tile of a
tiling spans copies), so this is a `CustomOp`: for each output tile, every axis's
map names the input indices the tile needs; those are read as runs of
consecutive indices (one box per combination of runs: at most two per axis for a
roll), and the tile is gathered from them. The backward pass adds each output
tile's cotangent back onto the input elements it came from.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Sequence
from typing import Any, Protocol

import numpy as np

from ..arrays._op import CustomOp, frozen
from ..execution._driver import Driver, Value
from ..kernels._promotion import to_primal_dtype
from ..planning._budget import plan_tiles
from ..storage._paged_file import Region
from ._reshape import row_tile, tile_regions

__all__ = ["AxisGather", "Cyclic", "Repeated", "RepeatedBy", "Same", "Shifted"]


# ---------------------------------------------------------------- index maps


class IndexMap(Protocol):
    """What `AxisGather` asks of an axis's map (`Same`, `Shifted`, `Cyclic`, ...)."""

    @property
    def size(self) -> int: ...
    @property
    def injective(self) -> bool: ...
    def source(self, i: np.ndarray) -> np.ndarray: ...


#: An input run ``(start, stop, pos)``: its offset ``pos`` in the gathered block.
_Run = tuple[int, int, int]


@frozen
class Same:
    """An axis kept as it is: output ``i`` is input ``i``."""

    n: int
    injective = True

    @property
    def size(self) -> int:
        return self.n

    def source(self, i: np.ndarray) -> np.ndarray:
        return i


@frozen
class Shifted:
    """A roll: output ``i`` is input ``(i - shift) mod n``."""

    n: int
    shift: int
    injective = True

    @property
    def size(self) -> int:
        return self.n

    def source(self, i: np.ndarray) -> np.ndarray:
        return (i - self.shift) % self.n


@frozen
class Cyclic:
    """A tiling: ``reps`` copies of an axis of ``n``; output ``i`` is input ``i mod n``."""

    n: int
    reps: int

    @property
    def injective(self) -> bool:
        return self.reps <= 1

    @property
    def size(self) -> int:
        return self.n * self.reps

    def source(self, i: np.ndarray) -> np.ndarray:
        return i % self.n


@frozen
class Repeated:
    """Each of ``n`` elements ``times`` times: output ``i`` is input ``i // times``."""

    n: int
    times: int

    @property
    def injective(self) -> bool:
        return self.times <= 1

    @property
    def size(self) -> int:
        return self.n * self.times

    def source(self, i: np.ndarray) -> np.ndarray:
        return i // self.times


@frozen
class RepeatedBy:
    """Element ``k`` repeated ``counts[k]`` times; ``ends`` are the running totals
    as int64 bytes (compact and hashable, however many elements)."""

    ends: bytes

    @classmethod
    def of(cls, counts: np.ndarray) -> RepeatedBy:
        return cls(np.cumsum(counts, dtype=np.int64).tobytes())

    @property
    def _ends(self) -> np.ndarray:
        return np.frombuffer(self.ends, np.int64)

    @property
    def injective(self) -> bool:
        ends = self._ends
        return not ends.size or int(np.max(np.diff(ends, prepend=0))) <= 1

    @property
    def size(self) -> int:
        ends = self._ends
        return int(ends[-1]) if ends.size else 0

    def source(self, i: np.ndarray) -> np.ndarray:
        return np.searchsorted(self._ends, i, side="right")


# ---------------------------------------------------------------- the operation


def _needs(m: IndexMap, r: slice) -> tuple[list[_Run], np.ndarray | None]:
    """For output range ``r`` of map ``m``: the input runs ``[(start, stop, pos)]``,
    where ``pos`` is the run's offset in the gathered block, and each output
    index's position in that block (``None`` when it is the identity)."""
    src = m.source(np.arange(r.start, r.stop))
    if src.size == 0 or (src[-1] - src[0] == src.size - 1 and np.all(np.diff(src) == 1)):
        lo = int(src[0]) if src.size else 0
        return [(lo, lo + src.size, 0)], None
    uniq, loc = np.unique(src, return_inverse=True)
    breaks = np.flatnonzero(np.diff(uniq) != 1) + 1
    starts = np.concatenate([[0], breaks])
    stops = np.concatenate([breaks, [uniq.size]])
    runs = [(int(uniq[a]), int(uniq[b - 1]) + 1, int(a)) for a, b in zip(starts, stops)]
    return runs, loc.reshape(-1)


@frozen
class AxisGather(CustomOp):
    """``out[i, ...] = x[maps[0].source(i), ...]``; the first ``lead`` output axes
    are new (the input is read as if it had ``lead`` leading axes of size 1).

    ``label`` names it in errors and progress bars.
    """

    maps: tuple[IndexMap, ...]
    lead: int = 0
    label: str = "gather"

    @property
    def name(self) -> str:
        return self.label

    def output_shape(self, s: tuple[int, ...]) -> tuple[int, ...]:
        return tuple(m.size for m in self.maps)

    def output_dtype(self, dx: np.dtype) -> np.dtype:
        return np.dtype(dx)

    def _plan(self, driver: Driver, x: Value, factor: int) -> tuple[int, ...]:
        out_shape = self.output_shape(x.shape)
        sides = (1,) * self.lead + tuple(x.shape)
        item = np.dtype(x.dtype).itemsize

        def bytes_for(tile: tuple[int, ...]) -> int:
            gathered = math.prod(min(t, n) for t, n in zip(tile, sides))
            return item * factor * (math.prod(tile) + gathered)

        return plan_tiles(out_shape, bytes_for, driver.budget, what=f"{self.label} ({x.shape})")

    def _tile_needs(self, region: Region) -> list[tuple[list[_Run], np.ndarray | None]]:
        return [_needs(m, r) for m, r in zip(self.maps, region)]

    def _boxes(
        self, needs: list[tuple[list[_Run], np.ndarray | None]]
    ) -> Iterator[tuple[Region, Region]]:
        """(input region, gathered-block region) for each combination of runs."""
        for combo in itertools.product(*[runs for runs, _ in needs]):
            src = tuple(slice(a, b) for a, b, _ in combo)[self.lead :]
            dst = tuple(slice(p, p + b - a) for a, b, p in combo)
            yield src, dst

    def forward(self, driver: Driver, x: Value) -> Value:
        out_shape = self.output_shape(x.shape)
        if not out_shape:
            return np.asarray(driver.read(x, None)).reshape(())
        dtype = np.dtype(x.dtype)
        if math.prod(out_shape) == 0:
            return driver.allocate(out_shape, dtype).commit()
        tile = self._plan(driver, x, 2)
        with driver.writing(out_shape, dtype, page_shape=tile) as out:
            for region in tile_regions(out_shape, tile):
                needs = self._tile_needs(region)
                block = np.empty(tuple(sum(b - a for a, b, _ in runs) for runs, _ in needs), dtype)
                for src, dst in self._boxes(needs):
                    block[dst] = _read(driver, x, src, self.lead)
                for ax, (_, loc) in enumerate(needs):
                    if loc is not None:
                        block = np.take(block, loc, axis=ax)
                out.write(region, block)
        return out

    def backward(
        self,
        driver: Driver,
        inputs: Sequence[Value],
        output: Value,
        g: Value,
        wants: Sequence[bool],
    ) -> list[Value | None]:
        (x,) = inputs
        if not wants[0]:
            return [None]
        out_shape = self.output_shape(x.shape)
        dtype = np.dtype(x.dtype)
        if not x.shape:  # a 0-d input: every output element is its copy
            total = _sum_tiles(driver, g, out_shape)
            return [np.asarray(to_primal_dtype(total, dtype))]
        grad = driver.allocate(x.shape, dtype)
        if math.prod(out_shape) == 0:
            return [grad.commit()]
        once = all(m.injective for m in self.maps)  # each input element reached once
        tile = self._plan(driver, x, 3)
        try:
            for region in tile_regions(out_shape, tile):
                needs = self._tile_needs(region)
                block = np.asarray(driver.read(g, region))
                for ax, (runs, loc) in enumerate(needs):
                    if loc is not None:
                        block = _add_along(block, loc, sum(b - a for a, b, _ in runs), ax)
                block = to_primal_dtype(block, dtype)
                for src, dst in self._boxes(needs):
                    part = block[dst].reshape(tuple(s.stop - s.start for s in src))
                    grad.write(src, part if once else grad.read(src) + part)
        except BaseException:
            grad.discard()
            raise
        return [grad.commit()]


def _read(driver: Driver, x: Value, region: Region, lead: int) -> np.ndarray:
    block = np.asarray(driver.read(x, region if x.shape else None))
    return block.reshape((1,) * lead + block.shape)


def _add_along(block: np.ndarray, loc: np.ndarray, size: int, axis: int) -> np.ndarray:
    """``block`` summed along ``axis`` into ``size`` slots (element ``k`` into ``loc[k]``)."""
    shape = list(block.shape)
    shape[axis] = size
    out = np.zeros(shape, block.dtype)
    index: tuple[Any, ...] = (slice(None),) * axis + (loc,)
    np.add.at(out, index, block)
    return out


def _sum_tiles(driver: Driver, g: Value, shape: tuple[int, ...]) -> np.ndarray:
    """The sum of every element of ``g`` (of ``shape``), read tile by tile."""
    if isinstance(g, np.ndarray):
        return np.sum(g)
    elements = max(1, driver.budget.nbytes // (2 * np.dtype(g.dtype).itemsize))
    return sum(np.sum(driver.read(g, r)) for r in tile_regions(shape, row_tile(shape, elements)))
