"""I/O accounting: bytes and tiles read from and written to array files."""

from __future__ import annotations

import dataclasses
import threading

__all__ = ["IOStats", "io_stats", "reset_io_stats"]


@dataclasses.dataclass(frozen=True)
class IOStats:
    """Totals since the last `reset_io_stats` (all threads, all arrays)."""

    bytes_read: int = 0
    bytes_written: int = 0
    tiles_read: int = 0
    tiles_written: int = 0

    def __sub__(self, other: IOStats) -> IOStats:
        return IOStats(
            *(a - b for a, b in zip(dataclasses.astuple(self), dataclasses.astuple(other)))
        )


_lock = threading.Lock()
_totals = [0, 0, 0, 0]


def record_read(nbytes: int) -> None:
    with _lock:
        _totals[0] += nbytes
        _totals[2] += 1


def record_write(nbytes: int) -> None:
    with _lock:
        _totals[1] += nbytes
        _totals[3] += 1


def add_io(stats: IOStats) -> None:
    """Add counts measured elsewhere (a cluster worker's share of a pass)."""
    with _lock:
        for k, v in enumerate(dataclasses.astuple(stats)):
            _totals[k] += v


def io_stats() -> IOStats:
    """A snapshot of the I/O counters.

    **Example:** ``before = io_stats(); ...; print(io_stats() - before)``.
    """
    with _lock:
        return IOStats(*_totals)


def reset_io_stats() -> None:
    """Set every I/O counter back to zero."""
    with _lock:
        _totals[:] = [0, 0, 0, 0]
