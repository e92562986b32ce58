"""The interpreter's cyclic garbage collector while a loss's pass streams its pieces.

A pass's thread reads tiles and starts the pieces' programs one after another; on
an accelerator it is what keeps the host's link busy. A full collection of the
interpreter's heap stops that thread for as long as it takes to walk every object
the process holds (JAX's and the caller's among them: 75-160 ms for 140,000 objects
on the 2-core machine), and a pass of many pieces allocates enough to set one off
every step or two. Measured there on JAX's CPU device, a 256 MiB MLP step in 384
pieces (as many as a 24 GiB X in 64 MiB pieces), two rounds of ten steps: five full
collections inside the passes, 34-38 ms a step; with the collector paused none
there, the step 221-225 ms against 246-262 ms, and 72 objects of cyclic garbage
left by ten steps' passes for the collector to find after them
(`tools/pass_collections.py 0.25 10 700000`; a step of a few pieces, 0.5 GiB in
64 MiB ones, saw no full collection in twenty).

So the cyclic collector is paused while a pass runs (`gc.disable`) and resumed
when it ends: reference counting still frees everything that is not in a cycle, and
cycles made meanwhile wait for the pass's end. (Freezing the heap instead,
`gc.freeze`, cannot tell a caller's frozen objects from the interpreter's own on
Python 3.12, which starts with some frozen.) Where the caller turned the collector
off, it is left off; passes running at once on several threads pause it once, and
the last to end resumes it (whatever a caller set meanwhile); a child forked during
a pass starts with it resumed.
"""

from __future__ import annotations

import contextlib
import gc
import os
import threading
from collections.abc import Iterator

__all__ = ["collector_paused"]

_lock = threading.Lock()
_passes = [0]  # passes running that paused the collector (or found it paused by one)


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Pause the cyclic collector meanwhile (unless the caller turned it off)."""
    ours = False
    try:
        with _lock:
            if _passes[0] > 0 or gc.isenabled():
                if _passes[0] == 0:
                    gc.disable()
                _passes[0] += 1
                ours = True
        yield
    finally:
        if ours:
            with _lock:
                _passes[0] -= 1
                if _passes[0] == 0:
                    gc.enable()


def _after_fork_in_child() -> None:
    """A child forked while a pass ran has no pass running: its collector resumes."""
    if _passes[0] > 0:
        _passes[0] = 0
        gc.enable()


if hasattr(os, "register_at_fork"):  # (not on Windows)
    os.register_at_fork(after_in_child=_after_fork_in_child)
