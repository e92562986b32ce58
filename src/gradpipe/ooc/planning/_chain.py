"""Fused chains: the result of a block map computed when it is read, never written.

A *block map* is a `BlockParallelOp` with no reduction axes whose class sets
``fusable = True`` (elementwise `Blockwise` work, transposes, basic slices,
broadcasts): each output tile is a function of input tiles alone. Run forward, it
makes a `ChainFile` instead of a file on disk: a node holding the operation and
its inputs. ``read(region)`` computes the region from the inputs' regions, which
are themselves read through when they are chains; so a reduction, a contraction
or a save after k elementwise steps reads the stored data once, not k times.

One read evaluates the chain's graph for one region (`_chain_read`). A node or
stored input read by several nodes of the graph (``x`` in ``tanh(x) - x * x``) is
computed or read once per region and kept for the rest of that read; every other
block is dropped as soon as its consumer has run.

The cost rule (`ChainFile.should_store`): a consumer that will read a chain p
times over (its tile plan says so) reads it through while that costs less than
writing it once and reading the stored copy; a chain read through by earlier
consumers is written once the extra work already paid exceeds one write (from the
chain's `_chain_stats.Stats`). See ``docs/guides/out-of-core.md`` ("Fused chains").

The graph's walks and formula are in `_chain_graph`; the registry of the files a
chain reads, so that a write in place stores it first, in `_chain_readers`.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager
from typing import Any, TypeGuard

import numpy as np
from numpy.typing import DTypeLike

from ..storage._paged_file import Region
from ..storage._picked_rows import PickedRows
from ._chain_graph import Node, computed_on_read, describe
from ._chain_read import Evaluation, current_region, pieces_of
from ._chain_readers import Storer, unwatch, watch
from ._chain_stats import Stats, generation, note_stored, piece_bytes

__all__ = [
    "CUT_BUDGET",
    "ChainFile",
    "MAX_DEPTH",
    "MAX_READ_FACTOR",
    "MIN_PIECE_BYTES",
    "deeper_than",
    "is_chain",
    "too_deep",
    "unstored",
]

#: Chains longer than this are cut: their deepest input is written first (a read
#: through the chain recurses once per step).
MAX_DEPTH = 48

#: A block map whose input regions are more than this many times its output tile
#: (a slice with a large step) is written instead of fused: every read through it
#: would read that much more.
MAX_READ_FACTOR = 4.0

#: Pieces smaller than this cost more in per-piece overhead (one Python call per
#: step and piece) than in arithmetic: under budgets of at least `CUT_BUDGET`, a
#: chain too deep for pieces this large is cut (`too_deep`).
MIN_PIECE_BYTES = 16 * 2**10
CUT_BUDGET = 64 * MIN_PIECE_BYTES


def is_chain(f: Any) -> TypeGuard[ChainFile]:
    """Whether ``f`` is a chain still computed on read (not yet stored)."""
    return isinstance(f, ChainFile) and f.stored is None


def too_deep(chain: ChainFile) -> bool:
    """Whether ``chain`` has so many steps for its budget that its pieces fall below
    `MIN_PIECE_BYTES` (then its chain inputs are better written: see `Driver.fuse`).
    Budgets under `CUT_BUDGET` keep every chain whole (pieces are small anyway)."""
    if chain.budget_bytes < CUT_BUDGET:
        return False
    if piece_bytes(chain.budget_bytes, chain.bounds[1]) >= MIN_PIECE_BYTES:
        return False  # (at most that many steps: not too deep, without a walk)
    return chain.stats().piece_bytes < MIN_PIECE_BYTES


def deeper_than(chain: ChainFile, depth: int) -> bool:
    """Whether ``chain`` has at least ``depth`` steps on its longest path (a walk of
    its graph only where its bound says it may)."""
    return chain.bounds[0] >= depth and chain.depth >= depth


def _bounds(node: Node) -> tuple[int, int]:
    below = [s.bounds for s in node.sources if computed_on_read(s)]
    return 1 + max((d for d, _ in below), default=0), 1 + sum(n for _, n in below)


def unstored(values: Iterable[Any]) -> list[ChainFile]:
    """The chains among ``values`` that are still computed on read."""
    return [v for v in values if is_chain(v)]


class ChainFile:
    """An array computed from its inputs when read: the output of a fused block map.

    It reads like a `PagedFile` (``shape``, ``dtype``, ``page_shape``,
    ``read(region)``) and is never written in place; `store` writes it once, after
    which reads come from the stored copy.
    """

    is_scratch = True
    is_chain_file = True  # `_chain_graph.is_chain_file`
    #: the tile side each axis asks to be a multiple of (`_grain`), or None for none
    grain: tuple[int, ...] | None = None

    def __init__(
        self,
        node: Node,
        index: int,
        dtype: DTypeLike,
        page_shape: Sequence[int],
        budget_bytes: int,
    ) -> None:
        self.node: Node | None = node
        self.budget_bytes = int(budget_bytes)  # the budget its pieces are sized for
        self.index = index
        self.shape = node.out_shape
        self.dtype = np.dtype(dtype)
        self.page_shape = tuple(page_shape)
        self.stored: Any = None  # the PagedFile once written
        self.passes = 0.0  # full reads made through the chain so far
        self._stats: Stats | None = None
        #: at least its depth and its number of steps (chains below it stored since,
        #: or steps it shares, make them fewer): `too_deep`, `deeper_than`
        self.bounds: tuple[int, int] = _bounds(node)
        self._lock = threading.Lock()
        for s in node.sources:
            watch(s, self)

    def __getstate__(self) -> dict[str, Any]:
        # sent to a cluster's workers (`_executor`): without its lock and cache
        state = self.__dict__.copy()
        del state["_lock"]
        state["_stats"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    # -- building --------------------------------------------------------------

    @classmethod
    def forward(
        cls,
        op: Any,
        inputs: Sequence[Any],
        out_shape: tuple[int, ...],
        dtype: np.dtype,
        page_shape: Sequence[int],
        budget_bytes: int,
    ) -> ChainFile:
        """The lazy output of block map ``op`` on ``inputs`` (files or 0-d values)."""
        shapes = [tuple(v.shape) for v in inputs]
        into = getattr(op, "forward_into", None)

        def regions(out_r: Region) -> Sequence[Region | None]:
            return op.index_map(out_r, (), *shapes)

        def compute(blocks: list[Any]) -> tuple[np.ndarray]:
            if into is not None:
                out = np.empty(tuple(s.stop - s.start for s in current_region()), dtype)
                into(out, *blocks, accumulate=False)
                return (out,)
            out = np.asarray(op.forward_block(*blocks))
            return (out if out.dtype == dtype else out.astype(dtype),)

        fast = getattr(op, "chain_kernel", None)
        node = Node(op.name, inputs, regions, fast(dtype) if fast else compute, out_shape)
        node.jax = getattr(op, "block_on", None)
        node.stops_gradient = bool(getattr(op, "stops_gradient", False))
        return cls(node, 0, dtype, page_shape, budget_bytes)

    @classmethod
    def gradients(
        cls,
        label: str,
        sources: Sequence[Any],
        regions: Callable[[Region], Sequence[Region | None]],
        compute: Callable[[list[Any]], Sequence[np.ndarray]],
        out_shape: Sequence[int],
        dtypes: Sequence[DTypeLike],
        page_shape: Sequence[int],
        budget_bytes: int,
    ) -> list[ChainFile]:
        """One lazy output per entry of ``dtypes``, all computed by one ``compute``."""
        node = Node(label, sources, regions, compute, out_shape, len(dtypes))
        return [cls(node, i, d, page_shape, budget_bytes) for i, d in enumerate(dtypes)]

    @classmethod
    def picking(cls, rows: PickedRows, budget_bytes: int) -> ChainFile:
        """``rows`` as a chain: read through by its consumers, written only when
        one writes into it or reads it over and over."""
        node = Node("take", [rows], lambda r: [r], lambda blocks: (blocks[0],), rows.shape)
        chain = cls(node, 0, rows.dtype, rows.page_shape, budget_bytes)
        watch(rows.source, chain)  # a write into the source first stores the chain
        return chain

    # -- once stored: the stored file's interface ---------------------------------

    @property
    def writable(self) -> bool:
        return self.stored is not None and self.stored.writable

    @property
    def path(self) -> str | None:
        return None if self.stored is None else self.stored.path

    def write(self, region: Region | None, data: np.ndarray) -> None:
        """Write into the stored copy (`store` first)."""
        if self.stored is None:
            raise TypeError("a fused result is computed on read; store it before writing.")
        self.stored.write(region, data)

    def rewriting(self) -> AbstractContextManager[Any]:
        """The stored copy's `PagedFile.rewriting` (`store` first)."""
        if self.stored is None:
            raise TypeError("a fused result is computed on read; store it before writing.")
        return self.stored.rewriting()

    # -- reading ---------------------------------------------------------------

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.dtype.itemsize

    def normalize(self, region: Region | None) -> Region:
        if region is None:
            return tuple(slice(0, n) for n in self.shape)
        return tuple(slice(*s.indices(n)[:2]) for s, n in zip(region, self.shape))

    def read(self, region: Region | None = None, out: np.ndarray | None = None) -> np.ndarray:
        """The values in ``region`` (computed through the chain, or from the stored copy).

        The stored inputs' regions are read whole, once; the chain then runs on
        cache-sized pieces of the region (`SUB_BYTES`), so its intermediates stay
        small, in cache, and out of the page-fault path of fresh large buffers.
        """
        stored = self.stored
        if stored is not None:
            return stored.read(region, out)
        region = self.normalize(region)
        if out is None:
            out = np.empty(tuple(s.stop - s.start for s in region), self.dtype)
        ev = Evaluation(self, region)
        try:
            with np.errstate(all="ignore"):  # log(0) is -inf, as in NumPy: no warning
                for sub in pieces_of(region, ev.piece_elements):
                    local = tuple(
                        slice(a.start - r.start, a.stop - r.start) for a, r in zip(sub, region)
                    )
                    out[local] = ev.block(self, sub)
                    ev.kept.clear()
        finally:
            ev.release()
        return out

    # -- planning --------------------------------------------------------------

    def stats(self) -> Stats:
        """What one read through the chain holds and costs per output element."""
        s = self._stats
        if s is None or s.node is not self.node or s.generation != generation():
            s = self._stats = Stats(self)  # the graph changed: a chain in it was stored
        return s

    def fit_budget(self, nbytes: int) -> None:
        """Size this chain's pieces for a budget of ``nbytes`` if that is smaller than
        the one it was made under (a consumer planned under a tighter budget)."""
        if nbytes < self.budget_bytes:
            self.budget_bytes = int(nbytes)
            self._stats = None

    @property
    def depth(self) -> int:
        return 0 if self.stored is not None else self.stats().depth

    def should_store(self, passes: float) -> bool:
        """Whether to write the chain before a consumer that reads it ``passes`` times.

        Per element, reading through costs ``c_r`` (its stored inputs' bytes plus one
        itemsize of work per step), a stored copy ``c_s`` = its itemsize to read and
        the same to write. Write when the consumer alone makes it pay,
        ``(passes - 1) * c_r > w + passes * c_s``, or when the reads through it
        beyond the first, by earlier consumers and this one, cost more extra than
        one write: ``(done + passes - 1) * (c_r - c_s) > w``.
        """
        if self.stored is not None:
            return False
        c_r, c_s = self.stats().recompute, float(self.dtype.itemsize)
        w = c_s
        if (passes - 1) * c_r > w + passes * c_s:
            return True
        return (self.passes + passes - 1) * (c_r - c_s) > w

    def count_passes(self, passes: float) -> None:
        with self._lock:
            self.passes += passes

    # -- storing -----------------------------------------------------------------

    def store(self, driver: Storer) -> ChainFile:
        """Write the chain to a scratch file now; later reads come from there."""
        if self.stored is not None:
            return self
        f = driver.store(self)
        self.adopt(f)
        return self

    def adopt(self, f: Any) -> None:
        """Take ``f`` (holding this chain's values) as the stored copy."""
        self.stored = f
        node, self.node = self.node, None
        self._stats = None
        note_stored()
        if node is not None:
            for s in node.sources:
                unwatch(s, self)

    def describe(self) -> str:
        return describe(self)

    def __repr__(self) -> str:
        state = "stored" if self.stored is not None else "fused"
        return f"ChainFile({self.dtype.name}{list(self.shape)}, {state}: {describe(self)})"
