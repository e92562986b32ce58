"""The steps of a tile loop and the reads that run ahead of them.

A pass walks output tiles in C order with the reduction tiles innermost (`steps`).
While one step computes, background threads read the next steps' input blocks
(`prefetched`), so disk time hides behind the arithmetic when tiles are large.
"""

from __future__ import annotations

import collections
import itertools
import math
import threading
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np

from ..storage._file_map import is_view, populate, release
from ..storage._paged_file import PagedFile, Region
from ._chain import is_chain

__all__ = [
    "Step",
    "ahead_for",
    "plan_steps",
    "prefetched",
    "regions",
    "steps",
    "take",
    "tile_count",
]

#: One step of a pass: ``(out_region, first, last, input_regions)`` (`steps`).
Step = tuple[Region, bool, bool, Sequence[Region | None]]


def regions(shape: Sequence[int], tile: Sequence[int]) -> Iterator[Region]:
    """The tiles of ``shape`` in C order (edge tiles clipped)."""
    ranges = [range(0, max(n, 1), max(t, 1)) for n, t in zip(shape, tile)]
    for starts in itertools.product(*ranges):
        yield tuple(slice(s, min(s + t, n)) for s, t, n in zip(starts, tile, shape))


def tile_count(shape: Sequence[int], tile: Sequence[int]) -> int:
    """How many tiles `regions` gives (an empty axis counts one)."""
    return math.prod(-(-max(n, 1) // max(t, 1)) for n, t in zip(shape, tile))


def plan_steps(
    op: Any,
    shapes: Sequence[tuple[int, ...]],
    plan: tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]],
) -> Iterator[Step]:
    """Every step of a pass planned as ``(out_shape, red_shape, tile)`` (`steps`)."""
    out_shape, red_shape, tile = plan
    n_out = len(out_shape)
    return steps(op, shapes, regions(out_shape, tile[:n_out]), red_shape, tile[n_out:])


def steps(
    op: Any,
    shapes: Sequence[tuple[int, ...]],
    out_regions: Iterable[Region],
    red_shape: Sequence[int],
    red_tile: Sequence[int],
    first_red: int = 0,
    end_red: int | None = None,
) -> Iterator[Step]:
    """``(out_region, first, last, input_regions)`` for each step of ``op`` over
    ``out_regions``, each with reduction tiles ``first_red`` up to ``end_red``
    (default: all). ``first`` starts an accumulation, ``last`` ends the whole
    reduction (a range that stops short of the end never sets it)."""
    reds = list(regions(red_shape, red_tile))
    end = len(reds) if end_red is None else end_red
    for out_r in out_regions:
        for k in range(first_red, end):
            yield out_r, k == first_red, k == len(reds) - 1, op.index_map(out_r, reds[k], *shapes)


def take(free: list[np.ndarray], shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """A buffer of ``shape`` from ``free``, or a new one; buffers of other shapes (edge
    tiles) are dropped from ``free``."""
    for k, b in enumerate(free):
        if b.shape == shape:
            return free.pop(k)
    free.clear()
    return np.empty(shape, dtype)


def ahead_for(inputs: Iterable[Any]) -> int:
    """Steps whose blocks are read ahead: two when a chain is computed on read (each
    read is a chain's work; NumPy releases the GIL on large blocks, so two reads
    run on two cores), else one (a read is I/O that hides behind the arithmetic)."""
    return 2 if any(is_chain(v) for v in inputs) else 1


def _recyclable(src: Any) -> bool:
    """Whether blocks of ``src`` are read into loop-owned buffers."""
    return isinstance(src, PagedFile) or is_chain(src)


def _read(src: Any, region: Region | None) -> np.ndarray:
    return src if isinstance(src, np.ndarray) else src.read(region)


def prefetched(
    step_iter: Iterable[Step], sources: Sequence[Any]
) -> Iterator[tuple[Step, list[np.ndarray]]]:
    """Yield (step, blocks) with the next steps' blocks read on background threads.

    A block that is one run of bytes in its file is a read-only view of the
    file's pages (`PagedFile.view`): nothing is copied, the reading thread only
    has the kernel map the pages (reading those not cached), and they are dropped
    from memory once no step uses them. Other blocks are read into buffers that are recycled once no
    step uses them, so after the first steps every read lands in memory already
    touched (fresh pages cost more than the copy on some machines). The consumer
    must not keep a block past its step: a block-aliasing result is copied first.
    """
    ahead = ahead_for(sources)
    last: list[tuple[Any, np.ndarray | None]] = [(None, None)] * len(sources)
    spare: list[list[np.ndarray]] = [[] for _ in sources]
    lock = threading.Lock()

    # one step in flight: a block read for the step before is reused when the
    # region is the same; two: every step reads its own (so a finished step's
    # blocks are free for the next read)
    dedupe = ahead == 1

    def load(regions: Sequence[Region | None]) -> list[np.ndarray]:
        blocks = []
        for i, (src, r) in enumerate(zip(sources, regions)):
            key = None if r is None else tuple((s.start, s.stop) for s in r)
            if dedupe:
                with lock:
                    prev_key, prev = last[i]
                if prev is not None and key == prev_key:
                    blocks.append(prev)
                    continue
            b = src.view(r) if r is not None and isinstance(src, PagedFile) else None
            if b is not None:
                populate(b)
            elif r is not None and _recyclable(src):
                r = src.normalize(r)
                with lock:
                    buf = take(spare[i], tuple(s.stop - s.start for s in r), src.dtype)
                b = src.read(r, out=buf)
            else:
                b = _read(src, r)
            if dedupe:
                with lock:
                    last[i] = (key, b)
            blocks.append(b)
        return blocks

    def recycle(done: list[np.ndarray], still: list[np.ndarray] | None) -> list[np.ndarray]:
        """Return ``done``'s buffers to the spares; its views, to be released."""
        views = []
        with lock:
            for i, b in enumerate(done):
                if dedupe and still is not None and b is still[i]:
                    continue
                if is_view(b):
                    views.append(b)
                elif _recyclable(sources[i]):
                    spare[i].append(b)
        return views

    step_iter = iter(step_iter)
    pool = ThreadPoolExecutor(max_workers=ahead, thread_name_prefix="gradpipe-ooc-read")
    queue: collections.deque[tuple[Step, Future[list[np.ndarray]]]] = collections.deque()
    blocks: list[np.ndarray] | None = None
    v: np.ndarray  # (a view released below)
    try:
        for step in itertools.islice(step_iter, ahead):
            queue.append((step, pool.submit(load, step[-1])))
        while queue:
            step, fut = queue.popleft()
            previous, blocks = blocks, fut.result()
            # A finished step's views are released here, not on the reading
            # thread: dropping mapped pages interrupts every thread of the process
            # (TLB shootdowns), which slowed a product running beside it 3x.
            for v in [] if previous is None else recycle(previous, blocks):
                release(v)
            nxt = next(step_iter, None)
            if nxt is not None:
                queue.append((nxt, pool.submit(load, nxt[-1])))
            yield step, blocks
    finally:
        for _, fut in queue:
            fut.cancel()
        pool.shutdown(wait=True)
        unread = [f.result() for _, f in queue if not f.cancelled() and f.exception() is None]
        for done in [blocks, *unread]:
            for v in [] if done is None else recycle(done, None):
                release(v)  # the mapped pages of the last steps' views
