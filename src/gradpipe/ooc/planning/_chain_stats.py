"""What one read through a chain holds and costs: the statistics the cost rule uses.

`Stats` walks the graph behind a `ChainFile` (`_chain_graph`) once: the nodes and
stored inputs it reads more than once, its depth, the bytes one read holds and the
bytes it reads and computes per output element. A chain caches its `Stats` until
any chain is stored (`note_stored`): a stored chain inside the graph is a leaf now.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

from ..storage._paged_file import Region
from ._chain_graph import Node, computed_on_read, depth, generation, is_chain_file, note_stored

__all__ = ["SUB_BYTES", "Stats", "generation", "note_stored", "piece_bytes", "read_factor"]

#: The size of the pieces a chain runs on within one read (its intermediates).
SUB_BYTES = 512 * 2**10


class _Chain(Protocol):
    """What `Stats` asks of the chain it describes (a `ChainFile`)."""

    node: Node | None
    dtype: np.dtype
    budget_bytes: int


def _elements(region: Region | None) -> int:
    return 1 if region is None else math.prod(max(s.stop - s.start, 0) for s in region)


class Stats:
    """The graph behind a chain: shared parts, depth, peak bytes and cost per element.

    Sizes are per output element: a source read over a region k times the output
    tile (a strided slice) counts k times its itemsize; a 0-d source nothing.
    """

    def __init__(self, top: _Chain) -> None:
        self.node = top.node
        self.generation = generation()
        uses: dict[int, int] = {}
        order: list[tuple[str, Any, Any, float]] = []
        self._visit(top, 1.0, uses, order)
        self.shared = {k for k, n in uses.items() if n > 1}
        self.leaves = [(leaf, factor) for kind, leaf, _, factor in order if kind == "leaf"]
        self.steps = [(node.label, factor) for kind, node, _, factor in order if kind == "node"]
        # a read holds its stored inputs' blocks and its output block; the chain's
        # intermediates are piece-sized (`SUB_BYTES` each, at most one per step)
        self.max_itemsize: int = max((f.dtype.itemsize for _, _, f, _ in order), default=1)
        # (a leaf read through another array, `PickedRows`, holds two buffers)
        self.peak = top.dtype.itemsize + sum(
            leaf.dtype.itemsize * factor * getattr(leaf, "buffers", 1)
            for kind, leaf, _, factor in order
            if kind == "leaf" and getattr(leaf, "on_disk", True)
        )
        steps = sum(kind == "node" for kind, *_ in order)
        self.piece_bytes = piece_bytes(top.budget_bytes, steps)
        self.fixed = 2 * self.piece_bytes * (1 + steps)
        self.leaf_bytes = sum(  # (`PickedRows` reads a share of what it gives)
            leaf.dtype.itemsize * factor * getattr(leaf, "read_share", 1.0)
            for leaf, factor in self.leaves
            if getattr(leaf, "on_disk", True)
        )
        self.recompute = self.leaf_bytes + sum(
            f.dtype.itemsize * factor for kind, _, f, factor in order if kind == "node"
        )
        self.depth = depth(top)

    @staticmethod
    def _visit(
        f: Any, factor: float, uses: dict[int, int], order: list[tuple[str, Any, Any, float]]
    ) -> None:
        """Count uses of each node and stored input below ``f``; list them in
        evaluation order (a method, not a closure: no reference cycle keeps files)."""
        if computed_on_read(f):
            node = f.node
            uses[id(node)] = uses.get(id(node), 0) + 1
            if uses[id(node)] > 1:
                return
            for s, k in zip(node.sources, _factors(node)):
                Stats._visit(s, factor * k, uses, order)
            order.append(("node", node, f, factor))
        elif not isinstance(f, np.ndarray) and f.shape:
            leaf = f.stored if is_chain_file(f) else f
            uses[id(leaf)] = uses.get(id(leaf), 0) + 1
            if uses[id(leaf)] == 1:
                order.append(("leaf", leaf, f, factor))


def piece_bytes(budget_bytes: int, steps: int) -> int:
    """The size of a chain's pieces: small enough that all of one read's (its
    intermediates, one a step) take a sixteenth of the budget."""
    return max(16, min(SUB_BYTES, budget_bytes // (32 * (1 + steps))))


def _factors(node: Node) -> list[float]:
    """How much larger than the output tile each source region is (a probe tile),
    found once a node (a chain's statistics are found again for each chain above it)."""
    if node.probe_factors is None:
        node.probe_factors = _probe_factors(node)
    return node.probe_factors


def _probe_factors(node: Node) -> list[float]:
    probe = tuple(slice(0, min(n, 64)) for n in node.out_shape)
    n_out = max(_elements(probe), 1)
    factors = []
    for s, r in zip(node.sources, node.regions(probe)):
        if r is None or isinstance(s, np.ndarray):
            factors.append(0.0)
        else:
            factors.append(_elements(r) / n_out)
    return factors


def read_factor(op: Any, shapes: Sequence[tuple[int, ...]], out_shape: tuple[int, ...]) -> float:
    """The largest source-to-output size ratio of block map ``op`` (a probe tile)."""
    probe = tuple(slice(0, min(n, 64)) for n in out_shape)
    n_out = max(_elements(probe), 1)
    ratios = [_elements(r) / n_out for r in op.index_map(probe, (), *shapes) if r is not None]
    return max(ratios, default=0.0)
