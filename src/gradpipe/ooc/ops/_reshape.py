"""`FlatCopy`: ranges of elements in C order, copied between arrays of any shapes.

This is what a reshape is out of core. The output is cut into tiles of whole
trailing rows, each a contiguous range of flat indices written as one box; each
tile is assembled from the flat ranges of the inputs that land in it, and a flat
range of an array is at most ``2 * ndim - 1`` boxes (`flat_boxes`), read straight
into the tile. The same move is a concatenation of flattened arrays
(``concat(axis=None)``), a roll of the flattened array (two ranges swapped), and
the backward pass of each (the ranges copied back), so all of them are one
operation given by its *pieces*: ``(input, source start, destination start, count)``.
`reshaped` and `flat_concat` apply it (a reshape that only adds or removes axes of
size 1 is a `UnitAxes` instead).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Iterator, Sequence
from typing import cast

import numpy as np
from numpy.typing import DTypeLike

from ..arrays._array import ArrayLike, Result
from ..arrays._op import CustomOp, apply, frozen
from ..execution._driver import Driver, Value
from ..kernels._promotion import to_primal_dtype
from ..planning._array_file import ArrayFile
from ..storage._paged_file import PagedFile
from ._arg_types import BudgetLike
from ._manip_args import shape_of
from ._manip_boxes import UnitAxes

__all__ = ["FlatCopy", "flat_boxes", "flat_concat", "reshaped", "tile_regions"]

Region = tuple[slice, ...]


def tile_regions(shape: Sequence[int], tile: Sequence[int]) -> Iterator[Region]:
    """The regions of ``shape`` cut into tiles of ``tile``, in C order."""
    ranges = [range(0, n, max(t, 1)) for n, t in zip(shape, tile)]
    for starts in itertools.product(*ranges):
        yield tuple(slice(s, min(s + t, n)) for s, t, n in zip(starts, tile, shape))


def flat_boxes(shape: Sequence[int], start: int, stop: int) -> list[Region]:
    """The boxes that cover flat indices ``[start, stop)`` of an array of ``shape``,
    in C order (so their elements, one box after another, are that flat range)."""
    if start >= stop:
        return []
    if not shape:
        return [()]
    row = math.prod(shape[1:])
    rest = tuple(slice(0, n) for n in shape[1:])
    boxes: list[Region] = []
    first_full = -(-start // row)
    if start % row:  # the head: the end of one row
        r = start // row
        end = min(stop, (r + 1) * row)
        head = flat_boxes(shape[1:], start - r * row, end - r * row)
        boxes += [(slice(r, r + 1), *b) for b in head]
    last_full = stop // row
    if last_full > first_full:
        boxes.append((slice(first_full, last_full), *rest))
    if stop % row and last_full >= first_full:  # the tail: the start of one row
        tail = flat_boxes(shape[1:], 0, stop - last_full * row)
        boxes += [(slice(last_full, last_full + 1), *b) for b in tail]
    return boxes


def row_tile(shape: Sequence[int], elements: int) -> tuple[int, ...]:
    """The largest tile of whole trailing rows of ``shape`` with at most ``elements``
    elements (at least one): ``(1, ..., 1, t, n_{k+1}, ..., n_last)``."""
    for k in range(len(shape)):
        inner = math.prod(shape[k + 1 :])
        if inner <= elements:
            t = max(1, min(shape[k], elements // max(inner, 1)))
            return (1,) * k + (t,) + tuple(shape[k + 1 :])
    return ()


def _read_into(src: Value, box: Region, flat: np.ndarray) -> None:
    """The values of ``src`` in ``box``, written into the 1-D buffer ``flat``."""
    if isinstance(src, np.ndarray) and src.shape == ():  # a 0-d input
        flat[...] = to_primal_dtype(src, flat.dtype).reshape(1)
        return
    shape = tuple(s.stop - s.start for s in box)
    if isinstance(src, PagedFile) and src.dtype == flat.dtype:
        src.read(box, out=flat.reshape(shape))
        return
    file = cast(ArrayFile, src)  # an in-memory input is 0-d (above)
    flat[...] = to_primal_dtype(file.read(box), flat.dtype).reshape(-1)


def copy_pieces(
    driver: Driver,
    inputs: Sequence[Value],
    out_shape: Sequence[int],
    dtype: DTypeLike,
    pieces: Iterable[tuple[int, int, int, int]],
) -> PagedFile | np.ndarray:
    """A new array of ``out_shape`` and ``dtype`` whose flat ranges are the
    ``pieces`` of ``inputs`` (a committed file, or a 0-d value for ``()``)."""
    dtype = np.dtype(dtype)
    out_shape = tuple(out_shape)
    by_start = sorted(pieces, key=lambda p: p[2])

    def fill(buf: np.ndarray, lo: int) -> None:
        hi = lo + buf.size
        for i, src_start, dst_start, count in by_start:
            a, b = max(lo, dst_start), min(hi, dst_start + count)
            if a >= b:
                continue
            src = inputs[i]
            s = src_start + a - dst_start
            pos = a - lo
            for box in flat_boxes(src.shape, s, s + b - a):
                n = math.prod(x.stop - x.start for x in box)
                _read_into(src, box, buf[pos : pos + n])
                pos += n

    if not out_shape:
        buf = np.empty(1, dtype)
        fill(buf, 0)
        return buf.reshape(())
    widest = max([np.dtype(v.dtype).itemsize for v in inputs] + [dtype.itemsize])
    elements = max(1, driver.budget.nbytes // (dtype.itemsize + widest))
    tile = row_tile(out_shape, elements)
    with driver.writing(out_shape, dtype, page_shape=tile) as out:
        strides = [math.prod(out_shape[k + 1 :]) for k in range(len(out_shape))]
        buf = np.empty(math.prod(tile), dtype)
        for region in tile_regions(out_shape, tile):
            extent = tuple(s.stop - s.start for s in region)
            flat = buf[: math.prod(extent)]
            fill(flat, sum(s.start * st for s, st in zip(region, strides)))
            out.write(region, flat.reshape(extent))
    return out


@frozen
class FlatCopy(CustomOp):
    """An array of ``out_shape`` made of flat ranges of the inputs, in C order.

    ``pieces`` are ``(input, source start, destination start, count)``; their
    destination ranges cover ``[0, prod(out_shape))`` once. ``dtype`` is the output's
    (default: NumPy's promotion of the inputs'). ``label`` names it in errors. The
    backward pass copies each input's ranges of the cotangent back.
    """

    out_shape: tuple[int, ...]
    pieces: tuple[tuple[int, int, int, int], ...]
    label: str = "reshape"
    dtype: str | None = None

    def __post_init__(self) -> None:
        covered = 0
        for _, _, dst_start, count in sorted(self.pieces, key=lambda p: p[2]):
            if dst_start != covered or count < 0:
                raise ValueError(f"{self.label}: pieces {self.pieces} must cover the output once.")
            covered += count
        if covered != math.prod(self.out_shape):
            raise ValueError(f"{self.label}: pieces {self.pieces} must cover the output once.")

    @property
    def name(self) -> str:
        return self.label

    def output_shape(self, *shapes: tuple[int, ...]) -> tuple[int, ...]:
        return self.out_shape

    def output_dtype(self, *dtypes: DTypeLike) -> np.dtype:
        return np.dtype(self.dtype) if self.dtype is not None else np.result_type(*dtypes)

    def forward(self, driver: Driver, *inputs: Value) -> PagedFile | np.ndarray:
        dtype = self.output_dtype(*[v.dtype for v in inputs])
        return copy_pieces(driver, inputs, self.out_shape, dtype, self.pieces)

    def backward(
        self,
        driver: Driver,
        inputs: Sequence[Value],
        output: Value,
        g: Value,
        wants: Sequence[bool],
    ) -> list[PagedFile | np.ndarray | None]:
        grads: list[PagedFile | np.ndarray | None] = []
        for i, (x, w) in enumerate(zip(inputs, wants)):
            if not w:
                grads.append(None)
                continue
            back = [(0, d, s, c) for j, s, d, c in self.pieces if j == i]
            grads.append(copy_pieces(driver, [g], x.shape, x.dtype, back))
        return grads


def reshaped(x: ArrayLike, shape: tuple[int, ...], fn: str, budget: BudgetLike) -> Result:
    """``x`` (a DiskArray or a 0-d value) as a new array of ``shape``: `UnitAxes` when
    only axes of size 1 differ, else one flat range copied (``fn`` names it)."""
    squeezed = tuple(n for n in shape_of(x) if n != 1)
    if squeezed == tuple(n for n in shape if n != 1):
        return apply(UnitAxes(tuple(shape), fn), x, budget=budget)
    size = math.prod(shape)
    return apply(FlatCopy(tuple(shape), ((0, 0, 0, size),), fn), x, budget=budget)


def flat_concat(arrays: Sequence[ArrayLike], fn: str, budget: BudgetLike) -> Result:
    """The ``arrays`` flattened and joined, as one new 1-D array (``fn`` names it)."""
    shapes = [shape_of(a) for a in arrays]
    sizes = [math.prod(s) for s in shapes]
    offsets = np.cumsum([0, *sizes])
    pieces = tuple((i, 0, int(offsets[i]), n) for i, n in enumerate(sizes) if n)
    return apply(FlatCopy((int(offsets[-1]),), pieces, fn), *arrays, budget=budget)
