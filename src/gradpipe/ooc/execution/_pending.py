"""Small results computed when first read, so that sums of the same data share a pass.

A sum whose result is small (one a pass would hold in memory: `_held_results`) is
not computed when it is asked for. It becomes a `PendingResult`, a file whose values
are computed the first time anything reads them. Then every other pending sum over
the same axes of data read from the same files is computed in the same pass: the
pass reads the files once and sums each array in its own slot. xarray's weighted
mean is the case in point: it asks for ``dot(a.fillna(0), w)`` and then for
``dot(a.notnull(), w)``, two sums over the same anomaly that would otherwise read the
data twice.

A small result computed from a pending one is pending too (the product of the first
sum with the weights, say), so that the pass waits until something outside reads a
value: a `.compute()`, a larger pass, a 0-d result. Every pass resolves the pending
results it reads before it starts (`_chain.settle`), so a pass never runs inside another.

Sums are joined only where one pass gives each at least what its own would: sums
of float32 or float64 data into their own dtype and counts of booleans, summed
together in the widest of those floats and each converted back to its own dtype,
with fewer terms per sum than that float holds integers exactly (so counts stay
exact). The joined pass plans its own tiles, and a float32 sum joined with a
float64 one is summed in float64: a sum may differ from the same sum computed
alone in the last bits, as a sum under another budget does.
"""

from __future__ import annotations

import dataclasses
import math
import threading
import weakref

import numpy as np

from ..planning._budget import default_page_shape
from ..planning._chain import ChainFile, _Node, leaves, settle, watch
from ..planning._chain_read import current_region
from ..storage._paged_file import PagedFile
from ._driver import Driver
from ._executor import current_executor
from ._held_results import SMALL_SHARE, TOTAL_SHARE, track

__all__ = ["PendingResult", "deferred", "is_pending"]

_live: weakref.WeakSet = weakref.WeakSet()  # pending sums that others may join
_lock = threading.RLock()

#: The floats a joined pass sums in, and how many terms each holds counts exactly.
_EXACT_TERMS = {np.dtype(np.float32): 2**24, np.dtype(np.float64): 2**53}


def is_pending(f) -> bool:
    return isinstance(f, PendingResult) and f._file is None


class _Asked:
    """A file attribute that passes and handles ask of any file: ``default`` while
    the result is pending (asking computes nothing), the computed file's after."""

    def __init__(self, default):
        self.default = default

    def __set_name__(self, owner, name):
        self.name = name

    def __get__(self, result, owner=None):
        if result is None:
            return self
        f = result._file
        return self.default if f is None else getattr(f, self.name, self.default)


class PendingResult:
    """A small result computed when first read (see the module). ``run()`` computes it
    alone; ``joint = (op, source, budget)`` names a sum that others may join. Any
    attribute not asked of every file (`path`, `writable`, `write`, ...) is the
    computed file's, and computes it."""

    waits_to_be_read = True  # `_chain.settle` resolves it before a pass reads it
    is_scratch = _Asked(True)
    on_disk = _Asked(True)
    handle = _Asked(None)
    resident = _Asked(False)
    whole_chunks = _Asked(False)
    writes_in_place = _Asked(False)
    read_share = _Asked(1.0)
    buffers = _Asked(1)

    def __init__(self, run, shape, dtype, page_shape, joint=None):
        self._file = None
        self._run = run
        self.joint = joint
        self.shape = tuple(shape)
        self.dtype = np.dtype(dtype)
        self.page_shape = tuple(page_shape)
        if joint is not None:
            _live.add(self)

    @property
    def stored(self):
        """The computed file, or None while pending (as a chain's `stored`: a write
        into a file this reads computes it first, `_chain.settle_readers`)."""
        return self._file

    def store(self, driver=None):
        self.resolve()
        return self

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.dtype.itemsize

    def resolve(self):
        """The computed file (computing it, with the sums that can join it, first)."""
        if self._file is not None:  # readers of a computed result never wait
            return self._file
        with _lock:
            if self._file is None:
                batch = [self, *_joiners(self)] if self.joint is not None else [self]
                if len(batch) > 1:
                    _run_together(batch)
                else:
                    self._adopt(self._run())
        return self._file

    def _adopt(self, f) -> None:
        self._file, self._run, self.joint = f, None, None
        _live.discard(self)

    def read(self, region=None, out=None):
        return self.resolve().read(region, out)

    def __reduce__(self):  # sent to a cluster's workers: the computed file
        return self.resolve().__reduce__()

    def __getattr__(self, name):
        if name.startswith("_") or name == "joint":
            raise AttributeError(name)
        return getattr(self.resolve(), name)

    def __repr__(self) -> str:
        state = "pending" if self._file is None else repr(self._file)
        return f"PendingResult({self.dtype.name}{list(self.shape)}, {state})"


# ---------------------------------------------------------------- joined sums


def _float_of(batch) -> np.dtype | None:
    """The float dtype a joined pass of ``batch``'s sums runs in (the widest of their
    floats), or None."""
    floats = {np.dtype(p.joint[1].dtype) for p in batch} - {np.dtype(bool)}
    if not floats or not floats <= set(_EXACT_TERMS):
        return None
    return np.result_type(*floats)


def _can_join(a: PendingResult, b: PendingResult) -> bool:
    (op_a, src_a, _), (op_b, src_b, _) = a.joint, b.joint
    if type(op_a) is not type(op_b) or (op_a.axes, op_a.keepdims) != (op_b.axes, op_b.keepdims):
        return False
    if tuple(src_a.shape) != tuple(src_b.shape) or _float_of([a, b]) is None:
        return False

    mine = {id(f) for f in leaves(src_a) if getattr(f, "on_disk", True)}
    return any(id(f) in mine for f in leaves(src_b))


def _joiners(p: PendingResult) -> list[PendingResult]:
    """The live pending sums that can share ``p``'s pass."""
    joiners = [q for q in list(_live) if q is not p and q._file is None and _can_join(p, q)]
    if not joiners:
        return []
    f = _float_of([p, *joiners])
    op, src, _ = p.joint
    terms = math.prod(src.shape[a] for a in op.axes)
    if f is None or terms >= _EXACT_TERMS[f]:
        return []
    for q in [p, *joiners]:  # each sum at least as precise as alone, in its own dtype
        src = np.dtype(q.joint[1].dtype)
        dt = np.dtype(q.joint[0].output_dtype(src))
        if src != np.dtype(bool) and (dt.kind != "f" or dt.itemsize > f.itemsize):
            return []
    # the joined result is held whole: at most the share of the budget that all
    # results held in memory may take together

    room = int(p.joint[2].nbytes * TOTAL_SHARE) // (math.prod(p.shape) * f.itemsize)
    return joiners[: max(room - 1, 0)]


def _run_together(batch: list[PendingResult]) -> None:
    """One pass summing every source of ``batch``, each in its own slot of a new axis
    placed just before the summed ones (so each sum runs over contiguous values);
    each pending result adopts its slot, in its own dtype."""

    f = _float_of(batch)
    op, first, budget = batch[0].joint
    sources = [p.joint[1] for p in batch]
    n, ndim = len(sources), len(first.shape)
    axes = sorted(a % ndim for a in op.axes)
    at = axes[0]  # the slot axis

    def slots(r) -> range:
        return range(r[at].start, r[at].stop)

    def regions(r):  # a source whose slot lies outside the tile reads an empty box
        own = (*r[:at], *r[at + 1 :])
        nothing = (slice(0, 0), *own[1:])
        return [own if i in slots(r) else nothing for i in range(n)]

    def compute(blocks):
        wanted = [np.asarray(blocks[i], f) for i in slots(current_region())]
        return (np.stack(wanted, axis=at),)

    page = tuple(getattr(first, "page_shape", first.shape))
    node = _Node("stack", sources, regions, compute, (*first.shape[:at], n, *first.shape[at:]))
    stacked = ChainFile(node, 0, f, (*page[:at], n, *page[at:]), budget.nbytes)
    stacked.grain = (*(1,) * at, n, *(1,) * (ndim - at))  # tiles keep every slot (`_grain`)
    settle(sources)
    joined = dataclasses.replace(op, axes=tuple(a + 1 for a in axes), dtype=f.str)
    values = Driver(budget, op.name).forward(joined, [stacked]).read(None)
    for i, p in enumerate(batch):
        q_op, src, _ = p.joint
        dt = np.dtype(q_op.output_dtype(src.dtype))
        out = PagedFile.create(p.shape, dt, p.page_shape, in_memory=True)
        if not out.on_disk:
            track(out)
        out.write(None, np.ascontiguousarray(np.take(values, i, axis=at), dt))
        p._adopt(out.commit())


# ---------------------------------------------------------------- what waits


def deferred(op, budget, values, out_type, run) -> PendingResult | None:
    """``op``'s output as a `PendingResult` computed by ``run()`` when first read, or
    None to compute it now: a small (held) output of a sum (``op.joins_passes``) or
    of a pass over a pending result; never on a cluster (its workers compute what
    they are sent), for a 0-d or in-memory result, or for a block map (a chain)."""

    shape = tuple(getattr(out_type, "shape", ()))
    if not shape or current_executor() is not None or not hasattr(op, "index_map"):
        return None
    if getattr(op, "fusable", False) or getattr(op, "in_memory_output", False):
        return None
    dtype = np.dtype(out_type.dtype)
    if not 0 < math.prod(shape) * dtype.itemsize <= budget.nbytes * SMALL_SHARE:
        return None
    arrays = [v for v in values if not isinstance(v, np.ndarray) and getattr(v, "shape", ())]
    waits = any(is_pending(f) for v in arrays for f in leaves(v))
    joins = getattr(op, "joins_passes", False) and len(arrays) == 1 and not waits
    if not (waits or joins):
        return None
    page = default_page_shape(shape, dtype.itemsize, budget)
    later = PendingResult(run, shape, dtype, page, (op, arrays[0], budget) if joins else None)
    for v in arrays:  # a write into what it reads computes it first
        for leaf in leaves(v):
            watch(leaf, later)
    return later
