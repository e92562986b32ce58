"""Reading through a chain: one region of a `ChainFile` computed from its inputs.

The stored inputs' regions are read whole, once per read, as views of their files'
pages where they are one run of bytes on disk (`PagedFile.view`), else into buffers
this thread reuses; the chain's graph then runs on cache-sized pieces of the region
(`_chain_stats.SUB_BYTES`), with blocks of nodes used twice kept within a piece.
"""

from __future__ import annotations

import itertools
import math
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from ..storage import _aligned
from ..storage._file_map import is_view, release
from ..storage._page_layout import is_whole
from ..storage._paged_file import PagedFile, Region
from ._chain_graph import is_chain_file

__all__ = ["Evaluation", "current_region", "pieces_of", "region_key"]


def region_key(region: Region | None) -> tuple[tuple[int, int], ...] | None:
    """A hashable form of ``region`` (None for a 0-d value)."""
    return None if region is None else tuple((s.start, s.stop) for s in region)


_current = threading.local()


def current_region() -> Region:
    """The output region the node being computed on this thread produces."""
    return _current.region


def pieces_of(region: Region, limit: int) -> Iterator[Region]:
    """``region`` cut into C-ordered pieces of at most ``limit`` elements (whole
    trailing axes where they fit)."""
    sizes = [s.stop - s.start for s in region]
    if not sizes or math.prod(sizes) <= limit:
        yield region
        return
    k = 0
    while k < len(sizes) - 1 and math.prod(sizes[k + 1 :]) > limit:
        k += 1
    step = max(1, limit // max(math.prod(sizes[k + 1 :]), 1))
    outer = [range(s.start, s.stop) for s in region[:k]]
    for lead in itertools.product(*outer):
        head = tuple(slice(i, i + 1) for i in lead)
        r = region[k]
        for a in range(r.start, r.stop, step):
            yield (*head, slice(a, min(a + step, r.stop)), *region[k + 1 :])


#: The largest array not read ahead that a tile keeps whole for its pieces.
SMALL_READ_BYTES = 64 * 2**10


class Evaluation:
    """One read through a chain: its stored inputs' regions read once, then the
    graph evaluated piece by piece, blocks of shared nodes kept within a piece."""

    def __init__(self, top: Any, region: Region) -> None:
        stats = top.stats()
        self.shared = stats.shared
        self.piece_elements = max(1, stats.piece_bytes // stats.max_itemsize)
        self.kept: dict[tuple[int, Any], Sequence[np.ndarray]] = {}
        # id(file) -> [(region, block)]
        self.leaves: dict[int, list[tuple[Region, np.ndarray]]] = {}
        self.small_reads: dict[int, np.ndarray] = {}  # id(file) -> its whole block
        # (its buffers go back to the reading thread's, whichever thread releases it)
        self._free = _free()
        self._prefetch(top, region, set())

    def _prefetch(self, src: Any, region: Region | None, seen: set[tuple[int, Any]]) -> None:
        if isinstance(src, np.ndarray) or _is_empty(region):
            return
        if is_chain_file(src) and src.stored is None and src.node is not None:
            node = src.node
            key = (id(node), region_key(region))
            if key in seen:
                return
            seen.add(key)
            for s, r in zip(node.sources, node.regions(region)):
                self._prefetch(s, r, seen)
            return
        f = src.stored if is_chain_file(src) else src
        if not f.shape or not getattr(f, "on_disk", True):
            return  # 0-d values and constants are made where they are needed
        assert region is not None  # (only 0-d sources are read over no region)
        held = self.leaves.setdefault(id(f), [])
        if not any(_contains(r, region) for r, _ in held):
            block = f.view(region) if isinstance(f, PagedFile) else None
            if block is None:
                block = f.read(region, self._free.take(region, f.dtype))
            held.append((region, block))

    def holds_buffers(self) -> bool:
        """Whether any block it read is memory of its own (not a view of a file's
        map, whose pages its pieces can release as they go)."""
        return any(not is_view(b) for held in self.leaves.values() for _, b in held)

    def release(self) -> None:
        for held in self.leaves.values():
            for _, b in held:
                if is_view(b):
                    release(b)  # its mapped pages leave the resident set
                else:
                    self._free.give(b)
        self.leaves.clear()
        self.small_reads.clear()

    def block(self, src: Any, region: Region) -> np.ndarray:
        if isinstance(src, np.ndarray):  # a 0-d value
            return src
        if _is_empty(region):
            # an empty box (a concatenation's input outside the tile) is read by
            # nobody: computing it would ask each node's index map to keep
            # emptiness, which one of size-1 axes cannot (an empty unit axis maps
            # to no input axis)
            return np.empty(tuple(max(0, s.stop - s.start) for s in region), src.dtype)
        if is_chain_file(src):
            node = src.node
            if src.stored is not None or node is None:
                return self._stored(src.stored, region)
            key = (id(node), region_key(region))
            outs = self.kept.get(key)
            if outs is None:
                blocks = [self.block(s, r) for s, r in zip(node.sources, node.regions(region))]
                previous = getattr(_current, "region", None)
                _current.region = region
                try:
                    outs = node.compute(blocks)
                finally:
                    _current.region = previous
                if id(node) in self.shared:
                    self.kept[key] = outs
            return outs[src.index]
        return self._stored(src, region)

    def _stored(self, f: Any, region: Region) -> np.ndarray:
        if not f.shape:
            return f.read(None)
        for r, b in self.leaves.get(id(f), ()):
            if _contains(r, region):
                return b[
                    tuple(slice(a.start - o.start, a.stop - o.start) for a, o in zip(region, r))
                ]
        # an array not read ahead (held in memory): a small one that each piece reads
        # whole (a mask's classes) read once a tile, the pieces sharing its block
        whole = is_whole(region, f.shape)
        block = self.small_reads.get(id(f)) if whole else None
        if block is None:
            block = f.read(region)
            if whole and block.nbytes <= SMALL_READ_BYTES:
                block.flags.writeable = False
                self.small_reads[id(f)] = block
        return block


def _is_empty(region: Region | None) -> bool:
    return region is not None and any(s.stop <= s.start for s in region)


def _contains(outer: Region, inner: Region) -> bool:
    return all(o.start <= i.start and i.stop <= o.stop for o, i in zip(outer, inner))


class _Free:
    """The buffers a thread's reads gave back, reused by its next reads (fresh large
    buffers cost page faults). A tile still running on a device when its pass
    returns is released by another thread (`_running_tails`): its buffers come back
    here all the same, so the lock."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._blocks: list[np.ndarray] = []

    def take(self, region: Region, dtype: np.dtype) -> np.ndarray:
        """A C-contiguous buffer for a stored input's block, one given back where one
        of the shape is free, aligned so that a loss's pass computes on it in place
        (`_aligned`)."""
        shape = tuple(s.stop - s.start for s in region)
        with self._lock:
            for k, b in enumerate(self._blocks):
                if b.shape == shape and b.dtype == dtype:
                    return self._blocks.pop(k)
        return _aligned.empty(shape, dtype)

    def give(self, b: np.ndarray) -> None:
        # (JAX computes on an aligned buffer in place, without a copy: a block given
        # back is written by the next read, so nothing may hold a JAX array of it
        # past the tile's `Evaluation.release`, as none does: its programs have run)
        with self._lock:
            self._blocks.append(b)
            del self._blocks[:-4]  # the blocks of the last read or two


_pool = threading.local()


def _free() -> _Free:
    """This thread's buffers given back."""
    free = getattr(_pool, "free", None)
    if free is None:
        free = _pool.free = _Free()
    return free
