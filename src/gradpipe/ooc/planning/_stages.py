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
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from ..storage._iostats import IOStats, io_stats
from ._resident import is_resident

__all__ = ["Stage", "Where", "note_next", "recording", "stage"]


@dataclasses.dataclass
class Stage:
    """One tiled pass: its operation, the inputs it read (chains as formulas), its
    tile plan, the memory it was planned to hold, and what it moved.

    ``projected_*`` come from the plan before the pass ran; ``io`` is what the
    pass measured (`IOStats`: bytes and tiles read and written, chains included).
    ``in_memory`` lists the in-memory (resident) operands it read, ``m0: float32[12]``;
    ``summed_in_memory`` what it summed over its tiles in memory rather than wrote:
    ``the gradient of m0``, or ``output float32[12]`` (an output held in memory);
    ``held_in_memory`` the small results it kept in memory files instead of scratch
    files (`_held_results`); ``runs_on`` where its tiles' programs ran (``"host"``,
    or a JAX device with the bytes sent to it and back); ``notes`` why it runs
    (a loss whose gradient could not be computed in its own pass says why).
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
    in_memory: tuple[str, ...] = ()
    summed_in_memory: tuple[str, ...] = ()
    held_in_memory: tuple[str, ...] = ()
    runs_on: str = "host"
    to_device: int = 0
    from_device: int = 0
    notes: tuple[str, ...] = ()
    value: float | None = None


@dataclasses.dataclass
class Where:
    """What a pass reports while it runs: the device its tiles' programs ran on and
    the bytes it sent there and got back (`Stage.runs_on`), and the scalar it
    computed, if it computed one (a loss: `Stage.value`)."""

    runs_on: str = "host"
    to_device: int = 0
    from_device: int = 0
    value: Any = None  # (a JAX array where the device computes it, read if recorded)


class _Recorder:
    def __init__(self) -> None:
        self.stages: list[Stage] = []
        # id(file), or a resident operand's (buffer address, shape, dtype)
        self.names: dict[int | tuple[int, tuple[int, ...], str], str] = {}
        self.counter = itertools.count()
        self.memory_counter = itertools.count()
        self.fused = 0
        self.notes: list[str] = []  # for the next stage (`note_next`)


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


def note_next(text: str) -> None:
    """Say why the next pass runs (a loss whose gradient could not share its pass)."""
    for rec in list(_active):
        rec.notes.append(text)


def name_of(f: Any, rec: _Recorder) -> str:
    """A short stable name for an array within one recording: ``x0``, ``x1``... for
    stored ones, ``m0``, ``m1``... for in-memory (resident) operands."""
    # a resident operand is read anew by each pass: named by its buffer, shape and dtype
    key: int | tuple[int, tuple[int, ...], str] = f.buffer_key() if is_resident(f) else id(f)
    if key not in rec.names:
        if is_resident(f):
            rec.names[key] = f"m{next(rec.memory_counter)}"
        else:
            rec.names[key] = f"x{next(rec.counter)}"
    return rec.names[key]


@contextlib.contextmanager
def stage(
    name: str,
    phase: str,
    inputs: Sequence[Any],
    tile: Sequence[int],
    tiles: int,
    peak: int,
    read: float,
    write: int,
    summed: tuple[Any, ...] = (),
    held: tuple[str, ...] = (),
) -> Iterator[Where]:
    """Measure one pass; a no-op unless `recording` is active. ``summed``: what the
    pass sums in memory: resident inputs (their gradients), or a phrase such as
    ``"output float32[16]"`` for an output held in memory; ``held``: phrases for
    the small results it keeps in memory files. The pass fills in the `Where` it
    is given."""
    where = Where()
    if not _active:
        yield where
        return
    recs = list(_active)
    earlier = _read_values(inputs, recs[0].stages)
    from ._chain_graph import describe, leaves

    named = lambda f, r=recs[0]: name_of(f, r)
    reads = tuple(describe(v, named) for v in inputs)
    resident = {}
    for v in inputs:
        for leaf in leaves(v):
            if is_resident(leaf):
                resident[named(leaf)] = f"{named(leaf)}: {leaf.dtype.name}{list(leaf.shape)}"
    sums = tuple(s if isinstance(s, str) else f"the gradient of {named(s)}" for s in summed)
    before, start = io_stats(), time.perf_counter()
    try:
        yield where
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
            tuple(resident.values()),
            sums,
            tuple(held),
            where.runs_on,
            where.to_device,
            where.from_device,
            (*recs[0].notes, *earlier),
            None if where.value is None else float(where.value),
        )
        for r in recs:
            r.notes.clear()
        for rec in recs:
            rec.stages.append(s)


def _read_values(inputs: Sequence[Any], stages: list[Stage]) -> list[str]:
    """Notes for the scalars a pass's chains read that an earlier pass computed (a
    global value inside a nonlinearity, ``tanh(y - mean(y))``: the reason the pass
    comes after that one). Scalars are matched by value: they reach the pass as
    JAX values, which keep no trace of where they came from."""
    from ._chain_graph import computed_on_read

    found: dict[int, float] = {}
    stack, seen = list(inputs), set()
    while stack:
        g = stack.pop()
        if id(g) in seen:
            continue
        seen.add(id(g))
        if isinstance(g, np.ndarray):
            if g.shape == () and g.dtype.kind == "f":
                found[id(g)] = float(g)
        elif computed_on_read(g) and g.node is not None:
            stack.extend(g.node.sources)
    notes = []
    for v in found.values():
        for k, s in enumerate(stages, 1):
            if s.value is not None and s.value == v and v not in (0.0, 1.0):
                notes.append(
                    f"reads {v:.6g}, the value pass {k} ({s.name}) computed: a global value "
                    "inside its chain, known only once that pass is done"
                )
                break
    return notes
