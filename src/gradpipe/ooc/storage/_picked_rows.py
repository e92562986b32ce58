"""Rows picked from an array along one axis, read when asked: ``take(x, index, axis)``
with the index in memory, never written.

A `PickedRows` reads like a stored file (``shape``, ``dtype``, ``page_shape``,
``read(region, out)``): a region's positions along the axis name rows of the source,
and the read fetches each run of neighbouring rows as one region of the source
(the days of one month in a daily record are one run a year), a row named twice
(a climatology expanded to every day) once. Chains read it as one of their stored
inputs, so the gather that xarray's ``groupby`` and ``isel`` make is fused into
the pass that consumes it: no copy is written and the source is read only where
the consumer needs it.

`worth_reading_through` says when this pays: when the index names rows in long
runs or repeats them (a sorted or grouped selection). A scattered index (a random
permutation of short rows) is gathered into a file instead, where the reads are
sorted and coalesced once (`ops._indexing.Gather`).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from typing import Protocol

import numpy as np

from ._in_place import InPlaceFile, Region

__all__ = ["PickedRows", "row_bytes", "run_bytes", "worth_reading_through"]


#: An index is read through when its runs of neighbouring (or repeated) rows hold
#: at least this many bytes of the source on average (or a 64th of the budget, when
#: that is less: small budgets read in small tiles anyway).
MIN_RUN_BYTES = 256 * 2**10


class RowSource(Protocol):
    """What rows are picked from: a stored array that reads a region (a file, or an
    array of the layers above that reads like one)."""

    @property
    def shape(self) -> tuple[int, ...]: ...

    @property
    def dtype(self) -> np.dtype: ...

    def read(self, region: Region | None = ..., out: np.ndarray | None = ...) -> np.ndarray: ...


def _runs(index: np.ndarray) -> np.ndarray:
    """Where a new run starts in ``index``: positions that neither repeat the previous
    one nor follow it."""
    step = np.diff(index)
    return np.flatnonzero((step != 0) & (step != 1)) + 1


def run_bytes(budget_bytes: int) -> int:
    """The bytes a run of rows must hold on average to be read through."""
    return min(MIN_RUN_BYTES, budget_bytes // 64)


def row_bytes(shape: Sequence[int], itemsize: int, axis: int) -> int:
    """The bytes of one position along ``axis`` of an array of ``shape``."""
    return itemsize * math.prod(n for a, n in enumerate(shape) if a != axis)


def worth_reading_through(
    shape: Sequence[int], itemsize: int, axis: int, index: np.ndarray, budget_bytes: int
) -> bool:
    """Whether picking ``index`` along ``axis`` of an array of ``shape`` reads runs of
    at least `run_bytes` on average."""
    if index.size == 0:
        return False
    runs = len(_runs(index)) + 1
    return row_bytes(shape, itemsize, axis) * index.size / runs >= run_bytes(budget_bytes)


class PickedRows(InPlaceFile):
    """``source`` at positions ``index`` (non-negative, in bounds) along ``axis``,
    read when asked (see the module). Read-only; a chain over it is written first
    when written into (`_setitem`)."""

    is_scratch = True  # it lives with its chain: pickled with it, never reopened
    pickles_by_location = False
    writable = False
    whole_chunks = False
    #: a read holds the rows it fetched and the region it makes of them (`_chain_stats.Stats`)
    buffers = 2

    def __init__(self, source: RowSource, axis: int, index: np.ndarray) -> None:
        self.source = source
        self.axis = int(axis)
        self.index = np.ascontiguousarray(index, dtype=np.int64)
        shape = list(source.shape)
        shape[self.axis] = len(self.index)
        self.shape = tuple(shape)
        self.dtype = np.dtype(source.dtype)
        page = list(getattr(source, "page_shape", None) or self.shape)
        page[self.axis] = max(1, min(page[self.axis], len(self.index)))
        self.page_shape = tuple(page)
        #: the share of its bytes a read fetches from the source (a row named again
        #: is read once): what tile plans count as read from disk
        self.read_share = len(np.unique(self.index)) / max(len(self.index), 1)

    def read(self, region: Region | None = None, out: np.ndarray | None = None) -> np.ndarray:
        """The values in ``region``: each run of the source's rows it names read once."""
        region = self.normalize(region)
        shape = tuple(s.stop - s.start for s in region)
        if out is None:
            out = np.empty(shape, self.dtype)
        if 0 in shape:
            return out
        a = self.axis
        picked = self.index[region[a]]
        rows, where = np.unique(picked, return_inverse=True)
        if len(rows) == len(picked) and np.all(np.diff(picked) > 0):
            self._read_rows(picked, region, out)  # increasing: straight into place
            return out
        block = np.empty((*shape[:a], len(rows), *shape[a + 1 :]), self.dtype)
        self._read_rows(rows, region, block)
        np.take(block, where.reshape(-1), axis=a, out=out)
        return out

    def _read_rows(self, rows: np.ndarray, region: Region, into: np.ndarray) -> None:
        """Read the sorted, distinct source ``rows`` (with ``region``'s other sides)
        into ``into``, one read per run of neighbouring rows."""
        a = self.axis
        starts = np.r_[0, np.flatnonzero(np.diff(rows) != 1) + 1, len(rows)]
        for lo, hi in itertools.pairwise(starts):
            first = int(rows[lo])
            box = (*region[:a], slice(first, first + int(hi - lo)), *region[a + 1 :])
            target = into[(slice(None),) * a + (slice(int(lo), int(hi)),)]
            if target.flags.c_contiguous:
                got = self.source.read(box, target)
                if got is not target:
                    target[...] = got
            else:
                target[...] = self.source.read(box)

    def formula(self, name: Callable[[RowSource], str]) -> str:
        """What `describe` shows inside the chain's ``take(...)``: the source named by
        ``name`` and which rows, ``x0, 365 of 1461 along axis 0``."""
        n = self.source.shape[self.axis]
        return f"{name(self.source)}, {len(self.index)} of {n} along axis {self.axis}"

    def __repr__(self) -> str:
        return f"PickedRows({self.dtype.name}{list(self.shape)} from {self.source!r})"
