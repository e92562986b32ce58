"""A sum's tiles folded on the device that computed them, brought back once a pass.

Bringing a tile's results back to the host waits for them, behind the transfers
queued before them. So a device's pass adds each tile's gradients to the sums of
the tiles before it there (JAX queues the addition behind the tile's program),
keeps each tile's share of the loss there, and brings everything back when the
pass ends, together: the host then adds the shares in the loss's own type, in tile
order, as it adds those it computes itself (the same additions in the same order:
the same loss and gradients as tiles brought back one by one). Measured on a TPU
v5e over 2 GiB in 128 MiB tiles: the pass's waits for the tiles' results went from
12-17 ms a step to 4-5 ms, and back from the chip came 1.1 KiB instead of 16 KiB
for least squares, 68 KiB instead of 1.1 MiB for an MLP.

Tiles fold together only where their gradients go to the same places (the same
uses of the same operands over the same regions, as in a training step where each
tile reads every parameter whole); a tile whose gradients go elsewhere starts a sum
of its own.
"""

from __future__ import annotations

import functools
from typing import Any

import jax

from ._tile_program import Launched

__all__ = ["DeviceSums"]


@functools.lru_cache(maxsize=1)
def _add() -> Any:
    return jax.jit(lambda a, b: [x + y for x, y in zip(a, b)])


class _Group:
    """Tiles whose gradients go to the same places: their shares of the loss, their
    gradients' sums (on the device) and the first program of theirs that failed."""

    __slots__ = ("failed", "grads", "shares", "uses")

    def __init__(self, uses: Any) -> None:
        self.uses = uses
        self.shares: list[Any] = []
        self.grads: list[Any] | None = None
        self.failed: Launched | None = None


class DeviceSums:
    """The tiles of one device's pass, grouped by where their gradients go."""

    def __init__(self) -> None:
        self._groups: dict[Any, _Group] = {}

    def add(self, key: Any, uses: Any, work: Launched) -> None:
        """Fold a tile's program (``key``: where its gradients go) into its group
        without waiting for it; a program that failed raises at `results`."""
        group = self._groups.get(key)
        if group is None:
            group = self._groups[key] = _Group(uses)
        outs, error, x64 = work.queued()
        if group.failed is not None:
            return
        if error is not None:
            group.failed = work
            return
        group.shares.append(outs[0])
        if group.grads is None:
            group.grads = list(outs[1:])
        else:
            with jax.enable_x64(x64):  # (as its program ran)
                group.grads = _add()(group.grads, list(outs[1:]))

    def results(self) -> list[tuple[Any, list[Any], list[Any]]]:
        """Each group's uses, its tiles' shares of the loss in tile order and its
        gradients' sums, brought back together; raises what a failed program
        raised."""
        groups = list(self._groups.values())
        self._groups.clear()
        for group in groups:
            if group.failed is not None:
                group.failed.result()  # raises its error
        back = jax.device_get([(g.shares, g.grads or []) for g in groups])
        return [(g.uses, list(s), list(gr)) for g, (s, gr) in zip(groups, back)]
