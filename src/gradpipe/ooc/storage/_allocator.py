"""Keep freed tile buffers from inflating resident memory (glibc only).

glibc's malloc raises its mmap threshold each time a large block is freed (up to
32 MiB), after which tile-sized buffers come from per-thread heaps that keep freed
memory. With a reader thread and a compute thread that alternately allocate and
free tiles, resident memory then grows well past the budget. Fixing the threshold
at 1 MiB (which also turns off the dynamic adjustment) makes every tile buffer an
mmap that goes back to the system when freed. Other allocations are unaffected.

Fixing the mmap threshold also fixes the trim threshold at its default, 128 KiB:
each time the top of a heap has that much free, it is handed back, and the next
allocation faults its pages in again. Fused chains allocate many blocks of a few
hundred KiB (their pieces, `_chain_stats.SUB_BYTES`); the trim threshold is therefore
raised to 8 MiB, which bounds what each heap keeps.
"""

from __future__ import annotations

import ctypes
import ctypes.util

__all__ = ["use_mmap_for_tiles"]

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_TRIM_BYTES = 8 * 2**20
_done = [False]


def use_mmap_for_tiles(threshold: int = 2**20) -> bool:
    """Fix glibc's mmap threshold at ``threshold`` bytes, once; False where not glibc."""
    if _done[0]:
        return True
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        ok = bool(libc.mallopt(_M_MMAP_THRESHOLD, threshold))
        ok = ok and bool(libc.mallopt(_M_TRIM_THRESHOLD, _TRIM_BYTES))
    except (OSError, AttributeError):
        ok = False
    _done[0] = ok
    return ok
