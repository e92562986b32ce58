"""How a tile of a loss's pass is split into pieces, each one JAX program
(`_tile_program`): pieces small enough for the room their programs have, as many as
run at once, and of as few shapes as can be (each shape is compiled once)."""

from __future__ import annotations

import math

import numpy as np

from ..storage._paged_file import Region

__all__ = ["MIN_PIECE_ELEMENTS", "PIECES_IN_FLIGHT", "piece_elements", "piece_limit"]


#: Pieces of a tile whose programs run at once: XLA leaves a core idle in much of
#: a program (its elementwise loops), and the next piece fills it (a two-layer MLP
#: on 256 MiB, 2 cores: 0.28 s a step one at a time, 0.24-0.26 s two at once).
PIECES_IN_FLIGHT = 2

#: The fewest elements a piece has (smaller ones cost more in each program's call
#: than in its work).
MIN_PIECE_ELEMENTS = 1024


def piece_elements(steps: int, dtype: np.dtype, room: int) -> int:
    """Elements of the pieces a tile is computed in, each piece's program within
    ``room`` bytes: it holds at most one block per step (XLA fuses most of them)
    and a few more (its arguments, their gradients) at once."""
    return max(MIN_PIECE_ELEMENTS, room // (max(8, dtype.itemsize) * (steps + 4)))


def piece_limit(region: Region, limit: int, in_flight: int = PIECES_IN_FLIGHT) -> int:
    """At most ``limit`` elements a piece, the tile in as many pieces as run at once
    at least, and pieces of one shape where a few more of them make it so (each
    shape is a program XLA compiles, 0.3 s each here)."""
    sizes = [s.stop - s.start for s in region]
    n = math.prod(sizes)
    limit = max(MIN_PIECE_ELEMENTS, min(limit, -(-n // in_flight)))
    inner = math.prod(sizes[1:])
    if not sizes or inner == 0 or limit < inner:
        return limit
    rows, fit = sizes[0], limit // inner
    least = -(-rows // fit)
    for k in range(least, 2 * least + 1):
        if rows % k == 0:
            return rows // k * inner
    return limit
