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
consumers is written once the extra work already paid exceeds one write. See
``docs/guides/out-of-core.md`` ("Fused chains").
"""

from __future__ import annotations

import itertools
import math
import threading
import weakref

import numpy as np

from ..storage._paged_file import Region
from ..storage._picked_rows import PickedRows
from ._chain_read import Evaluation, current_region, pieces_of

__all__ = [
    "ChainFile",
    "MAX_DEPTH",
    "Unread",
    "describe",
    "is_chain",
    "settle",
    "settle_readers",
    "unstored",
]

#: Chains longer than this are cut: their deepest input is written first (a read
#: through the chain recurses once per step).
MAX_DEPTH = 48

#: A block map whose input regions are more than this many times its output tile
#: (a slice with a large step) is written instead of fused: every read through it
#: would read that much more.
MAX_READ_FACTOR = 4.0

#: The size of the pieces a chain runs on within one read (its intermediates).
SUB_BYTES = 512 * 2**10

#: Pieces smaller than this cost more in per-piece overhead (one Python call per
#: step and piece) than in arithmetic: under budgets of at least `CUT_BUDGET`, a
#: chain too deep for pieces this large is cut (`too_deep`).
MIN_PIECE_BYTES = 16 * 2**10
CUT_BUDGET = 64 * MIN_PIECE_BYTES

# chains stored so far: cached statistics of a graph older than the last store are
# recomputed (a stored chain inside it is a leaf now)
_stored_count = [0]


def is_chain(f) -> bool:
    """Whether ``f`` is a chain still computed on read (not yet stored)."""
    return isinstance(f, ChainFile) and f.stored is None


def too_deep(chain: ChainFile) -> bool:
    """Whether ``chain`` has so many steps for its budget that its pieces fall below
    `MIN_PIECE_BYTES` (then its chain inputs are better written: see `Driver.fuse`).
    Budgets under `CUT_BUDGET` keep every chain whole (pieces are small anyway)."""
    return chain.budget_bytes >= CUT_BUDGET and chain.stats().piece_bytes < MIN_PIECE_BYTES


def unstored(values) -> list[ChainFile]:
    """The chains among ``values`` that are still computed on read."""
    return [v for v in values if is_chain(v)]


def _elements(region: Region | None) -> int:
    return 1 if region is None else math.prod(max(s.stop - s.start, 0) for s in region)


class _Node:
    """One block map applied to its sources; ``outputs`` ChainFiles share it.

    ``compute(blocks)`` returns one block per output; ``regions(out_region)`` names
    the region of each source that an output region needs.
    """

    __slots__ = ("__weakref__", "compute", "label", "n_outputs", "out_shape", "regions", "sources")

    def __init__(self, label, sources, regions, compute, out_shape, n_outputs=1):
        self.label = label
        self.n_outputs = n_outputs
        self.sources = list(sources)
        self.regions = regions
        self.compute = compute
        self.out_shape = tuple(out_shape)


class ChainFile:
    """An array computed from its inputs when read: the output of a fused block map.

    It reads like a `PagedFile` (``shape``, ``dtype``, ``page_shape``,
    ``read(region)``) and is never written in place; `store` writes it once, after
    which reads come from the stored copy.
    """

    is_scratch = True
    is_chain_file = True  # `_chain_read.is_fused`
    #: the tile side each axis asks to be a multiple of (`_grain`), or None for none
    grain: tuple[int, ...] | None = None

    def __init__(self, node: _Node, index: int, dtype, page_shape, budget_bytes: int):
        self.node: _Node | None = node
        self.budget_bytes = int(budget_bytes)  # the budget its pieces are sized for
        self.index = index
        self.shape = node.out_shape
        self.dtype = np.dtype(dtype)
        self.page_shape = tuple(page_shape)
        self.stored = None  # the PagedFile once written
        self.passes = 0.0  # full reads made through the chain so far
        self._stats = None
        self._lock = threading.Lock()
        for s in node.sources:
            watch(s, self)

    def __getstate__(self):
        # sent to a cluster's workers (`_executor`): without its lock and cache
        state = self.__dict__.copy()
        del state["_lock"]
        state["_stats"] = None
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._lock = threading.Lock()

    # -- building --------------------------------------------------------------

    @classmethod
    def forward(cls, op, inputs, out_shape, dtype, page_shape, budget_bytes) -> ChainFile:
        """The lazy output of block map ``op`` on ``inputs`` (files or 0-d values)."""
        shapes = [tuple(v.shape) for v in inputs]
        into = getattr(op, "forward_into", None)

        def regions(out_r):
            return op.index_map(out_r, (), *shapes)

        def compute(blocks):
            if into is not None:
                out = np.empty(tuple(s.stop - s.start for s in current_region()), dtype)
                into(out, *blocks, accumulate=False)
                return (out,)
            out = np.asarray(op.forward_block(*blocks))
            return (out if out.dtype == dtype else out.astype(dtype),)

        fast = getattr(op, "chain_kernel", None)
        node = _Node(op.name, inputs, regions, fast(dtype) if fast else compute, out_shape)
        return cls(node, 0, dtype, page_shape, budget_bytes)

    @classmethod
    def gradients(
        cls, label, sources, regions, compute, out_shape, dtypes, page_shape, budget_bytes
    ):
        """One lazy output per entry of ``dtypes``, all computed by one ``compute``."""
        node = _Node(label, sources, regions, compute, out_shape, len(dtypes))
        return [cls(node, i, d, page_shape, budget_bytes) for i, d in enumerate(dtypes)]

    @classmethod
    def picking(cls, rows: PickedRows, budget_bytes) -> ChainFile:
        """``rows`` as a chain: read through by its consumers, written only when
        one writes into it or reads it over and over."""
        node = _Node("take", [rows], lambda r: [r], lambda blocks: (blocks[0],), rows.shape)
        chain = cls(node, 0, rows.dtype, rows.page_shape, budget_bytes)
        watch(rows.source, chain)  # a write into the source first stores the chain
        return chain

    # -- once stored: the stored file's interface ---------------------------------

    @property
    def writable(self) -> bool:
        return self.stored is not None and self.stored.writable

    @property
    def path(self):
        return None if self.stored is None else self.stored.path

    def write(self, region, data) -> None:
        """Write into the stored copy (`store` first)."""
        if self.stored is None:
            raise TypeError("a fused result is computed on read; store it before writing.")
        self.stored.write(region, data)

    def rewriting(self):
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

    def stats(self) -> _Stats:
        """What one read through the chain holds and costs per output element."""
        s = self._stats
        if s is None or s.node is not self.node or s.generation != _stored_count[0]:
            s = self._stats = _Stats(self)  # the graph changed: a chain in it was stored
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

    def store(self, driver) -> ChainFile:
        """Write the chain to a scratch file now; later reads come from there."""
        if self.stored is not None:
            return self
        f = driver.store(self)
        self.adopt(f)
        return self

    def adopt(self, f) -> None:
        """Take ``f`` (holding this chain's values) as the stored copy."""
        self.stored = f
        node, self.node = self.node, None
        self._stats = None
        _stored_count[0] += 1
        if node is not None:
            for s in node.sources:
                unwatch(s, self)

    def describe(self) -> str:
        return describe(self)

    def __repr__(self) -> str:
        state = "stored" if self.stored is not None else "fused"
        return f"ChainFile({self.dtype.name}{list(self.shape)}, {state}: {describe(self)})"


class Unread:
    """A stand-in source a chain's step never reads (the VJP of ``a - b`` needs
    neither ``a`` nor ``b``): zeros of the right shape and dtype, computed from
    nothing, so the chain below it is not evaluated."""

    on_disk = False

    def __init__(self, shape, dtype):
        self.shape, self.dtype = tuple(shape), np.dtype(dtype)

    def read(self, region=None, out=None):
        shape = self.shape if region is None else tuple(s.stop - s.start for s in region)
        return np.broadcast_to(np.zeros((), self.dtype), shape)


# ---------------------------------------------------------------- statistics


class _Stats:
    """The graph behind a chain: shared parts, depth, peak bytes and cost per element.

    Sizes are per output element: a source read over a region k times the output
    tile (a strided slice) counts k times its itemsize; a 0-d source nothing.
    """

    def __init__(self, top: ChainFile):
        self.node = top.node
        self.generation = _stored_count[0]
        uses: dict[int, int] = {}
        order: list = []
        self._visit(top, 1.0, uses, order)
        self.shared = {k for k, n in uses.items() if n > 1}
        self.leaves = [(leaf, factor) for kind, leaf, _, factor in order if kind == "leaf"]
        self.steps = [(node.label, factor) for kind, node, _, factor in order if kind == "node"]
        # a read holds its stored inputs' blocks and its output block; the chain's
        # intermediates are piece-sized (`SUB_BYTES` each, at most one per step)
        self.max_itemsize = max((f.dtype.itemsize for _, _, f, _ in order), default=1)
        # (a leaf read through another array, `PickedRows`, holds two buffers)
        self.peak = top.dtype.itemsize + sum(
            leaf.dtype.itemsize * factor * getattr(leaf, "buffers", 1)
            for kind, leaf, _, factor in order
            if kind == "leaf" and getattr(leaf, "on_disk", True)
        )
        steps = sum(kind == "node" for kind, *_ in order)
        # pieces small enough that all of one read's take a sixteenth of the budget
        self.piece_bytes = max(16, min(SUB_BYTES, top.budget_bytes // (32 * (1 + steps))))
        self.fixed = 2 * self.piece_bytes * (1 + steps)
        self.leaf_bytes = sum(  # (`PickedRows` reads a share of what it gives)
            leaf.dtype.itemsize * factor * getattr(leaf, "read_share", 1.0)
            for leaf, factor in self.leaves
            if getattr(leaf, "on_disk", True)
        )
        self.recompute = self.leaf_bytes + sum(
            f.dtype.itemsize * factor for kind, _, f, factor in order if kind == "node"
        )
        self.depth = _depth(top)

    @staticmethod
    def _visit(f, factor, uses, order) -> None:
        """Count uses of each node and stored input below ``f``; list them in
        evaluation order (a method, not a closure: no reference cycle keeps files)."""
        if isinstance(f, ChainFile) and f.stored is None:
            node = f.node
            uses[id(node)] = uses.get(id(node), 0) + 1
            if uses[id(node)] > 1:
                return
            for s, k in zip(node.sources, _factors(node)):
                _Stats._visit(s, factor * k, uses, order)
            order.append(("node", node, f, factor))
        elif not isinstance(f, np.ndarray) and f.shape:
            leaf = f.stored if isinstance(f, ChainFile) else f
            uses[id(leaf)] = uses.get(id(leaf), 0) + 1
            if uses[id(leaf)] == 1:
                order.append(("leaf", leaf, f, factor))


def _factors(node: _Node) -> list[float]:
    """How much larger than the output tile each source region is (a probe tile)."""
    probe = tuple(slice(0, min(n, 64)) for n in node.out_shape)
    n_out = max(_elements(probe), 1)
    factors = []
    for s, r in zip(node.sources, node.regions(probe)):
        if r is None or isinstance(s, np.ndarray):
            factors.append(0.0)
        else:
            factors.append(_elements(r) / n_out)
    return factors


def read_factor(op, shapes, out_shape) -> float:
    """The largest source-to-output size ratio of block map ``op`` (a probe tile)."""
    probe = tuple(slice(0, min(n, 64)) for n in out_shape)
    n_out = max(_elements(probe), 1)
    ratios = [_elements(r) / n_out for r in op.index_map(probe, (), *shapes) if r is not None]
    return max(ratios, default=0.0)


def _depth(f) -> int:
    best, stack, depth_of = 0, [(f, 1)], {}
    while stack:
        g, d = stack.pop()
        if not (isinstance(g, ChainFile) and g.stored is None):
            continue
        node = g.node
        if depth_of.get(id(node), 0) >= d:
            continue
        depth_of[id(node)] = d
        best = max(best, d)
        stack.extend((s, d + 1) for s in node.sources)
    return best


def describe(f, name_leaf=None) -> str:
    """The chain behind ``f`` as a formula, ``exp(multiply(tanh(x0), 0.5))``; stored
    arrays are named by ``name_leaf(file)`` (default ``x0``, ``x1``, ... in order)."""
    if name_leaf is None:
        names: dict[int, str] = {}
        counter = itertools.count()

        def name_leaf(leaf):
            if id(leaf) not in names:
                names[id(leaf)] = f"x{next(counter)}"
            return names[id(leaf)]

    return _formula(f, name_leaf)


def leaves(f) -> list:
    """The arrays behind ``f``: the stored files and in-memory operands a chain
    reads, or ``[f]`` for a stored array (none for a 0-d value)."""
    out, stack, seen = [], [f], set()
    while stack:
        g = stack.pop()
        if isinstance(g, (np.ndarray, Unread)) or id(g) in seen:
            continue
        seen.add(id(g))
        if isinstance(g, ChainFile) and g.stored is None:
            if g.node is not None:
                stack.extend(g.node.sources)
            continue
        leaf = g.stored if isinstance(g, ChainFile) else g
        if isinstance(leaf, PickedRows):
            stack.append(leaf.source)  # read through: its source is what is read
        else:
            out.append(leaf)
    return out


def _formula(g, name_leaf) -> str:
    if isinstance(g, np.ndarray):
        return str(g) if g.size == 1 else f"array{list(g.shape)}"
    node = g.node if isinstance(g, ChainFile) and g.stored is None else None
    if node is not None:
        text = f"{node.label}({', '.join(_formula(s, name_leaf) for s in node.sources)})"
        return f"{text}[{g.index}]" if _outputs(g) > 1 else text
    if isinstance(g, Unread):
        return "_"
    leaf = g.stored if isinstance(g, ChainFile) else g
    if isinstance(leaf, PickedRows):
        return leaf.formula(lambda f: _formula(f, name_leaf))
    return name_leaf(leaf)


def _outputs(g: ChainFile) -> int:
    return getattr(g.node, "n_outputs", 1)


# ---------------------------------------------------------------- readers of a file


_readers: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_readers_lock = threading.Lock()


def watch(source, chain: ChainFile) -> None:
    """Note that ``chain`` reads ``source`` (so a write to it can keep the chain right)."""
    if isinstance(source, np.ndarray):
        return
    try:
        with _readers_lock:
            _readers.setdefault(source, weakref.WeakSet()).add(chain)
    except TypeError:  # not weakly referenceable: never written in place either
        pass


def unwatch(source, chain: ChainFile) -> None:
    with _readers_lock:
        readers = _readers.get(source) if not isinstance(source, np.ndarray) else None
        if readers is not None:
            readers.discard(chain)


def readers_of(source) -> list[ChainFile]:
    """The live chains that read ``source`` directly and are still computed on read."""
    try:
        with _readers_lock:
            readers = list(_readers.get(source, ()))
    except TypeError:
        return []
    return [c for c in readers if c.stored is None]


def settle(values) -> None:
    """Compute the results waiting to be read (`execution._pending`) that ``values``
    (files, chains over them) read: a pass does so before it starts, never inside."""
    for v in values:
        if isinstance(v, np.ndarray) or not hasattr(v, "shape"):
            continue
        for leaf in leaves(v):
            if getattr(leaf, "waits_to_be_read", False):
                leaf.resolve()


def settle_readers(f, driver) -> None:
    """Write every live chain that reads ``f`` before ``f`` is written in place (so
    the chain keeps the values it was made from); ``f`` may be a stored chain."""
    for source in (f, getattr(f, "stored", None)):
        if source is not None:
            for chain in readers_of(source):
                chain.store(driver)
