"""The tiles of a loss's pass between their start and their fold (`_one_pass`).

A tile's pieces run on the host's pool or are queued on a device; a tile stays
queued while its programs may still read its views (then its views are released),
and waits to be folded until later tiles have run (on a device, its results come
back behind the transfers queued before them). A sum's pass on a device folds its
tiles there (`_device_sums`) and brings them back once, at the end, or leaves them
there, its last tiles still running (`leave_running`).
"""

from __future__ import annotations

import dataclasses
from collections import deque
from concurrent.futures import Future, wait
from typing import Any, TypeGuard

import numpy as np

from ..planning._chain_read import Evaluation, region_key
from ..planning._stages import Where
from ..storage._page_layout import is_whole
from ._device_sums import DeviceSums
from ._loss_record import Fold, Record
from ._tile_program import Launched, Tile

__all__ = ["NO_DERIVATIVE", "Flow", "Pieces", "fold_tile", "settle_pieces"]

NO_DERIVATIVE = "JAX has no derivative of one of its steps ({})"

#: A tile's pieces and their programs, running: on the host's pool, or queued on
#: a device.
Pieces = list[tuple[Tile, "Future[list[np.ndarray]] | Launched"]]


def settle_pieces(running: Pieces) -> None:
    """Wait until every piece's program has run (they read the tile's views)."""
    wait([work for _, work in running if isinstance(work, Future)])
    for _, work in running:
        if isinstance(work, Launched):
            work.settle()


def fold_tile(
    running: Pieces, fold: Fold, record: Record, where: Where | None, sums: DeviceSums | None
) -> str | None:
    """Fold a tile's pieces into the loss and its gradients, writing a stored
    array's gradient. Why not, where JAX has no derivative of a step. ``where``: a
    device's pass, counting what came back; ``sums``: a sum's pass on a device,
    where the pieces `_folds_there` says are folded."""
    for tile, work in running:
        if sums is not None and _folds_there(work, tile):
            sums.add(tuple((id(c), pos, region_key(r)) for c, pos, r in tile.uses), tile.uses, work)
            continue
        try:
            outs = work.result()
        except NotImplementedError as e:  # a step JAX cannot differentiate:
            return NO_DERIVATIVE.format(e)
        if where is not None:
            where.from_device += sum(np.asarray(o).nbytes for o in outs)
        fold.add(tile.uses, outs)
        for d, grad in zip(tile.data, outs[1 + len(tile.uses) :]):
            record.gradient_of(d).write(tile.region, np.asarray(grad, d.dtype))
    return None


def _folds_there(work: Any, tile: Tile) -> TypeGuard[Launched]:
    """Whether a piece is folded on its device (`_device_sums`): its program was
    launched, it writes no stored array's gradient and it reads each in-memory
    operand whole."""
    if not isinstance(work, Launched) or work.queued()[1] is not None or tile.data:
        return False
    for c, pos, r in tile.uses:
        shape = c.node.sources[pos].shape  # type: ignore[union-attr]
        if not is_whole(r, shape):
            return False
    return True


@dataclasses.dataclass
class Flow:
    """The tiles of a pass between their start and their fold: ``queue``, those
    whose programs may still read their views (``ran``: how many pieces of the
    oldest have run); ``folding``, those run whose results are not yet read (on a
    device, read only once ``lag`` more have run)."""

    fold: Fold
    record: Record
    where: Where | None  # a device's pass: counts what comes back
    bar: Any
    sums: DeviceSums | None = None  # a sum's pass on a device: folded there
    by_piece: bool = False  # each piece's views released once its program ran
    queue: deque[tuple[Evaluation, Pieces]] = dataclasses.field(default_factory=deque)
    folding: deque[Pieces] = dataclasses.field(default_factory=deque)
    ran: int = 0

    def start(self, ev: Evaluation) -> Pieces:
        running: Pieces = []
        self.queue.append((ev, running))
        return running

    def queued(self) -> int:
        """The pieces queued whose programs may not have run yet."""
        return sum(len(running) for _, running in self.queue) - self.ran

    def holds_buffers(self) -> bool:
        """Whether a queued tile holds blocks of its own memory (`Evaluation`)."""
        return any(ev.holds_buffers() for ev, _ in self.queue)

    def _over(self, ahead: int, tiles: int | None) -> bool:
        return self.queued() > ahead or (tiles is not None and len(self.queue) > tiles)

    def advance(self, ahead: int, lag: int, tiles: int | None = None) -> str | None:
        """Wait for the oldest pieces' programs until at most ``ahead`` pieces (and
        ``tiles`` tiles, where given) are queued, retiring each tile all of whose
        pieces ran (its views released), and fold retired tiles until at most
        ``lag`` wait; why not, as `fold_tile`. (The newest tile, its pieces still
        being started, is never retired while ``ahead`` leaves one of them queued.)"""
        while self._over(ahead, tiles) or len(self.folding) > lag:
            if self._over(ahead, tiles):
                ev, running = self.queue[0]
                if self.ran < len(running):  # (its programs read the tile's views)
                    settle_pieces(running[self.ran : self.ran + 1])
                    if self.by_piece:
                        running[self.ran][0].release_views()
                    self.ran += 1
                if self.ran == len(running):
                    self.queue.popleft()
                    self.ran = 0
                    ev.release()
                    self.folding.append(running)
            elif len(self.folding) > lag:
                why = fold_tile(
                    self.folding.popleft(), self.fold, self.record, self.where, self.sums
                )
                if why is not None:
                    return why
                if self.bar is not None:
                    self.bar.update(1)
        return None

    def leave_running(self, op: Any) -> tuple[Any, list[tuple[Evaluation, Pieces]]] | None:
        """End a sum's pass on a device without waiting for its last tiles: every
        tile not yet folded is folded there, the loss added up and finished there
        (`DeviceSums.total`: divided by the reduction ``op``'s divisor) and
        the gradients recorded; returns
        the loss (a JAX array the device computes) and the tiles still running
        (`_running_tails`). None where a tile is not folded there (then the pass
        waits for them: `advance` to none, `drain`)."""
        left = [*self.folding, *(running for _, running in self.queue)]
        if self.sums is None or not self.sums.adds_up or not hasattr(op, "divisor"):
            return None
        if not left and not self.sums.folded:  # (a pass of no tile)
            return None
        if not all(_folds_there(work, tile) for running in left for tile, work in running):
            return None
        for running in left:  # (folded there: nothing waited for)
            fold_tile(running, self.fold, self.record, self.where, self.sums)
            if self.bar is not None:
                self.bar.update(1)
        # (the oldest tile's first ``ran`` pieces ran: their views are released)
        tiles = [
            (ev, running[self.ran :] if k == 0 else running)
            for k, (ev, running) in enumerate(self.queue)
        ]
        # (added up before the tiles leave the queue: where that fails, `abandon`
        # still waits for them)
        value, groups = self.sums.total(op.divisor)
        self.queue.clear()
        self.folding.clear()
        self.ran = 0
        back = self.fold.add_groups(groups)
        if self.where is not None:
            self.where.from_device += back
        return value, tiles

    def drain(self) -> None:
        """Bring back what was folded on the device and fold it here."""
        if self.sums is None:
            return
        shares, groups = self.sums.results()
        back = self.fold.add_summed(shares, groups)
        if self.where is not None:
            self.where.from_device += sum(np.asarray(o).nbytes for o in shares) + back

    def abandon(self) -> None:
        """Stopped early: wait for the queued programs (they read the tiles' views)."""
        for ev, running in self.queue:
            settle_pieces(running)
            ev.release()
        self.queue.clear()
        self.ran = 0
        self.folding.clear()
        if self.sums is not None:
            self.sums.clear()
