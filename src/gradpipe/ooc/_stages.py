"""Stages: what each tiled loop read, wrote and held, recorded while `explain` runs.

Every pass of the driver over tiles (an operation forward or backward, or the
write of a chain) is one stage. Outside `recording` nothing is kept and a stage
costs one check of a list.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import threading
import time
from collections.abc import Iterator

from ._iostats import IOStats, io_stats

__all__ = ["Stage", "recording", "stage"]


@dataclasses.dataclass
class Stage:
    """One tiled pass: its operation, the inputs it read (chains as formulas), its
    tile plan, the memory it was planned to hold, and what it moved.

    ``projected_*`` come from the plan before the pass ran; ``io`` is what the
    pass measured (`IOStats`: bytes and tiles read and written, chains included).
    """

    name: str
    phase: str
    reads: tuple[str, ...]
    tile: tuple[int, ...]
    tiles: int
    projected_peak_bytes: int
    projected_read_bytes: int
    projected_write_bytes: int
    io: IOStats = dataclasses.field(default_factory=IOStats)
    seconds: float = 0.0


class _Recorder:
    def __init__(self):
        self.stages: list[Stage] = []
        self.names: dict[int, str] = {}
        self.counter = itertools.count()
        self.fused = 0


_active: list[_Recorder] = []
_lock = threading.Lock()


@contextlib.contextmanager
def recording() -> Iterator[_Recorder]:
    """Record every stage run inside the block (on any thread)."""
    rec = _Recorder()
    with _lock:
        _active.append(rec)
    try:
        yield rec
    finally:
        with _lock:
            _active.remove(rec)


def recording_active() -> bool:
    """Whether a `recording` is active (stages are worth describing)."""
    return bool(_active)


def fused() -> None:
    """Count one operation fused into a chain (nothing ran, nothing was written)."""
    for rec in list(_active):
        rec.fused += 1


def name_of(f, rec: _Recorder) -> str:
    """A short stable name for a stored array within one recording: ``x0``, ``x1``..."""
    key = id(f)
    if key not in rec.names:
        rec.names[key] = f"x{next(rec.counter)}"
    return rec.names[key]


@contextlib.contextmanager
def stage(name: str, phase: str, inputs, tile, tiles: int, peak: int, read: int, write: int):
    """Measure one pass; a no-op unless `recording` is active."""
    if not _active:
        yield
        return
    from ._chain import describe

    recs = list(_active)
    reads = tuple(describe(v, lambda f, r=recs[0]: name_of(f, r)) for v in inputs)
    before, start = io_stats(), time.perf_counter()
    try:
        yield
    finally:
        s = Stage(
            name,
            phase,
            reads,
            tuple(tile),
            int(tiles),
            int(peak),
            int(read),
            int(write),
            io_stats() - before,
            time.perf_counter() - start,
        )
        for rec in recs:
            rec.stages.append(s)
