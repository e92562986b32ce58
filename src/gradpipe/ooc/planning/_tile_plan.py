"""Planning a pass: the tile that fits the budget, and what the plan will read.

`tile_plan` sizes a block-parallel operation's tile from its working set per step
(input blocks read ahead, accumulators, the pieces of the chains it reads through)
and the I/O of the whole loop; `passes` says how many times over the loop reads
each input (what the cost rule of fused chains weighs); `stage_of` is the recorded
`Stage` of one pass, with the bytes its plan reads from disk.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager
from typing import Any

import numpy as np

from ..storage._paged_file import Region
from . import _stages, _tile_reads
from ._array_file import ArrayFile
from ._budget import MemoryBudget, plan_tiles
from ._chain import is_chain
from ._grain import loop_grain
from ._resident import is_resident
from ._tile_reads import ahead_for

__all__ = ["Plan", "first_tile", "passes", "stage_of", "tile_plan"]

#: A pass's loop: ``(out_shape, red_shape, tile)``, the tile over both.
Plan = tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]

#: An input of a pass: an array file, or a 0-d value.
Input = ArrayFile | np.ndarray


def _disk_bytes(v: Input) -> float:
    """Bytes read from disk per element of ``v`` (a chain: of its stored inputs)."""
    if is_chain(v):
        return v.stats().leaf_bytes
    return np.dtype(v.dtype).itemsize if getattr(v, "on_disk", True) else 0


def first_tile(
    out_shape: Sequence[int], red_shape: Sequence[int], tile: Sequence[int]
) -> tuple[Region, Region]:
    """The first step's output and reduction regions (clipped to the loop)."""
    n_out = len(out_shape)
    out_r = tuple(slice(0, min(t, max(n, 1))) for t, n in zip(tile[:n_out], out_shape))
    red_r = tuple(slice(0, min(t, max(n, 1))) for t, n in zip(tile[n_out:], red_shape))
    return out_r, red_r


def _nbytes(region: Region | None, itemsize: int) -> int:
    if region is None:
        return itemsize
    return math.prod(s.stop - s.start for s in region) * itemsize


def passes(op: Any, inputs: Sequence[Input], plan: Plan) -> list[float]:
    """How many times over the loop reads each input (from its first tile). A last,
    partial tile counts as the part it is: an input read once over is read 1.0
    times, not the 1.12 that whole tiles would make of 400 rows in tiles of 57."""
    out_shape, red_shape, tile = plan
    shapes = [tuple(v.shape) for v in inputs]
    regions = op.index_map(*first_tile(out_shape, red_shape, tile), *shapes)
    steps = math.prod(max(n, 1) / max(t, 1) for n, t in zip(out_shape + red_shape, tile))
    return [
        steps * _nbytes(r, 1) / max(math.prod(s), 1) if s else 0.0 for r, s in zip(regions, shapes)
    ]


def tile_plan(
    op: Any,
    inputs: Sequence[Input],
    phase: str,
    g: Input | None,
    budget: MemoryBudget,
    name: str,
) -> tuple[Plan, Callable[[tuple[int, ...]], int]]:
    """The loop's ``(out_shape, red_shape, tile)`` for ``op`` on ``inputs`` under
    ``budget``, and ``bytes_for(tile)``, the bytes one step holds with a tile."""
    for v in (*inputs, g):
        if is_chain(v):
            v.fit_budget(budget.nbytes)
    shapes = [tuple(v.shape) for v in inputs]
    out_shape = tuple(op.output_shape(*shapes))
    red_shape = tuple(op.reduction_shape(*shapes))
    # a chain's block costs what one read through it holds (`ChainFile.stats`); a
    # resident operand's block is a view of memory already held (`_resident`), read
    # from no disk
    sizes = [
        v.stats().peak if is_chain(v) else 0 if is_resident(v) else np.dtype(v.dtype).itemsize
        for v in inputs
    ]
    dtypes = [v.dtype for v in inputs]
    out_item = np.dtype(op.output_dtype(*dtypes)).itemsize
    # partial tiles, the combined tile and the one being written are accumulator
    # sized (a float16 sum's are float32)
    acc_item = max(out_item, np.dtype(op.accumulator_dtype(*dtypes)).itemsize)
    n_out = len(out_shape)
    # steps read ahead: computing chains runs on two threads
    ahead = ahead_for([*inputs, g] if g is not None else inputs)
    # a cotangent computed on read holds its chain's blocks as well
    g_item = g.stats().peak if is_chain(g) else 0
    # and every chain read holds piece-sized intermediates while it runs; a step
    # reads its chains one after another on one thread, so only the largest counts
    # (summing them refused a stack of a dozen fused arrays at any budget)
    fixed = (1 + ahead) * max((v.stats().fixed for v in (*inputs, g) if is_chain(v)), default=0)

    def bytes_for(tile: tuple[int, ...]) -> int:
        out_r = tuple(slice(0, t) for t in tile[:n_out])
        red_r = tuple(slice(0, t) for t in tile[n_out:])
        regions = op.index_map(out_r, red_r, *shapes)
        ins = sum(_nbytes(r, s) for r, s in zip(regions, sizes))
        out = _nbytes(out_r, acc_item)
        if phase == "forward":
            return int((1 + ahead) * ins + 3 * out + fixed)
        g_block = _nbytes(out_r, g_item)
        return int((1 + ahead) * (ins + g_block) + 3 * out + 3 * ins + fixed)

    pages = [getattr(v, "page_shape", None) for v in inputs]

    def cost_for(tile: tuple[int, ...]) -> float:
        """Bytes moved over the whole loop: reads, counting whole pages along all
        but the first axis (what a read of a narrower region costs), output tile
        updates, and 4 MiB a step for per-step overhead."""
        out_r = tuple(slice(0, t) for t in tile[:n_out])
        red_r = tuple(slice(0, t) for t in tile[n_out:])
        regions = op.index_map(out_r, red_r, *shapes)
        read: float = 0
        for r, s, page, shape in zip(regions, sizes, pages, shapes):
            if r is None or not page:
                read += _nbytes(r, s)
                continue
            ext = [r[0].stop - r[0].start] + [
                min(-(-(x.stop - x.start) // p) * p, n)
                for x, p, n in zip(r[1:], page[1:], shape[1:])
            ]
            read += math.prod(ext) * s
        steps = _tile_reads.tile_count(loop, tile)
        # each step also updates the output tile (accumulate or write)
        return steps * (read + _nbytes(out_r, out_item) + 4 * 2**20)

    loop = out_shape + red_shape
    what = f"{name} ({phase}, {len(inputs)} inputs)"
    tile = plan_tiles(
        loop,
        bytes_for,
        budget,
        what=what,
        cost_for=cost_for,
        thin_ok=op.thin_axes(*shapes),
        grain=loop_grain(op, inputs, shapes, out_shape, red_shape),
    )
    plan: Plan = out_shape, red_shape, tuple(max(t, 1) for t in tile)  # empty axes: one step
    return plan, bytes_for


def stage_of(
    op: Any,
    phase: str,
    inputs: Sequence[Input],
    plan: Plan,
    write_bytes: int,
    bytes_for: Callable[[tuple[int, ...]], int],
    g: Input | None = None,
    summed: Iterable[Any] = (),
    held: Iterable[str] = (),
) -> AbstractContextManager[Any]:
    """The `_stages.stage` of one pass (``g``: a backward pass's cotangent), with
    the bytes its plan will read from disk (chains: their stored inputs), what it
    sums in memory (``summed``: inputs whose gradients, or ``"output ..."``) and the
    small results it holds in memory instead of writing (``held``: phrases)."""
    if not _stages.recording_active():
        return contextlib.nullcontext(_stages.Where())
    tile = plan[2]
    shapes = [tuple(v.shape) for v in inputs]
    sources = [*inputs, g] if g is not None else list(inputs)
    per_element = [_disk_bytes(v) for v in sources]
    read: float = 0
    steps = 0
    for out_r, _, _, regions in _tile_reads.plan_steps(op, shapes, plan):
        steps += 1
        if g is not None:
            regions = (*regions, out_r if g.shape else None)
        read += sum(_nbytes(r, 1) * b for r, b, v in zip(regions, per_element, sources) if v.shape)
    peak = bytes_for(tile)
    return _stages.stage(
        op.name,
        phase,
        sources,
        tile,
        steps,
        peak,
        read,
        write_bytes,
        summed=tuple(summed),
        held=tuple(held),
    )
