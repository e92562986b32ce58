"""A device's pass that returns while its last tiles still run there.

A loss's pass on a device folds its tiles there (`_device_sums`), so its loss and
gradients are JAX arrays that the device computes as its programs run: the pass
need not wait for its last tiles (the transfers still queued behind the last one
it sent, up to ``DEVICE_AHEAD + 1`` tiles) before it hands them to JAX, as a
jitted function returns before its program ran. JAX's backward pass, the hand-over
of the gradients and the caller's next steps then run while the device finishes,
as they do after a loop a user writes by hand; `jax.block_until_ready` waits for
it. Measured on a TPU v5e over 2 GiB in 128 MiB tiles: the last tile was sent
22 ms before its results came back, and the MLP step's backward pass and
hand-over after the pass took 7-8 ms.

Those tiles' blocks (views of the data's mapped files, or buffers of the host's
pool) are read by transfers still queued, and a mapped view shows a write into its
file. So a `Tail` keeps them until it is settled (its programs waited for, its
blocks given back): by a thread of its own as soon as the device is done (the
blocks, and the files they keep open, go with them), and at the latest before the
next pass plans (`settle_all`: the host's budget holds one pass's tiles at a time)
and before any file its tiles read is written in place or replaced under its name
(it registers as a reader of each, as a chain does: `_chain_readers`).
"""

from __future__ import annotations

import functools
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ..planning._chain_graph import leaves
from ..planning._chain_read import Evaluation
from ..planning._chain_readers import Storer, watch
from ._tile_flow import Pieces, settle_pieces

__all__ = ["Tail", "settle_all"]

_tails: list[Tail] = []
_lock = threading.Lock()


class Tail:
    """The tiles of a pass still running on its device (``tiles``: each one's
    evaluation and the pieces whose views are not released) over the chain ``top``."""

    def __init__(self, top: Any, tiles: list[tuple[Evaluation, Pieces]]) -> None:
        self._tiles: list[tuple[Evaluation, Pieces]] | None = tiles
        self._done = threading.Event()
        self.stored: bool | None = None  # (a `_chain_readers.Reader`: None until settled)
        for f in leaves(top):
            watch(f, self)
        with _lock:
            _tails.append(self)
        _settler().submit(self.settle)

    def store(self, driver: Storer | None = None) -> bool:
        """Settle (before a file the tiles read is written)."""
        self.settle()
        return True

    def settle(self) -> None:
        """Wait for the tiles' programs (their transfers read the blocks), then give
        their blocks back; where another thread is doing so, wait for it."""
        with _lock:
            tiles, self._tiles = self._tiles, None
        if tiles is None:
            self._done.wait()
            return
        try:
            for ev, running in tiles:
                for piece in running:  # (as `Flow.advance` does: each piece's views)
                    settle_pieces([piece])
                    piece[0].release_views()
                ev.release()
        finally:
            self.stored = True
            with _lock:
                _tails.remove(self)
            self._done.set()


@functools.lru_cache(maxsize=1)
def _settler() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(1, thread_name_prefix="gradpipe-tails")


def settle_all() -> None:
    """Settle every pass's tiles still running (a pass is about to plan its own)."""
    with _lock:
        tails = list(_tails)
    for tail in tails:
        tail.settle()
