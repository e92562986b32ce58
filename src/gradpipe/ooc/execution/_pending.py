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
results it reads before it starts (`_chain_readers.settle`), so a pass never runs inside another.

A write into what a pending result reads computes it first (`_chain_readers.settle_readers`):
it watches the files under each array it reads and the array itself, since a fused
result or a view (``c = X * 2``, ``X[100:300]``) is written by storing it and then
changing the stored copy, which is none of the files under it.

Sums are joined only where one pass gives each what its own would (`_float_needed`):
all run in one float, float32 or float64, the widest they need. A sum of booleans
or of integers of up to 32 bits joins when every partial sum is an exact integer
in that float: it is then the exact sum, as alone, whatever the tiles. A float sum
joins in its accumulator's float or a wider one. Each result is finished as its own
pass would finish it, in its own dtype (a mean's division, an integer's wrap-around),
so counts, integer sums and their means equal the same results computed alone, bit
for bit. The joined pass plans its own tiles: a float sum may differ from the same
sum alone in the last bits of its dtype, as a sum under another budget does (and
a float32 sum joined with a float64 one is summed in float64). A joined result is
held in memory only within the share of the budget held results take together
(`_held_results`); past it, it goes to a scratch file.
"""

from __future__ import annotations

import itertools
import math
import threading
import weakref
from collections.abc import Callable, Sequence
from typing import Any, cast

import numpy as np
from numpy.typing import DTypeLike

from ..planning._array_file import ArrayFile
from ..planning._budget import MemoryBudget, default_page_shape
from ..planning._chain import ChainFile
from ..planning._chain_graph import Node, leaves
from ..planning._chain_read import current_region
from ..planning._chain_readers import settle, watch
from ..storage._paged_file import Region
from ._driver import Driver
from ._executor import current_executor
from ._held_results import SMALL_SHARE, TOTAL_SHARE, hold_in_memory, result_file

__all__ = ["PendingResult", "deferred", "is_pending"]

_live: weakref.WeakSet[PendingResult] = weakref.WeakSet()  # pending sums that others may join
_lock = threading.RLock()
_made = itertools.count()  # the order pending results were made in (joiners: oldest first)


def is_pending(f: Any) -> bool:
    return isinstance(f, PendingResult) and f._file is None


class _Asked:
    """A file attribute that passes and handles ask of any file: ``default`` while
    the result is pending (asking computes nothing), the computed file's after."""

    def __init__(self, default: Any) -> None:
        self.default = default

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, result: PendingResult | None, owner: type | None = None) -> Any:
        if result is None:
            return self
        f = result._file
        return self.default if f is None else getattr(f, self.name, self.default)


class PendingResult:
    """A small result computed when first read (see the module). ``run()`` computes it
    alone; ``joint = (op, source, budget)`` names a sum that others may join. Any
    attribute not asked of every file (`path`, `writable`, `write`, ...) is the
    computed file's, and computes it."""

    waits_to_be_read = True  # `_chain_readers.settle` resolves it before a pass reads it
    is_scratch = _Asked(True)
    on_disk = _Asked(True)
    handle = _Asked(None)
    resident = _Asked(False)
    whole_chunks = _Asked(False)
    writes_in_place = _Asked(False)
    read_share = _Asked(1.0)
    buffers = _Asked(1)

    def __init__(
        self,
        run: Callable[[], Any] | None,
        shape: Sequence[int],
        dtype: DTypeLike,
        page_shape: Sequence[int],
        joint: tuple[Any, Any, MemoryBudget] | None = None,
    ) -> None:
        self._file: Any = None  # the computed file
        self._run: Callable[[], Any] | None = run
        self.joint = joint
        self.shape = tuple(shape)
        self.dtype = np.dtype(dtype)
        self.page_shape = tuple(page_shape)
        self._order = next(_made)
        if joint is not None:
            _live.add(self)

    @property
    def stored(self) -> Any:
        """The computed file, or None while pending (as a chain's `stored`: a write
        into a file this reads computes it first, `_chain_readers.settle_readers`)."""
        return self._file

    def store(self, driver: Any = None) -> PendingResult:
        self.resolve()
        return self

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.dtype.itemsize

    def resolve(self) -> Any:
        """The computed file (computing it, with the sums that can join it, first)."""
        if self._file is not None:  # readers of a computed result never wait
            return self._file
        with _lock:
            if self._file is None:
                batch = [self, *_joiners(self)] if self.joint is not None else [self]
                if len(batch) > 1:
                    _run_together(batch)
                else:
                    self._adopt(self._compute())
        return self._file

    def _compute(self) -> Any:
        """The computed file: ``run()``. (A subclass that computes it by a method of
        its own passes ``run=None`` and overrides this: a bound method held by its
        own object is a reference cycle, and would keep what it reads, files of a
        gradient's size among them, until the garbage collector runs.)"""
        assert self._run is not None  # (dropped only once computed)
        return self._run()

    def _adopt(self, f: Any) -> None:
        self._file, self._run, self.joint = f, None, None
        _live.discard(self)

    def read(self, region: Region | None = None, out: np.ndarray | None = None) -> np.ndarray:
        return self.resolve().read(region, out)

    def __reduce__(self) -> str | tuple[Any, ...]:  # sent to a cluster's workers: the computed file
        return self.resolve().__reduce__()

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") or name == "joint":
            raise AttributeError(name)
        return getattr(self.resolve(), name)

    def __repr__(self) -> str:
        state = "pending" if self._file is None else repr(self._file)
        return f"PendingResult({self.dtype.name}{list(self.shape)}, {state})"


# ---------------------------------------------------------------- joined sums

#: The floats a joined pass sums in, each with the largest integer up to which every
#: integer is exact in it.
_EXACT: dict[np.dtype, int] = {np.dtype(np.float32): 2**24, np.dtype(np.float64): 2**53}


def _joint(p: PendingResult) -> tuple[Any, Any, MemoryBudget]:
    """``p``'s sum as ``(op, source, budget)`` (a pending sum others may join)."""
    assert p.joint is not None  # (only such sums are joined)
    return p.joint


def _dtypes(p: PendingResult) -> tuple[np.dtype, np.dtype, np.dtype]:
    """The dtypes of ``p``'s sum: its data's, its accumulator's and its result's."""
    op, src, _ = _joint(p)
    dx = np.dtype(src.dtype)
    return dx, np.dtype(op.accumulator_dtype(dx)), np.dtype(op.output_dtype(dx))


def _float_needed(p: PendingResult) -> np.dtype | None:
    """The narrowest float a joined pass may sum ``p`` in and still give it what its
    own pass would, or None where none does (complex, 64-bit integers, ...).

    A sum of floats needs its accumulator's float (a wider one is only closer to
    the exact sum). A sum of booleans or of integers of up to 32 bits needs a float
    in which every partial sum is an exact integer: then the pass gives the exact
    sum whatever its tiles, as the sum alone does (an integer result wraps as it
    would alone), and a mean of them divides it in its own dtype.
    """
    op, src, _ = _joint(p)
    dx, acc, out = _dtypes(p)
    if dx.kind == "f":
        return acc if acc in _EXACT and out.kind == "f" else None
    if dx.kind not in "biu" or dx.itemsize > 4 or acc.kind not in "iuf" or out.kind not in "iuf":
        return None
    largest = 1 if dx.kind == "b" else max(-int(np.iinfo(dx).min), int(np.iinfo(dx).max))
    bound = math.prod(src.shape[a] for a in op.axes) * largest
    return next((f for f, exact in _EXACT.items() if bound <= exact), None)


def _float_of(batch: Sequence[PendingResult]) -> np.dtype:
    """The float a joined pass of ``batch``'s sums runs in: the widest they need."""
    needed = [_float_needed(p) for p in batch]
    assert all(f is not None for f in needed)  # (`_can_join` joins only such sums)
    return max(cast(list[np.dtype], needed), key=lambda f: f.itemsize)


def _can_join(a: PendingResult, b: PendingResult) -> bool:
    (op_a, src_a, _), (op_b, src_b, _) = _joint(a), _joint(b)
    if (op_a.axes, op_a.keepdims) != (op_b.axes, op_b.keepdims):
        return False
    if tuple(src_a.shape) != tuple(src_b.shape) or _float_needed(b) is None:
        return False
    mine = {id(f) for f in leaves(src_a) if getattr(f, "on_disk", True)}
    return any(id(f) in mine for f in leaves(src_b))


def _joiners(p: PendingResult) -> list[PendingResult]:
    """The live pending sums that can share ``p``'s pass, oldest first."""
    if _float_needed(p) is None:
        return []
    live = sorted(_live, key=lambda q: q._order)
    joiners = [q for q in live if q is not p and q._file is None and _can_join(p, q)]
    if not joiners:
        return []
    # the joined result is held whole while each sum takes its slot: at most the
    # share of the budget that all results held in memory may take together
    f = _float_of([p, *joiners])
    room = int(_joint(p)[2].nbytes * TOTAL_SHARE) // (math.prod(p.shape) * f.itemsize)
    return joiners[: max(room - 1, 0)]


def _run_together(batch: list[PendingResult]) -> None:
    """One pass summing every source of ``batch``, each in its own slot of a new axis
    placed just before the summed ones (so each sum runs over contiguous values);
    each pending result adopts its slot, finished in its own dtype (`_finished`)."""

    f = _float_of(batch)
    op, first, budget = _joint(batch[0])
    sources = [_joint(p)[1] for p in batch]
    n, ndim = len(sources), len(first.shape)
    axes = sorted(a % ndim for a in op.axes)
    at = axes[0]  # the slot axis

    def slots(r: Region) -> range:
        return range(r[at].start, r[at].stop)

    def regions(r: Region) -> list[Region]:
        # a source whose slot lies outside the tile reads an empty box
        own = (*r[:at], *r[at + 1 :])
        nothing = (slice(0, 0), *own[1:])
        return [own if i in slots(r) else nothing for i in range(n)]

    def compute(blocks: list[Any]) -> tuple[np.ndarray]:
        wanted = [np.asarray(blocks[i], f) for i in slots(current_region())]
        return (np.stack(wanted, axis=at),)

    page = tuple(getattr(first, "page_shape", first.shape))
    node = Node("stack", sources, regions, compute, (*first.shape[:at], n, *first.shape[at:]))
    stacked = ChainFile(node, 0, f, (*page[:at], n, *page[at:]), budget.nbytes)
    stacked.grain = (*(1,) * at, n, *(1,) * (ndim - at))  # tiles keep every slot (`_grain`)
    settle(sources)
    joined = op.joined_sum(tuple(a + 1 for a in axes), f)
    values = cast(ArrayFile, Driver(budget, op.name).forward(joined, [stacked])).read(None)
    for i, p in enumerate(batch):
        p._adopt(_finished(p, np.take(values, i, axis=at)))


def _finished(p: PendingResult, total: np.ndarray) -> Any:
    """``p``'s result from its sum ``total`` (in the joined pass's float) as its own
    pass would finish it: in its accumulator's dtype (an exact integer wrapping into
    an integer one), then the sum's finishing step (a mean's division), then its
    dtype. Held in memory only while the held results stay within their share."""
    op, _, budget = _joint(p)
    _, acc, out_dtype = _dtypes(p)
    if acc.kind in "iu":  # an exact integer, wrapping into a narrower one as alone
        total = total.astype(np.int64)
    with np.errstate(all="ignore"):
        result = np.ascontiguousarray(op.finish(total.astype(acc)), out_dtype)
    held = hold_in_memory(result.nbytes, budget)
    out = result_file(p.shape, out_dtype, p.page_shape, held)
    out.write(None, result)
    return out.commit()


# ---------------------------------------------------------------- what waits


def deferred(
    op: Any,
    budget: MemoryBudget,
    values: Sequence[Any],
    out_type: Any,
    run: Callable[[], Any],
) -> PendingResult | None:
    """``op``'s output as a `PendingResult` computed by ``run()`` when first read, or
    None to compute it now: a small (held) output of a sum (``op.joins_passes``) or
    of a pass over a pending result; never on a cluster (its workers compute what
    they are sent), for a 0-d or in-memory result, or for a block map (a chain)."""

    shape = tuple(getattr(out_type, "shape", ()))
    if not shape or current_executor() is not None or not hasattr(op, "index_map"):
        return None
    if getattr(op, "fusable", False) or getattr(op, "in_memory_output", False):
        return None
    # a block map for these inputs is a step of a chain instead (`_fusion.fuse`),
    # unless it reads results that wait themselves: it waits with them, to join
    # their pass
    as_map = getattr(op, "as_block_map", None)
    waiting = any(getattr(type(v), "waits_to_be_read", False) for v in values)
    if as_map is not None and not waiting and as_map(values, budget) is not None:
        return None
    dtype = np.dtype(out_type.dtype)
    if not 0 < math.prod(shape) * dtype.itemsize <= budget.nbytes * SMALL_SHARE:
        return None
    arrays = [v for v in values if not isinstance(v, np.ndarray) and bool(getattr(v, "shape", ()))]
    waits = any(is_pending(f) for v in arrays for f in leaves(v))
    joins = getattr(op, "joins_passes", False) and len(arrays) == 1 and not waits
    if not (waits or joins):
        return None
    page = default_page_shape(shape, dtype.itemsize, budget)
    later = PendingResult(run, shape, dtype, page, (op, arrays[0], budget) if joins else None)
    for v in arrays:  # a write into what it reads computes it first: into the files
        for f in (v, *leaves(v)):  # under ``v``, or into ``v`` (a fused result, stored)
            watch(f, later)
    return later
