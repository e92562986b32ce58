"""The interpreter's cyclic garbage collector while a loss's pass streams its pieces.

A pass's thread reads tiles and starts the pieces' programs one after another; on
an accelerator it is what keeps the host's link busy. A full collection of the
interpreter's heap stops that thread for as long as it takes to walk every object
the process holds (JAX's and the caller's among them: 75-160 ms for 140,000 objects
on the 2-core machine), and a pass of many pieces allocates enough to set one off
every step or two. Measured there on JAX's CPU device, a 256 MiB MLP step in 384
pieces (as many as a 24 GiB X in 64 MiB pieces), ten steps: six full collections
inside the passes, 55-57 ms a step, none outside them; with the heap frozen none
full anywhere, the collections inside the passes 12-14 ms a step against 68-70, and
the step 234-236 ms against 288-307 ms (`tools/pass_collections.py`; a step of a
few pieces, 0.5 GiB in 64 MiB ones, saw no full collection in twenty).

So a pass freezes the heap it starts with (`gc.freeze`): the objects that exist
then are left out of every collection until the pass ends, when they are handed
back (`gc.unfreeze`, as the oldest generation); what the pass itself allocates is
collected as usual. Nothing is freed later than it would be by reference counting;
only cycles among the older objects wait for the pass's end. Where the caller froze
the heap already (to fork, say), or turned the collector off, it is left as it is;
passes running at once on several threads freeze once, and the last to end hands
the heap back (with whatever a caller froze meanwhile); a child forked during a
pass starts with its heap handed back.
"""

from __future__ import annotations

import contextlib
import gc
import os
import threading
from collections.abc import Iterator

__all__ = ["heap_frozen"]

_lock = threading.Lock()
_passes = [0]  # passes running that froze the heap (or found it frozen by one)


@contextlib.contextmanager
def heap_frozen() -> Iterator[None]:
    """Leave the objects that exist now out of the collector's work meanwhile."""
    ours = False
    try:
        with _lock:
            if _passes[0] > 0 or (gc.isenabled() and gc.get_freeze_count() == 0):
                if _passes[0] == 0:
                    gc.freeze()
                _passes[0] += 1
                ours = True
        yield
    finally:
        if ours:
            with _lock:
                _passes[0] -= 1
                if _passes[0] == 0:
                    gc.unfreeze()


def _after_fork_in_child() -> None:
    """A child forked while a pass ran has no pass running: its heap is handed back."""
    if _passes[0] > 0:
        _passes[0] = 0
        gc.unfreeze()


if hasattr(os, "register_at_fork"):  # (not on Windows)
    os.register_at_fork(after_in_child=_after_fork_in_child)
