"""A product with an in-memory operand, computed row by row: a block map.

``X @ w`` with ``w`` a JAX parameter and ``X`` on disk sums over ``X``'s last axis
only. When that axis is short enough that a tile holds whole rows of ``X``, each
output tile is a function of ``X``'s rows over the same tile and of ``w``, whole:
the product is a block map like ``tanh``, and fuses with the steps around it
(`execution._fusion`). ``mean(square(X @ w + b - y))`` then reads ``X`` once, and
its pass can compute its gradient too (`execution._one_pass`); written as a pass of
its own, the product would be a file the loss reads back.

`ResidentProduct` is that view of a `Contraction`; `as_block_map` says when it
applies: one operand is resident (`planning._resident`), the other is an array
file or a chain, nothing is summed in one operand alone, and the summed extent of
the one on disk takes at most `MAX_ROW_SHARE` of the budget.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..planning._budget import MemoryBudget
from ..planning._resident import is_resident
from ..storage._paged_file import Region
from ._contraction_in_memory import _contract_in_memory
from ._contraction_labels import _analyse, _label_sizes

__all__ = ["MAX_ROW_SHARE", "ResidentProduct", "as_block_map"]

#: The largest share of the budget one output row's summed extent of the operand on
#: disk may take (a tile holds whole rows of it, and several rows at once).
MAX_ROW_SHARE = 1 / 64


@dataclasses.dataclass(frozen=True)
class ResidentProduct:
    """``product`` (a `Contraction`) as a block map: an output tile reads the other
    operand's rows over the whole summed extent, and the resident operand whole."""

    product: Any

    fusable = True
    #: its input regions are larger than its output tile by the summed extent, but
    #: each is read once over (`_fusion.fuse` asks)
    reads_each_row_once = True

    @property
    def name(self) -> str:
        return str(self.product.label)

    def output_shape(self, sa: tuple[int, ...], sb: tuple[int, ...]) -> tuple[int, ...]:
        return tuple(self.product.output_shape(sa, sb))

    def reduction_shape(self, *shapes: tuple[int, ...]) -> tuple[int, ...]:
        return ()

    def output_dtype(self, da: np.dtype, db: np.dtype) -> np.dtype:
        return np.dtype(self.product.output_dtype(da, db))

    def thin_axes(self, *shapes: tuple[int, ...]) -> tuple[int, ...]:
        return ()

    def index_map(
        self, out_r: Region, red_r: Region, sa: tuple[int, ...], sb: tuple[int, ...]
    ) -> tuple[Region | None, Region | None]:
        whole = tuple(slice(0, n) for n in self.product.reduction_shape(sa, sb))
        return tuple(self.product.index_map(out_r, whole, sa, sb))

    def forward_block(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return np.asarray(self.product.forward_block(a, b))

    def block_on(self, xp: Any, a: Any, b: Any) -> Any:
        """The product on JAX arrays (``xp`` is ``jax.numpy``: `execution._one_pass`)."""
        p = self.product
        dtype = self.output_dtype(np.dtype(a.dtype), np.dtype(b.dtype))
        return _contract_in_memory(p.a_labels, p.b_labels, p.out_labels, p.conj, a, b, dtype)


def as_block_map(op: Any, inputs: Sequence[Any], budget: MemoryBudget) -> ResidentProduct | None:
    """``op`` (a `Contraction`) as a `ResidentProduct` for ``inputs``, or None where
    it is not one: see the module's docstring."""
    if getattr(op, "in_memory_output", False) or len(inputs) != 2:
        return None
    resident = [is_resident(v) for v in inputs]
    if sum(resident) != 1 or any(isinstance(v, np.ndarray) for v in inputs):
        return None
    info = _analyse(op)
    if info.lone_a or info.lone_b:
        return None
    disk = inputs[resident.index(False)]
    labels = op.a_labels if resident[1] else op.b_labels
    sizes = _label_sizes(op, tuple(inputs[0].shape), tuple(inputs[1].shape))
    summed = math.prod(sizes[lab] for lab in info.reduced if lab in labels)
    if not disk.shape or summed * np.dtype(disk.dtype).itemsize > budget.nbytes * MAX_ROW_SHARE:
        return None
    return ResidentProduct(op)
