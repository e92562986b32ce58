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

A loss's pass that computes its gradient too (`execution._one_pass`) runs one XLA
program per piece, and XLA allocates each program's outputs and temporaries afresh:
as mmaps above the threshold, each faulting its pages in and handing them back (on
1 GiB of float32 under a 256 MiB budget: 1.05 million page faults, 4 GiB, a step, a
third of its time). `kept_between_pieces` lets blocks up to glibc's largest mmap
threshold (32 MiB) come from the heaps while it runs, and pads each heap's top by the
pass's room, so that a piece's blocks merge back into the top when freed and serve
the next piece (8 thousand faults a step there, 1.3 s a step instead of 2.0); at its
end the threshold is the tiles' again, the pad dropped and the free memory given
back (``malloc_trim``).
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import functools
import threading
from collections.abc import Iterator

__all__ = ["kept_between_pieces", "use_mmap_for_tiles"]

_M_TRIM_THRESHOLD = -1
_M_TOP_PAD = -2
_M_MMAP_THRESHOLD = -3
_TRIM_BYTES = 8 * 2**20
_TOP_PAD_DEFAULT = 128 * 2**10  # glibc's (mallopt(3))
_MMAP_THRESHOLD_MAX = 32 * 2**20  # glibc's largest on 64-bit machines
#: a thread's heap is at most 64 MiB: a larger pad keeps nothing more there
_TOP_PAD_MAX = 64 * 2**20
_done = [False]
_threshold = [_MMAP_THRESHOLD_MAX]  # the tiles' (`use_mmap_for_tiles`)
_padding = threading.Lock()
_pads: list[int] = []  # the pads of the passes running now


@functools.cache
def _libc() -> ctypes.CDLL | None:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]  # (glibc's, or none here)
        libc.malloc_trim.argtypes = [ctypes.c_size_t]
    except (OSError, AttributeError):
        return None
    return libc


def use_mmap_for_tiles(threshold: int = 2**20) -> bool:
    """Fix glibc's mmap threshold at ``threshold`` bytes, once; False where not glibc."""
    if _done[0]:
        return True
    libc = _libc()
    ok = libc is not None and bool(libc.mallopt(_M_MMAP_THRESHOLD, threshold))
    ok = ok and bool(libc.mallopt(_M_TRIM_THRESHOLD, _TRIM_BYTES))  # type: ignore[union-attr]
    _done[0] = ok
    if ok:
        _threshold[0] = threshold
    return ok


@contextlib.contextmanager
def kept_between_pieces(nbytes: int) -> Iterator[None]:
    """Keep up to ``nbytes`` (at most 64 MiB) of freed memory at each heap's top
    while the block runs (the largest pad of the passes running at once); give it
    back after the last. Only where the tiles' threshold is set (a pass's driver
    sets it): what it restores is then known."""
    libc = _libc()
    pad = min(nbytes, _TOP_PAD_MAX)
    if libc is None or pad <= 0 or not _done[0]:
        yield
        return
    with _padding:
        if not _pads:
            libc.mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD_MAX)
        libc.mallopt(_M_TOP_PAD, max([pad, *_pads]))
        _pads.append(pad)
    try:
        yield
    finally:
        with _padding:
            _pads.remove(pad)
            libc.mallopt(_M_TOP_PAD, max(_pads, default=_TOP_PAD_DEFAULT))
            if not _pads:
                libc.mallopt(_M_MMAP_THRESHOLD, _threshold[0])
                libc.malloc_trim(0)
