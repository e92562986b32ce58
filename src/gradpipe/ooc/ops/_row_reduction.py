"""A reduction over short axes of a chain that reads JAX parameters: a block map.

A model applied to rows reduces each row before the loss does: the log-sum-exp of
a row's logits, the row's maximum, a per-row weighted sum. When the reduced axes
are short enough that a tile holds them whole, each output tile is a function of
the input over the same tile and those whole axes: the reduction is a block map,
fused with the steps around it (`execution._fusion`), so the loss over it reads
the data once and its pass can compute its gradient (`execution._one_pass`).

Only a chain that reads an in-memory operand (a JAX parameter: what a training
step differentiates) is reduced so. A reduction of stored data keeps its own pass,
where small results of several sums share one read (`execution._pending`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..planning._budget import MemoryBudget
from ..planning._chain import is_chain
from ..planning._chain_graph import resident_leaves
from ..storage._paged_file import Region
from ._resident_product import MAX_ROW_SHARE

__all__ = ["RowReduction", "as_block_map"]


@dataclasses.dataclass(frozen=True)
class RowReduction:
    """``reduction`` (a `Sum`, `Mean`, `Max` or `Min` over some axes: its class names
    its JAX form, ``row_kind``) as a block map: an output tile reads its input over
    the whole reduced axes."""

    reduction: Any

    fusable = True
    reads_each_row_once = True  # `_fusion.fuse`: its input regions are larger, read once

    @property
    def name(self) -> str:
        return str(self.reduction.name)

    def output_shape(self, s: tuple[int, ...]) -> tuple[int, ...]:
        return tuple(self.reduction.output_shape(s))

    def reduction_shape(self, *shapes: tuple[int, ...]) -> tuple[int, ...]:
        return ()

    def output_dtype(self, dx: np.dtype) -> np.dtype:
        return np.dtype(self.reduction.output_dtype(dx))

    def thin_axes(self, *shapes: tuple[int, ...]) -> tuple[int, ...]:
        return ()

    def index_map(self, out_r: Region, red_r: Region, s: tuple[int, ...]) -> tuple[Region | None]:
        whole = tuple(slice(0, n) for n in self.reduction.reduction_shape(s))
        return (self.reduction.index_map(out_r, whole, s)[0],)

    def forward_block(self, x: np.ndarray) -> np.ndarray:
        r = self.reduction
        out = r.forward_block(x)
        finish = getattr(r, "finish", None)
        if finish is not None:
            out = finish(out)
        return np.asarray(out, self.output_dtype(x.dtype))

    def block_on(self, xp: Any, x: Any) -> Any:
        """The reduction on JAX arrays (``xp`` is ``jax.numpy``: `execution._one_pass`)."""
        r = self.reduction
        kind = type(r).row_kind
        if kind in ("sum", "mean"):
            acc = np.dtype(r.accumulator_dtype(np.dtype(x.dtype)))
            out = xp.sum(x, axis=r.axes, keepdims=r.keepdims, dtype=acc)
            return out / r.count if kind == "mean" else out
        return getattr(xp, kind)(x, axis=r.axes, keepdims=r.keepdims)


def as_block_map(op: Any, inputs: Sequence[Any], budget: MemoryBudget) -> RowReduction | None:
    """``op`` as a `RowReduction` for ``inputs``, or None: see the module's docstring."""
    # asked of the class itself: a subclass computing otherwise does not inherit it
    if "row_kind" not in type(op).__dict__ or len(inputs) != 1:
        return None
    (x,) = inputs
    if not is_chain(x) or not resident_leaves(x):
        return None
    shape = tuple(x.shape)
    if len(op.axes) == len(shape):  # a full reduction: a loss, computed by its own pass
        return None
    extent = math.prod(shape[a] for a in op.axes)
    if extent == 0 or extent * np.dtype(x.dtype).itemsize > budget.nbytes * MAX_ROW_SHARE:
        return None
    return RowReduction(op)
