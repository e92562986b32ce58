"""Tiles that follow chunks: the ``grain`` of an operation's loop axes.

A compressed chunk is decoded whole whatever part of it a read wants, so a tile
that cuts a chunk in two decodes it twice per pass. `loop_grain` finds, for each
loop axis of an operation, the chunk side of the inputs stored in whole-decoding
chunks (files with ``whole_chunks = True``: zarr arrays, chunked HDF5 datasets)
on the input axis that loop axis maps to; `plan_tiles` (``grain=``) then keeps
tile sides whole multiples of it. Inputs computed on read (fused chains) are
looked through to the files they read. An input may also ask for a grain itself
(a ``grain`` attribute, one side per axis).

The mapping is found by probing the operation's ``index_map``: the input axis
whose region shrinks by exactly as much as the loop axis is the one it maps to.
An axis that maps with a stride, or to a region starting off a chunk boundary
(a slice ``x[3:]``), gets no grain: aligned loop tiles would not be aligned
chunks there.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ._chain import ChainFile, is_chain

__all__ = ["loop_grain"]

Region = tuple[slice, ...]


def _leaf_regions(source: Any, region: Region | None, found: list[tuple[Any, Region]]) -> None:
    """Append ``(file, region)`` for every stored file that reading ``region`` of
    ``source`` reads (through chains)."""
    if region is None or isinstance(source, np.ndarray):
        return
    if is_chain(source):
        node = source.node
        assert node is not None  # (a chain computed on read has its node)
        for s, r in zip(node.sources, node.regions(region)):
            _leaf_regions(s, r, found)
        return
    found.append((source.stored if isinstance(source, ChainFile) else source, region))


def _probe(
    op: Any,
    inputs: Sequence[Any],
    shapes: Sequence[tuple[int, ...]],
    out_tile: Sequence[int],
    red_tile: Sequence[int],
) -> list[tuple[Any, Region]]:
    out_r = tuple(slice(0, t) for t in out_tile)
    red_r = tuple(slice(0, t) for t in red_tile)
    found: list[tuple[Any, Region]] = []
    for v, r in zip(inputs, op.index_map(out_r, red_r, *shapes)):
        _leaf_regions(v, r, found)
    return found


def _chunked(f: Any) -> bool:
    return bool(getattr(f, "whole_chunks", False)) and bool(getattr(f, "page_shape", None))


def _one_to_one(whole: Region, part: Region, n: int, half: int) -> int | None:
    """The one input axis whose region shrank by as much as a loop axis of ``n``
    halved to ``half``, or None."""
    drops = [
        (i, (w.stop - w.start) - (p.stop - p.start))
        for i, (w, p) in enumerate(zip(whole, part))
        if (w.stop - w.start) != (p.stop - p.start)
    ]
    if len(drops) != 1 or drops[0][1] != n - half:
        return None
    return drops[0][0]


def _declared(
    op: Any,
    inputs: Sequence[Any],
    shapes: Sequence[tuple[int, ...]],
    loop: tuple[int, ...],
    n_out: int,
) -> list[int]:
    """The grain inputs ask for themselves: an input with a ``grain`` attribute (one
    side per axis; `_pending`'s stack of sums asks for its slots whole, since each
    slot of a tile reads the same data) gives it to the loop axis that maps to that
    axis."""
    grain = [1] * len(loop)
    asking = [getattr(v, "grain", None) for v in inputs]
    if not any(asking):
        return grain

    def regions(tile: Sequence[int]) -> Sequence[Region | None]:
        return op.index_map(
            tuple(slice(0, t) for t in tile[:n_out]),
            tuple(slice(0, t) for t in tile[n_out:]),
            *shapes,
        )

    full = regions(loop)
    for ax, n in enumerate(loop):
        if n <= 1:
            continue
        half = n // 2
        part = regions((*loop[:ax], half, *loop[ax + 1 :]))
        for sides, w, p in zip(asking, full, part):
            if not sides or w is None or p is None:
                continue
            i = _one_to_one(w, p, n, half)
            if i is not None and 1 < sides[i] <= n:
                grain[ax] = max(grain[ax], int(sides[i]))
    return grain


def loop_grain(
    op: Any,
    inputs: Sequence[Any],
    shapes: Sequence[tuple[int, ...]],
    out_shape: tuple[int, ...],
    red_shape: tuple[int, ...],
) -> tuple[int, ...]:
    """One grain per loop axis (output axes, then reduction axes) of ``op`` on
    ``inputs``: the chunk side its tiles should be multiples of, 1 where none.

    **Arguments:**

    - `op`: the block-parallel operation (its ``index_map`` is probed).
    - `inputs`: its input files (chains, files, 0-d values).
    - `shapes`: the inputs' shapes.
    - `out_shape`, `red_shape`: the loop's output and reduction shapes.

    **Returns:** a tuple of ints, one per loop axis. Where several chunked inputs map
    to an axis, their chunk sides' least common multiple when it fits the axis,
    else the largest side.
    """
    loop = (*out_shape, *red_shape)
    n_out = len(out_shape)
    grain = _declared(op, inputs, shapes, loop, n_out)
    full = _probe(op, inputs, shapes, out_shape, red_shape)
    if not any(_chunked(f) for f, _ in full):
        return tuple(grain)
    for ax, n in enumerate(loop):
        if n <= 1:
            continue
        half = n // 2
        shrunk = [*loop[:ax], half, *loop[ax + 1 :]]
        probe = _probe(op, inputs, shapes, shrunk[:n_out], shrunk[n_out:])
        if len(probe) != len(full):
            continue
        for (f, whole), (g, part) in zip(full, probe):
            if f is not g or not _chunked(f):
                continue
            i = _one_to_one(whole, part, n, half)
            if i is None:
                continue  # not one input axis, one to one
            side = int(f.page_shape[i])
            if side >= n or whole[i].start % side:
                continue  # one chunk spans the axis, or the tiles start off chunk edges
            both = math.lcm(grain[ax], side)
            grain[ax] = both if both <= n else max(grain[ax], side)
    return tuple(grain)
