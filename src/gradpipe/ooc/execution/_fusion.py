"""When a pass makes a chain instead of a file: the `Driver`'s fusion decisions.

A block map (``fusable``, no reduction axes) that reads no more than it makes runs
forward as a `ChainFile` computed when read (`fuse`); a fused backward pass makes
one chain per gradient (`fuse_map`); a take by rows in runs reads its source
through (`pick`). Chains grown too deep, or too deep for their budget, have their
chain inputs written first (`MAX_DEPTH`, `too_deep`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

import numpy as np
from numpy.typing import DTypeLike

from ..planning import _stages
from ..planning._budget import MemoryBudget, default_page_shape
from ..planning._chain import (
    MAX_DEPTH,
    MAX_READ_FACTOR,
    ChainFile,
    deeper_than,
    is_chain,
    too_deep,
)
from ..planning._chain_stats import read_factor
from ..storage._paged_file import Region
from ._executor import current_executor

__all__ = ["fuse", "fuse_map", "pick"]


class _Fusing(Protocol):
    """What the fusion decisions ask of the `Driver`: its budget, and ``store``."""

    budget: MemoryBudget

    def store(self, chain: Any) -> Any: ...


def _page_like(
    inputs: Sequence[Any], shape: tuple[int, ...], itemsize: int, budget: MemoryBudget
) -> tuple[int, ...]:
    """A chain's page shape: its first same-shaped input's, else the default."""
    for v in inputs:
        page = getattr(v, "page_shape", None)
        if page and tuple(v.shape) == tuple(shape):
            return tuple(page)
    return default_page_shape(tuple(shape), itemsize, budget)


def fuse(driver: _Fusing, op: Any, inputs: Sequence[Any]) -> ChainFile | None:
    """``op``'s output as a chain computed on read, when ``op`` is a block map
    (``fusable``, no reduction axes) that reads no more than it makes; else None.

    An operation that is a block map for some inputs only (a product with an
    in-memory operand: `ops._resident_product`) says so by ``as_block_map``."""
    as_map = getattr(op, "as_block_map", None)
    if as_map is not None and current_executor() is None:
        op = as_map(inputs, driver.budget) or op
    if not getattr(op, "fusable", False):
        return None
    shapes = [tuple(v.shape) for v in inputs]
    out_shape = tuple(op.output_shape(*shapes))
    if not out_shape or 0 in out_shape or op.reduction_shape(*shapes):
        return None
    if read_factor(op, shapes, out_shape) > MAX_READ_FACTOR and not getattr(
        op, "reads_each_row_once", False
    ):
        return None
    for v in inputs:
        if is_chain(v) and deeper_than(v, MAX_DEPTH):
            v.store(driver)
    dtype = np.dtype(op.output_dtype(*[v.dtype for v in inputs]))
    page = _page_like(inputs, out_shape, dtype.itemsize, driver.budget)
    _stages.fused()
    chain = ChainFile.forward(op, list(inputs), out_shape, dtype, page, driver.budget.nbytes)
    wants = getattr(driver, "differentiated", None)
    if wants is not None and len(wants) == len(inputs):
        chain.node.differentiated = wants  # type: ignore[union-attr]
    _cut(driver, [chain], inputs)
    return chain


def pick(driver: _Fusing, op: Any, inputs: Sequence[Any]) -> ChainFile | None:
    """``op``'s output as rows of its input read through (`PickedRows`), when
    ``op`` offers it (``op.picked_rows``: a take along one axis by an index in
    memory that names rows in runs); else None. A cluster's passes gather into
    files (their tasks take files, not chains over other processes' arrays)."""
    picked_rows = getattr(op, "picked_rows", None)
    if picked_rows is None or current_executor() is not None:
        return None
    rows = picked_rows(driver, inputs)
    if rows is None:
        return None
    _stages.fused()
    return ChainFile.picking(rows, driver.budget.nbytes)


def _cut(driver: _Fusing, chains: Sequence[ChainFile], sources: Sequence[Any]) -> None:
    """Write the chain ``sources`` of new ``chains`` that are too deep for their
    budget (`too_deep`): the new chains then read them as stored inputs."""
    if any(too_deep(c) for c in chains):
        for v in sources:
            if is_chain(v):
                v.store(driver)


def fuse_map(
    driver: _Fusing,
    label: str,
    sources: Sequence[Any],
    regions: Callable[[Region], Sequence[Region | None]],
    compute: Callable[[list[Any]], Sequence[np.ndarray]],
    shape: tuple[int, ...],
    dtypes: Sequence[DTypeLike],
) -> list[ChainFile]:
    """Chains computed on read by one block function (a fused backward pass):
    ``compute(blocks)`` gives one block per entry of ``dtypes`` for an output
    region, from the ``regions(out_region)`` of ``sources``."""
    for v in sources:
        if is_chain(v) and deeper_than(v, MAX_DEPTH):
            v.store(driver)
    page = _page_like(sources, shape, max(np.dtype(d).itemsize for d in dtypes), driver.budget)
    _stages.fused()
    chains = ChainFile.gradients(
        label, sources, regions, compute, shape, dtypes, page, driver.budget.nbytes
    )
    _cut(driver, chains, sources)
    return chains
