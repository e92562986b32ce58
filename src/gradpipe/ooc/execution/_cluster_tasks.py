"""What a pass sends to a dask worker, and what the worker runs (`DaskExecutor`).

A pass is pickled once (`dumps`) with its array files as references by path (a
small result held in memory: by value) and the functions made inside other
functions by value; each task (`forward_task`, `backward_task`) unpickles it
(`loads`), runs its share of the steps with the caller's kind of driver, and
returns what the caller adds up, with the I/O the worker counted.
"""

from __future__ import annotations

import io
import os
import pickle
from typing import Any

import numpy as np

from ..planning._budget import MemoryBudget
from ..planning._tile_reads import steps
from ..storage._iostats import IOStats, io_stats
from ..storage._paged_file import PagedFile, Region

__all__ = ["Key", "backward_task", "can_read", "dumps", "forward_task", "loads"]

#: A region as a key: ``((start, stop), ...)``.
Key = tuple[tuple[int, int], ...]


# ---------------------------------------------------------------- sending a pass


class _PassUnpickler(pickle.Unpickler):
    def persistent_load(self, pid: tuple[str, Any, bool]) -> PagedFile:
        kind, where, writable = pid
        if kind == "memory-file":  # a small result held in memory: sent by value
            values = where
            f = PagedFile.create(values.shape, values.dtype, values.shape, in_memory=True)
            f.write(None, values)
            return f
        if kind != "paged-file":
            raise pickle.UnpicklingError(f"unknown file reference {kind!r}")
        return PagedFile.open(where, writable=writable)


def dumps(obj: object) -> bytes:
    """``obj`` pickled with its array files as references by path (a small result
    held in memory: by value), and functions made inside other functions (kernels,
    a chain's closures) by value."""
    import cloudpickle

    class PassPickler(cloudpickle.CloudPickler):
        def persistent_id(self, obj: object) -> tuple[str, Any, bool] | None:
            if isinstance(obj, PagedFile) and not obj.on_disk:
                return ("memory-file", obj.read(None), False)  # small (`_held_results`)
            if isinstance(obj, PagedFile):
                return ("paged-file", obj.path, obj.writable)
            return None

    buf = io.BytesIO()
    PassPickler(buf, protocol=5).dump(obj)
    return buf.getvalue()


def loads(data: bytes) -> Any:
    """The pass `dumps` pickled (its files opened by path, or made in memory)."""
    return _PassUnpickler(io.BytesIO(data)).load()


# ---------------------------------------------------------------- on a worker


def forward_task(
    payload: bytes,
    out_regions: list[Region],
    first_red: int,
    end_red: int | None,
    partial: bool,
) -> tuple[np.ndarray | None, IOStats]:
    """One task of a forward pass: its output tiles, written into the output file
    (or its partial accumulator, returned); with the worker's I/O counts."""

    op, inputs, out, dtype, shapes, red_shape, red_tile, budget, name, driver_type = loads(payload)
    before = io_stats()
    driver = driver_type(MemoryBudget(budget), name)
    step_iter = steps(op, shapes, out_regions, red_shape, red_tile, first_red, end_red)
    if partial:  # the caller adds the partial results and finishes them
        step_iter = ((o, f, False, r) for o, f, _, r in step_iter)
    acc = driver.forward_steps(op, inputs, step_iter, None if partial else out, dtype)
    keep = partial or out is None
    return (np.asarray(acc) if keep else None), io_stats() - before


def backward_task(
    payload: bytes, out_regions: list[Region]
) -> tuple[list[dict[Key, np.ndarray]], list[np.ndarray | None], IOStats]:
    """One task of a backward pass: gradients of regions no other task touches are
    written; the others, and gradients held in memory (0-d, or of resident
    operands: this task's sum), are returned."""

    op, inputs, extra, grads, shapes, red_shape, red_tile, budget, name, shared, driver_type = (
        loads(payload)
    )
    before = io_stats()
    driver = driver_type(MemoryBudget(budget), name)
    step_iter = steps(op, shapes, out_regions, red_shape, red_tile)
    kept = driver.backward_steps(op, inputs, extra, step_iter, grads, shared=shared)
    in_memory = [g if isinstance(g, np.ndarray) else None for g in grads]
    return kept, in_memory, io_stats() - before


def can_read(path: str) -> bool:
    """Whether this worker sees the file at ``path`` (the scratch directory's probe)."""
    return os.path.exists(path)
