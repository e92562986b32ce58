"""Manipulations whose every output tile reads one box of the input.

`Flip` (a tile reads the mirrored box), `UnitAxes` (size-1 axes added or removed:
squeeze, expand_dims, and a reshape that only does that) and `BroadcastTo` (a
size-1 axis reads its one row). Each is a `BlockParallelOp`, so the driver plans
their tiles from the budget and reads ahead; the backward pass is the same move
in reverse (a broadcast's sums over the axes it broadcast along).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..arrays._op import BlockParallelOp, frozen
from ..kernels._promotion import to_primal_dtype
from ..storage._paged_file import Region
from ._blockwise import broadcast_region

__all__ = ["BroadcastTo", "Flip", "UnitAxes"]


@frozen
class Flip(BlockParallelOp):
    """``x`` reversed along ``axes`` (as `np.flip`)."""

    fusable = True

    axes: tuple[int, ...]

    @property
    def name(self) -> str:
        return "flip"

    def output_shape(self, s: tuple[int, ...]) -> tuple[int, ...]:
        return s

    def index_map(self, out_r: Region, red_r: Region, s: tuple[int, ...]) -> tuple[Region | None]:
        if not s:
            return (None,)
        region = list(out_r)
        for a in self.axes:
            r = out_r[a]
            region[a] = slice(s[a] - r.stop, s[a] - r.start)
        return (tuple(region),)

    def forward_block(self, x: np.ndarray) -> np.ndarray:
        return np.flip(x, self.axes).copy()

    def block_on(self, xp: Any, x: Any) -> Any:
        """The step on JAX arrays (`execution._one_pass`)."""
        return xp.flip(x, self.axes) if self.axes and np.ndim(x) else x

    def backward_block(self, g: np.ndarray, x: np.ndarray) -> tuple[np.ndarray]:
        return (np.flip(g, self.axes).copy(),)


@frozen
class UnitAxes(BlockParallelOp):
    """``x`` reshaped to ``out_shape``, which differs from its shape only by axes
    of size 1 (added or removed), so an output tile reads the one box of the same
    extents along the other axes."""

    fusable = True

    out_shape: tuple[int, ...]
    label: str = "reshape"

    @property
    def name(self) -> str:
        return self.label

    def output_shape(self, s: tuple[int, ...]) -> tuple[int, ...]:
        return self.out_shape

    def index_map(self, out_r: Region, red_r: Region, s: tuple[int, ...]) -> tuple[Region | None]:
        if not s:
            return (None,)
        kept = iter([r for r, n in zip(out_r, self.out_shape) if n != 1])
        return (tuple(slice(0, 1) if n == 1 else next(kept) for n in s),)

    def forward_block(
        self, x: np.ndarray
    ) -> np.ndarray:  # a 0-d output (tiles of others go to `forward_into`)
        return np.asarray(x).reshape(())

    def forward_into(self, out: np.ndarray, x: np.ndarray, accumulate: bool) -> None:
        out[...] = x.reshape(out.shape)

    def block_on(self, xp: Any, x: Any) -> Any:
        """The block's values, which `execution._one_pass` reshapes to the output's
        block (only axes of size 1 differ)."""
        return x

    def backward_block(self, g: np.ndarray, x: np.ndarray) -> tuple[np.ndarray]:
        return (np.asarray(g).reshape(x.shape),)


@frozen
class BroadcastTo(BlockParallelOp):
    """``x`` broadcast to ``out_shape`` (as `np.broadcast_to`, but a new array)."""

    fusable = True

    out_shape: tuple[int, ...]

    @property
    def name(self) -> str:
        return "broadcast_to"

    def output_shape(self, s: tuple[int, ...]) -> tuple[int, ...]:
        return self.out_shape

    def index_map(self, out_r: Region, red_r: Region, s: tuple[int, ...]) -> tuple[Region | None]:
        return (broadcast_region(out_r, s),)

    def forward_block(
        self, x: np.ndarray
    ) -> np.ndarray:  # a 0-d output (tiles of others go to `forward_into`)
        return np.asarray(x).reshape(())

    def forward_into(self, out: np.ndarray, x: np.ndarray, accumulate: bool) -> None:
        out[...] = x

    def block_on(self, xp: Any, x: Any) -> Any:
        """The block's values, which `execution._one_pass` broadcasts to the output's
        block."""
        return x

    def backward_block(self, g: np.ndarray, x: np.ndarray) -> tuple[np.ndarray]:
        g = np.asarray(g)
        lead = g.ndim - x.ndim
        spread = tuple(lead + a for a, n in enumerate(x.shape) if n == 1 and g.shape[lead + a] != 1)
        g = g.sum(axis=tuple(range(lead)) + spread, keepdims=True) if lead or spread else g
        return (to_primal_dtype(g.reshape(x.shape), x.dtype),)
