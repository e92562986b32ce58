"""Keep freed tile buffers from inflating resident memory (glibc only).

glibc's malloc raises its mmap threshold each time a large block is freed (up to
32 MiB), after which tile-sized buffers come from per-thread heaps that keep freed
memory. With a reader thread and a compute thread that alternately allocate and
free tiles, resident memory then grows well past the budget. Fixing the threshold
at 1 MiB (which also turns off the dynamic adjustment) makes every tile buffer an
mmap that goes back to the system when freed. Other allocations are unaffected.
"""

from __future__ import annotations

import ctypes
import ctypes.util

__all__ = ["use_mmap_for_tiles"]

_M_MMAP_THRESHOLD = -3
_done = [False]


def use_mmap_for_tiles(threshold: int = 2**20) -> bool:
    """Fix glibc's mmap threshold at ``threshold`` bytes, once; False where not glibc."""
    if _done[0]:
        return True
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        ok = bool(libc.mallopt(_M_MMAP_THRESHOLD, threshold))
    except (OSError, AttributeError):
        ok = False
    _done[0] = ok
    return ok
