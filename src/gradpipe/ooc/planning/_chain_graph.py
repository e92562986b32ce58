"""The graph behind a chain: its nodes, the arrays it reads, its depth and formula.

A `ChainFile` (`_chain`) not yet stored holds a `Node`: one block map applied to
its sources, which are files, 0-d values or other chains. The walks here follow
those sources down to the stored arrays (`leaves`), count the steps on the longest
path (`depth`) and write the graph as a formula (`describe`). They know a chain by
its class's ``is_chain_file`` flag (`is_chain_file`), not by the class itself, so
that the chain's own module can build on them.
"""

from __future__ import annotations

import itertools
import threading
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import numpy as np
from numpy.typing import DTypeLike

from ..storage._paged_file import Region
from ..storage._picked_rows import PickedRows

__all__ = [
    "Node",
    "Unread",
    "computed_on_read",
    "depth",
    "describe",
    "generation",
    "is_chain_file",
    "leaves",
    "note_stored",
    "resident_leaves",
]

# chains stored so far: what is kept about a graph older than the last store is
# found again (a stored chain inside it is a leaf now)
_stored_count = [0]


def generation() -> int:
    """How many chains have been stored so far."""
    return _stored_count[0]


def note_stored() -> None:
    """Count one more stored chain (what is kept about older graphs is found again)."""
    with _memo_lock:
        _stored_count[0] += 1
        _leaves_memo.clear()
        _resident_memo.clear()


# each chain's leaves since the last store (`leaves`): let go of at every store, so
# that a stored chain's old leaves are not kept alive through the chains above it
_leaves_memo: weakref.WeakKeyDictionary[Any, tuple[Any, ...]] = weakref.WeakKeyDictionary()
_resident_memo: weakref.WeakKeyDictionary[Any, tuple[Any, ...]] = weakref.WeakKeyDictionary()
_memo_lock = threading.Lock()


class Node:
    """One block map applied to its sources; ``outputs`` ChainFiles share it.

    ``compute(blocks)`` returns one block per output; ``regions(out_region)`` names
    the region of each source that an output region needs. ``jax``, where set, is
    the same step on any array namespace, ``jax(xp, *blocks)`` (a JAX program of a
    whole graph is made from it: `execution._one_pass`); a step that only moves
    values (a reshape, a broadcast) may give its block's values in another shape
    of as many elements, or its input to be broadcast. ``stops_gradient``: the step
    is `jax.lax.stop_gradient` (no cotangent flows through it); ``differentiated``,
    where known, which sources JAX differentiates.
    """

    __slots__ = (
        "__weakref__",
        "compute",
        "differentiated",
        "jax",
        "label",
        "n_outputs",
        "out_shape",
        "probe_factors",
        "regions",
        "sources",
        "stops_gradient",
    )

    def __init__(
        self,
        label: str,
        sources: Iterable[Any],
        regions: Callable[[Region], Sequence[Region | None]],
        compute: Callable[[list[Any]], Sequence[np.ndarray]],
        out_shape: Sequence[int],
        n_outputs: int = 1,
    ) -> None:
        self.label = label
        self.n_outputs = n_outputs
        self.sources = list(sources)
        self.regions = regions
        self.compute = compute
        self.out_shape = tuple(out_shape)
        self.jax: Callable[..., Any] | None = None
        self.stops_gradient = False
        self.differentiated: tuple[bool, ...] | None = None
        #: how much larger than a probe output tile each source's region is
        #: (`_chain_stats`), found once
        self.probe_factors: list[float] | None = None


class Unread:
    """A stand-in source a chain's step never reads (the VJP of ``a - b`` needs
    neither ``a`` nor ``b``): zeros of the right shape and dtype, computed from
    nothing, so the chain below it is not evaluated."""

    on_disk = False

    def __init__(self, shape: Sequence[int], dtype: DTypeLike) -> None:
        self.shape, self.dtype = tuple(shape), np.dtype(dtype)

    def read(self, region: Region | None = None, out: np.ndarray | None = None) -> np.ndarray:
        shape = self.shape if region is None else tuple(s.stop - s.start for s in region)
        return np.broadcast_to(np.zeros((), self.dtype), shape)


def is_chain_file(f: Any) -> bool:
    """Whether ``f`` is a `ChainFile`, stored or not (asked of its class: a
    `PendingResult` answers an unknown attribute by computing itself)."""
    return getattr(type(f), "is_chain_file", False)


def computed_on_read(f: Any) -> bool:
    """Whether ``f`` is a chain still computed on read."""
    return is_chain_file(f) and f.stored is None


def depth(f: Any) -> int:
    """The number of steps on the longest path from ``f`` down to a stored array."""
    best, stack = 0, [(f, 1)]
    depth_of: dict[int, int] = {}
    while stack:
        g, d = stack.pop()
        if not computed_on_read(g):
            continue
        node = g.node
        if depth_of.get(id(node), 0) >= d:
            continue
        depth_of[id(node)] = d
        best = max(best, d)
        stack.extend((s, d + 1) for s in node.sources)
    return best


def describe(f: Any, name_leaf: Callable[[Any], str] | None = None) -> str:
    """The chain behind ``f`` as a formula, ``exp(multiply(tanh(x0), 0.5))``; stored
    arrays are named by ``name_leaf(file)`` (default ``x0``, ``x1``, ... in order)."""
    if name_leaf is None:
        names: dict[int, str] = {}
        counter = itertools.count()

        def name_leaf(leaf: Any) -> str:
            if id(leaf) not in names:
                names[id(leaf)] = f"x{next(counter)}"
            return names[id(leaf)]

    return _formula(f, name_leaf)


def leaves(f: Any) -> list[Any]:
    """The arrays behind ``f``: the stored files and in-memory operands a chain
    reads, or ``[f]`` for a stored array (none for a 0-d value). A chain's are kept
    until any chain is stored: a step asks for them of the same chains several
    times (to settle pending results, to size its budget)."""
    if not computed_on_read(f):
        return _leaves(f)
    got = _leaves_memo.get(f)
    if got is not None:
        return list(got)
    count = _stored_count[0]
    out = _leaves(f)
    with _memo_lock:
        if count == _stored_count[0]:  # (no store meanwhile: the walk saw this graph)
            _leaves_memo[f] = tuple(out)
    return out


def resident_leaves(f: Any) -> tuple[Any, ...]:
    """The in-memory operands behind ``f``, each once, in no set order: what a pass
    over ``f`` holds in memory beside its tiles. Kept for each chain as its leaves
    are (`leaves`) and found from those kept for the chains it reads: a step of
    many operations, each sizing its budget by its inputs', walks each part of its
    graph once rather than once an operation."""
    chain = computed_on_read(f)
    got = _resident_memo.get(f) if chain else None
    if got is not None:
        return got
    count = _stored_count[0]
    found = {id(g): g for g in _walk(f, _resident_memo) if getattr(g, "resident", False)}
    out = tuple(found.values())
    if chain:
        with _memo_lock:
            if count == _stored_count[0]:  # (no store meanwhile: the walk saw this graph)
                _resident_memo[f] = out
    return out


def _leaves(f: Any) -> list[Any]:
    return list(_walk(f))


def _walk(
    f: Any, kept: weakref.WeakKeyDictionary[Any, tuple[Any, ...]] | None = None
) -> Iterator[Any]:
    """The arrays behind ``f`` in the order a depth-first walk meets them, each path
    once; a chain read through that has an entry in ``kept`` gives that entry's
    instead of its own walk."""
    stack, seen = [f], set()
    while stack:
        g = stack.pop()
        if isinstance(g, (np.ndarray, Unread)) or id(g) in seen:
            continue
        seen.add(id(g))
        if computed_on_read(g):
            got = kept.get(g) if kept is not None else None
            if got is not None:
                yield from got
            elif g.node is not None:
                stack.extend(g.node.sources)
            continue
        leaf = g.stored if is_chain_file(g) else g
        if isinstance(leaf, PickedRows):
            stack.append(leaf.source)  # read through: its source is what is read
        else:
            yield leaf


def _formula(g: Any, name_leaf: Callable[[Any], str]) -> str:
    if isinstance(g, np.ndarray):
        return str(g) if g.size == 1 else f"array{list(g.shape)}"
    node = g.node if computed_on_read(g) else None
    if node is not None:
        text = f"{node.label}({', '.join(_formula(s, name_leaf) for s in node.sources)})"
        return f"{text}[{g.index}]" if getattr(node, "n_outputs", 1) > 1 else text
    if isinstance(g, Unread):
        return "_"
    leaf = g.stored if is_chain_file(g) else g
    if isinstance(leaf, PickedRows):
        return leaf.formula(lambda f: _formula(f, name_leaf))
    return name_leaf(leaf)
