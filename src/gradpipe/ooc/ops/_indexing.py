"""The gather behind integer-array indexing out of core: ``x[int_array]``, sparse
steps (``x[::1000]``), `take` and `take_along_axis` (`_take`).

`Gather` computes its output tile by tile. A tile reads only the pieces of the
index arrays it uses, finds the distinct positions of ``x`` they name, and reads
``x`` in windows around them: neighbouring positions are read as one region when
the bytes skipped between them are fewer than `GAP_BYTES`, so a sorted or dense
index reads ``x`` in long runs and a sparse one reads only what it selects. The
backward pass is the matching scatter-add: each window's gradient (repeated
indices added up) is added into the gradient file, tile by tile.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, cast

import numpy as np

from ..arrays._op import CustomOp, frozen
from ..execution._driver import Driver, Value
from ..planning._budget import plan_tiles
from ..planning._tile_reads import regions
from ..storage._paged_file import PagedFile, Region
from ..storage._picked_rows import PickedRows, row_bytes, run_bytes, worth_reading_through

__all__ = ["Gather", "check_bounds", "is_sparse"]

#: Positions of ``x`` fewer than this many bytes apart are read as one region.
GAP_BYTES = 64 * 2**10


@frozen
class Gather(CustomOp):
    """``out[t] = x[c_0(t), ..., c_n(t)]``: the coordinate on x's axis ``a`` at output
    position ``t`` is given by ``sources[a]``:

    - ``("out", j, start, step)``: ``start + step * t[j]``; a tile reads the
      bounding range of its positions and applies the step within it (``step`` 0:
      x's side is 1 and broadcasts);
    - ``("range", j, start, step)``: the same positions, read one by one (a step
      that skips much of the file);
    - ``("index", k)``: the value of index array ``k`` (input ``k + 1``) at ``t``,
      negative values counting from the end; its axes stand for the output axes
      ``index_dims[k]``, and its size-1 sides broadcast;
    - ``("point", i)``: the position ``i``.

    Output axes that no source names are new axes. ``label`` names the function in
    errors.
    """

    sources: tuple[tuple[Any, ...], ...]
    index_dims: tuple[tuple[int, ...], ...]
    out_shape: tuple[int, ...]
    label: str = "getitem"

    reads_through = True  # x may be a chain: its rows are computed where they are read

    @property
    def name(self) -> str:
        return self.label

    def output_shape(self, sx: tuple[int, ...], *index_shapes: tuple[int, ...]) -> tuple[int, ...]:
        return self.out_shape

    def output_dtype(self, dx: np.dtype, *index_dtypes: np.dtype) -> np.dtype:
        return np.dtype(dx)

    def picked_rows(self, driver: Driver, inputs: Sequence[Value]) -> PickedRows | None:
        """A take along one axis by one index held in memory, whose rows come in
        runs or repeats (`worth_reading_through`), as rows read through by the
        consumer (`PickedRows`); else None (the gather writes its output)."""
        x, *indices = inputs
        axes = [a for a, s in enumerate(self.sources) if s[0] == "index"]
        if len(axes) != 1 or len(indices) != 1 or not x.shape:
            return None
        a = axes[0]
        whole = all(
            s == ("out", b, 0, 1) and self.out_shape[b] == n
            for b, (s, n) in enumerate(zip(self.sources, x.shape))
            if b != a
        )
        f = indices[0]
        if not whole or self.index_dims != ((a,),) or len(f.shape) != 1:
            return None
        budget, item = driver.budget.nbytes, np.dtype(x.dtype).itemsize
        if 8 * f.shape[0] > budget // 16:  # the index is held in memory
            return None
        if row_bytes(x.shape, item, a) * f.shape[0] < run_bytes(budget):
            return None  # too few rows for one run worth reading through
        index = np.asarray(driver.read(f, None)).astype(np.int64)
        check_bounds(index, x.shape[a], a)
        index[index < 0] += x.shape[a]
        if not worth_reading_through(x.shape, item, a, index, budget):
            return None
        assert not isinstance(x, np.ndarray)  # a file: a 0-d value has no rows
        return PickedRows(getattr(x, "stored", None) or x, a, index)

    def forward(self, driver: Driver, x: Value, *indices: Value) -> Value:
        picked = driver.pick(self, (x, *indices))
        if picked is not None:
            return picked
        plan = _Plan(self, x, indices)
        tile = plan.tile(driver, "forward")
        if not self.out_shape:
            return plan.gather(driver, x, indices, ()).reshape(())
        with driver.writing(self.out_shape, x.dtype, page_shape=tile) as out:
            for region in plan.tiles(tile):
                out.write(region, plan.gather(driver, x, indices, region))
        return out

    def backward(
        self,
        driver: Driver,
        inputs: Sequence[Value],
        output: Value,
        g: Value,
        wants: Sequence[bool],
    ) -> list[Value | None]:
        x, *indices = inputs
        grads: list[Value | None] = [None] * len(inputs)
        if not wants[0]:
            return grads
        plan = _Plan(self, x, indices)
        tile = plan.tile(driver, "backward")
        grad = driver.allocate(x.shape, x.dtype)
        try:
            for region in plan.tiles(tile):
                g_tile = np.asarray(driver.read(g, region if self.out_shape else None))
                plan.scatter_add(driver, grad, indices, region, g_tile)
        except BaseException:
            grad.discard()
            raise
        grads[0] = grad.commit()
        return grads


class _Plan:
    """How a `Gather` walks its output. The output axes that index arrays vary
    along, and those of ``"range"`` sources, hold a tile's *points*; x's other
    ``"out"`` axes (the *rest*) are read as slabs, one per point. Reads coalesce
    along the *window* axis, x's last axis with per-point coordinates."""

    def __init__(self, op: Gather, x: Value, indices: Sequence[Value]) -> None:
        self.op, self.x_shape, self.dtype = op, tuple(x.shape), np.dtype(x.dtype)
        self.index_shapes = [tuple(np.shape(f)) for f in indices]
        self.index_items = [np.dtype(f.dtype).itemsize for f in indices]
        points = {s[1] for s in op.sources if s[0] == "range"}
        for dims, shape in zip(op.index_dims, self.index_shapes):
            points |= {j for j, n in zip(dims, shape) if n != 1}
        m = len(op.out_shape)
        self.b_axes = [j for j in range(m) if j in points]
        self.rest_axes = [j for j in range(m) if j not in points]
        slabs = {s[1]: a for a, s in enumerate(op.sources) if s[0] == "out" and s[1] not in points}
        self.rest_x = [slabs[j] for j in self.rest_axes if j in slabs]
        self.lead_x = [a for a in range(len(op.sources)) if a not in self.rest_x]
        self.perm = self.lead_x + self.rest_x  # a block's axes: per point first, slabs last
        indexed = [a for a, s in enumerate(op.sources) if s[0] in ("index", "range")]
        self.window = indexed[-1] if indexed else None
        self.prefix = indexed[:-1]
        self.order = self.b_axes + self.rest_axes  # the canonical layout: points, then rest
        self.to_out = tuple(int(i) for i in np.argsort(self.order))

    def tile(self, driver: Driver, phase: str) -> tuple[int, ...]:
        item = self.dtype.itemsize

        def bytes_for(tile: tuple[int, ...]) -> int:
            region = tuple(slice(0, t) for t in tile)
            data = math.prod(tile) * item
            window = max(data, self._slab_bytes(region))
            pieces = sum(
                math.prod(tile[j] if n != 1 else 1 for j, n in zip(dims, shape)) * size
                for dims, shape, size in zip(
                    self.op.index_dims, self.index_shapes, self.index_items
                )
            )
            points = math.prod(tile[j] for j in self.b_axes)
            # the tile, its canonical copy, the picked slabs and a window (and the
            # window's gradient on the way back); per point, int64 coordinates,
            # positions, and the sort that finds the windows
            if phase == "forward":
                data = 3 * data + window
            else:
                data = 5 * data + 2 * window
            per_point = len(self.index_shapes) + len(self.b_axes) + 10
            return data + pieces + 8 * points * per_point

        what = f"{self.op.label} ({phase}, gather)"
        tile = plan_tiles(self.op.out_shape, bytes_for, driver.budget, what=what)
        return tuple(max(t, 1) for t in tile)

    def tiles(self, tile: tuple[int, ...]) -> Iterable[Region]:
        if not self.op.out_shape:
            return [()]
        if not math.prod(self.op.out_shape):
            return []
        return regions(self.op.out_shape, tile)

    # -- one tile ----------------------------------------------------------------

    def _bounds(self, source: tuple[Any, ...], r: slice) -> tuple[int, int]:
        """The first and last coordinates an ``"out"`` source takes on the range ``r``."""
        _, _, start, step = source
        return start + step * r.start, start + step * (r.stop - 1)

    def _slab_bytes(self, region: Region) -> int:
        """Bytes of x a window reads per position along the window axis."""
        n = self.dtype.itemsize
        for s in self.op.sources:
            if s[0] == "out":
                first, last = self._bounds(s, region[s[1]])
                n *= abs(last - first) + 1
        return n

    def _points(
        self, driver: Driver, indices: Sequence[Value], region: Region
    ) -> tuple[tuple[int, ...], tuple[np.ndarray, ...], dict[int, np.ndarray]]:
        """The tile's point shape, point positions, and per-point coordinates."""
        extents = [s.stop - s.start for s in region]
        bsub = tuple(extents[j] for j in self.b_axes)
        positions = np.unravel_index(np.arange(math.prod(bsub)), bsub) if bsub else ()
        coords: dict[int, np.ndarray] = {}
        for a, s in enumerate(self.op.sources):
            if s[0] == "range":
                j, start, step = s[1:]
                pos = positions[self.b_axes.index(j)]
                coords[a] = start + step * (region[j].start + pos.astype(np.int64))
            elif s[0] == "index":
                coords[a] = self._index_values(driver, indices[s[1]], s[1], region, bsub, a)
        return bsub, positions, coords

    def _index_values(
        self,
        driver: Driver,
        f: Value,
        k: int,
        region: Region,
        bsub: tuple[int, ...],
        axis: int,
    ) -> np.ndarray:
        dims, shape = self.op.index_dims[k], self.index_shapes[k]
        piece = tuple(region[j] if n != 1 else slice(0, 1) for j, n in zip(dims, shape))
        v = np.asarray(driver.read(f, piece if shape else None))
        full = [1] * len(self.op.out_shape)
        for j, n in zip(dims, v.shape):
            full[j] = n
        v = v.reshape(full)[tuple(slice(None) if j in self.b_axes else 0 for j in range(len(full)))]
        v = np.broadcast_to(v, bsub).reshape(-1)
        n = self.x_shape[axis]
        check_bounds(v, n, axis)
        v = v.astype(np.int64)
        v[v < 0] += n
        return v

    def _windows(
        self, coords: dict[int, np.ndarray], region: Region, n_points: int
    ) -> Iterator[tuple[Region, np.ndarray, int]]:
        """(region of x, its points, where the window starts) for each read of a tile."""
        base: list[slice | None] = []
        for s in self.op.sources:
            if s[0] == "out":
                first, last = self._bounds(s, region[s[1]])
                base.append(slice(min(first, last), max(first, last) + 1))
            elif s[0] == "point":
                base.append(slice(s[1], s[1] + 1))
            else:
                base.append(None)
        if self.window is None:
            yield cast(Region, tuple(base)), np.arange(n_points), 0  # no index: no None
            return
        n_w, sizes = self.x_shape[self.window], [self.x_shape[a] for a in self.prefix]
        lin = coords[self.window]
        if self.prefix:
            lin = np.ravel_multi_index([coords[a] for a in self.prefix], sizes) * n_w + lin
        order = np.argsort(lin, kind="stable")
        ordered = lin[order]
        starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
        bounds = np.r_[starts, len(ordered)]
        u_pre, u_w = np.divmod(ordered[starts], n_w)
        slab = self._slab_bytes(region)
        longest = max(1, math.prod(r.stop - r.start for r in region) * self.dtype.itemsize // slab)
        breaks = np.ones(len(u_w), bool)
        breaks[1:] = (u_pre[1:] != u_pre[:-1]) | (np.diff(u_w) - 1 > GAP_BYTES // slab)
        chunk = (u_w - u_w[breaks][np.cumsum(breaks) - 1]) // longest
        breaks[1:] |= chunk[1:] != chunk[:-1]
        w_starts = np.flatnonzero(breaks)
        for ua, ub in zip(w_starts, np.r_[w_starts[1:], len(u_w)]):
            lo, hi = int(u_w[ua]), int(u_w[ub - 1])
            at = np.unravel_index(int(u_pre[ua]), sizes) if self.prefix else ()
            x_region = list(base)
            x_region[self.window] = slice(lo, hi + 1)
            for a, c in zip(self.prefix, at):
                x_region[a] = slice(int(c), int(c) + 1)
            # each None (an indexed axis: the window's, or the prefix's) set above
            yield cast(Region, tuple(x_region)), order[bounds[ua] : bounds[ub]], lo

    def _picker(
        self,
        region: Region,
        coords: dict[int, np.ndarray],
        positions: tuple[np.ndarray, ...],
        pts: np.ndarray,
        lo: int,
    ) -> tuple[tuple[slice, ...], tuple[Any, ...]]:
        """Where each point's slab sits in its window's block, axes in `perm` order."""
        lead: list[Any] = []  # per axis: an array of positions, or 0
        for a in self.lead_x:
            s = self.op.sources[a]
            if a == self.window:
                lead.append(coords[a][pts] - lo)
            elif s[0] == "out":  # along a point axis: take_along_axis's other axes
                first, last = self._bounds(s, region[s[1]])
                pos = positions[self.b_axes.index(s[1])][pts]
                lead.append(first - min(first, last) + s[3] * pos)
            else:
                lead.append(0)
        rest = []
        for a in self.rest_x:
            s = self.op.sources[a]
            first, last = self._bounds(s, region[s[1]])
            rest.append(slice(first - min(first, last), None, s[3] or 1))
        return (slice(None),) * len(lead) + tuple(rest), tuple(lead)

    def _canonical_shape(
        self, region: Region, bsub: tuple[int, ...]
    ) -> tuple[tuple[int, ...], tuple[int, ...]]:
        rest = tuple(region[j].stop - region[j].start for j in self.rest_axes)
        slabs = tuple(
            region[self.op.sources[a][1]].stop - region[self.op.sources[a][1]].start
            for a in self.rest_x
        )
        return (math.prod(bsub), *slabs), bsub + rest

    def gather(
        self, driver: Driver, x: Value, indices: Sequence[Value], region: Region
    ) -> np.ndarray:
        """The output tile ``region``."""
        bsub, positions, coords = self._points(driver, indices, region)
        canon_shape, full_shape = self._canonical_shape(region, bsub)
        canon = np.empty(canon_shape, self.dtype)
        for x_region, pts, lo in self._windows(coords, region, canon_shape[0]):
            strides, lead = self._picker(region, coords, positions, pts, lo)
            block = np.asarray(driver.read(x, x_region)).transpose(self.perm)
            canon[pts] = block[strides][lead]
        return np.ascontiguousarray(canon.reshape(full_shape).transpose(self.to_out))

    def scatter_add(
        self,
        driver: Driver,
        grad: PagedFile,
        indices: Sequence[Value],
        region: Region,
        g_tile: np.ndarray,
    ) -> None:
        """Add the cotangent tile ``g_tile`` into ``grad`` where its values were read."""
        bsub, positions, coords = self._points(driver, indices, region)
        canon_shape, _ = self._canonical_shape(region, bsub)
        g = g_tile.transpose(self.order).reshape(canon_shape).astype(self.dtype, copy=False)
        for x_region, pts, lo in self._windows(coords, region, canon_shape[0]):
            strides, lead = self._picker(region, coords, positions, pts, lo)
            part = np.zeros(tuple(s.stop - s.start for s in x_region), self.dtype)
            np.add.at(part.transpose(self.perm)[strides], lead, g[pts])
            grad.write(x_region, grad.read(x_region) + part)


# ---------------------------------------------------------------- helpers for getitem


def check_bounds(i: Any, n: int, axis: int) -> None:
    """Refuse an integer index (or NumPy array of them) outside ``[-n, n)``, as NumPy."""
    a = np.asarray(i)
    if a.size and (a.min() < -n or a.max() >= n):
        bad = a[(a < -n) | (a >= n)].flat[0]
        raise IndexError(f"index {bad} is out of bounds for axis {axis} with size {n}.")


def is_sparse(step: int, size: int, later: tuple[int, ...], itemsize: int) -> bool:
    """Whether a slice skips so much of the file between its positions (more than
    `GAP_BYTES`) that reading only those positions beats reading the range."""
    return size > 1 and (abs(step) - 1) * math.prod(later) * itemsize > GAP_BYTES
