"""The server process's use of glibc's allocator: keep freed blocks for reuse while
requests come and go, and give free memory back once residual handles have churned."""

from __future__ import annotations

import ctypes
import os
import sys
import threading

__all__ = ["release_free_memory", "tune_malloc"]

_MALLOC_ENV = "GRADPIPE_SERVE_MALLOC"
# glibc's mallopt parameters (malloc.h).
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3


def tune_malloc() -> bool:
    """Keep freed multi-megabyte blocks in this process for reuse (glibc only).

    By default glibc hands every block above a (dynamic) threshold to ``mmap`` and
    gives it back on ``free``, so each request's fresh body, response and XLA output
    buffers start as untouched pages: one page fault per 4 KiB, about as costly as
    4 MB of copying several times over (~4 ms per 4 MB measured on the benchmark VM,
    against ~0.1 ms to rewrite warm memory). Blocks below 32 MiB then come from the
    heap and at most 256 MiB of free heap is kept. Only the server process is tuned,
    never a process that merely imports gradpipe; set ``GRADPIPE_SERVE_MALLOC=0``, or
    glibc's own ``MALLOC_MMAP_THRESHOLD_`` / ``MALLOC_TRIM_THRESHOLD_``, to opt out or
    choose other values. **Returns** whether anything was changed.
    """
    if not sys.platform.startswith("linux") or os.environ.get(_MALLOC_ENV, "1") == "0":
        return False
    try:
        mallopt = ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError):  # not glibc
        return False
    changed = False
    if "MALLOC_MMAP_THRESHOLD_" not in os.environ:
        changed |= bool(mallopt(_M_MMAP_THRESHOLD, 32 * 2**20))
    if "MALLOC_TRIM_THRESHOLD_" not in os.environ:
        changed |= bool(mallopt(_M_TRIM_THRESHOLD, 256 * 2**20))
    return changed


_trim_lock = threading.Lock()


def release_free_memory() -> bool:
    """Give the free memory glibc holds back to the system (``malloc_trim(0)``).

    Residual handles are long-lived blocks allocated between the short-lived request
    bodies, copies and answers of every request; once those are freed, the holes
    between kept residuals cannot be returned by glibc's ordinary trimming (only the
    top of a heap is), so after a flood of kept handles the process held 2-3x the
    store's byte limit in RSS. ``malloc_trim(0)`` releases free pages anywhere in every
    arena. Once its handle store is half full, the server calls it after each
    ``max_bytes / 16`` (at least 8 MiB) of residuals kept (see `HandleStore`), so the
    trims are rare and RSS stays near the bound. Does nothing off glibc or with
    ``GRADPIPE_SERVE_MALLOC=0``. **Returns** whether it trimmed.
    """
    if not sys.platform.startswith("linux") or os.environ.get(_MALLOC_ENV, "1") == "0":
        return False
    try:
        trim = ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):  # not glibc
        return False
    with _trim_lock:
        trim(0)
    return True
