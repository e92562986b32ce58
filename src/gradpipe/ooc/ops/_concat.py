"""`Concat` and `Stack`: arrays joined along an existing axis or a new one.

An output tile reads, from each input, the part of the tile that input covers
along the joining axis (an empty box for an input the tile does not reach), and
writes them one after another into the tile. The backward pass is one slice of the
cotangent per input (`Window`), in that input's dtype.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

import numpy as np

from ..arrays._op import BlockParallelOp, frozen
from ..execution._driver import Driver, Value
from ..kernels._promotion import to_primal_dtype
from ..storage._paged_file import Region

__all__ = ["Concat", "Stack", "Window"]

#: One input's window of the cotangent: its start and stop per axis, and the axes dropped.
_Bounds = tuple[tuple[int, ...], tuple[int, ...], tuple[bool, ...]]


@frozen
class Window(BlockParallelOp):
    """``x[start:stop]`` per axis (axes in ``drop`` are indexed by ``start`` alone and
    go), as ``dtype``: one input's part of a joined array's cotangent."""

    start: tuple[int, ...]
    stop: tuple[int, ...]
    drop: tuple[bool, ...]
    dtype: str
    label: str

    @property
    def name(self) -> str:
        return self.label

    def output_shape(self, s: tuple[int, ...]) -> tuple[int, ...]:
        return tuple(b - a for a, b, d in zip(self.start, self.stop, self.drop) if not d)

    def output_dtype(self, dx: np.dtype) -> np.dtype:
        return np.dtype(self.dtype)

    def index_map(self, out_r: Region, red_r: Region, s: tuple[int, ...]) -> tuple[Region]:
        kept, region = iter(out_r), []
        for a, d in zip(self.start, self.drop):
            r = slice(0, 1) if d else next(kept)
            region.append(slice(a + r.start, a + r.stop))
        return (tuple(region),)

    def forward_block(self, x: np.ndarray) -> np.ndarray:
        kept = tuple(n for n, d in zip(x.shape, self.drop) if not d)
        return to_primal_dtype(x.reshape(kept), self.dtype)

    def backward_block(self, g: np.ndarray, x: np.ndarray) -> tuple[np.ndarray]:
        return (np.asarray(g).reshape(x.shape),)


def _offsets(lengths: Iterable[int]) -> list[int]:
    return [int(v) for v in np.cumsum([0, *lengths])]


def _window_grads(
    driver: Driver,
    op: BlockParallelOp,
    inputs: Sequence[Value],
    g: Value,
    wants: Sequence[bool],
    windows: Callable[[int, Value], _Bounds],
) -> list[Value | None]:
    """One `Window` of ``g`` per wanted input: ``windows(i, x)`` gives its (start,
    stop, drop); an empty one is a new empty file."""
    grads: list[Value | None] = []
    for i, (x, w) in enumerate(zip(inputs, wants)):
        if not w:
            grads.append(None)
            continue
        if x.shape and 0 in x.shape:
            grads.append(driver.allocate(x.shape, x.dtype).commit())
            continue
        start, stop, drop = windows(i, x)
        grads.append(driver.forward(Window(start, stop, drop, np.dtype(x.dtype).str, op.name), [g]))
    return grads


@frozen
class Concat(BlockParallelOp):
    """The inputs joined along ``axis`` (as `np.concatenate`), in NumPy's promoted dtype."""

    axis: int

    @property
    def name(self) -> str:
        return "concat"

    def output_shape(self, *shapes: tuple[int, ...]) -> tuple[int, ...]:
        out = list(shapes[0])
        out[self.axis] = sum(s[self.axis] for s in shapes)
        return tuple(out)

    def index_map(
        self, out_r: Region, red_r: Region, *shapes: tuple[int, ...]
    ) -> tuple[Region, ...]:
        ax, r = self.axis, out_r[self.axis]
        regions = []
        for off, s in zip(_offsets(s[ax] for s in shapes), shapes):
            lo = min(max(r.start - off, 0), s[ax])
            hi = min(r.stop - off, s[ax])
            regions.append((*out_r[:ax], slice(lo, max(lo, hi)), *out_r[ax + 1 :]))
        return tuple(regions)

    def forward_into(self, out: np.ndarray, *blocks: np.ndarray, accumulate: bool) -> None:
        index, pos = [slice(None)] * out.ndim, 0
        for b in blocks:
            index[self.axis] = slice(pos, pos + b.shape[self.axis])
            out[tuple(index)] = b
            pos += b.shape[self.axis]

    def backward(
        self,
        driver: Driver,
        inputs: Sequence[Value],
        output: Value,
        g: Value,
        wants: Sequence[bool],
    ) -> list[Value | None]:
        offsets = _offsets(x.shape[self.axis] for x in inputs)

        def windows(i: int, x: Value) -> _Bounds:
            start = [0] * len(x.shape)
            start[self.axis] = offsets[i]
            stop = list(g.shape)
            stop[self.axis] = offsets[i + 1]
            return tuple(start), tuple(stop), (False,) * len(x.shape)

        return _window_grads(driver, self, inputs, g, wants, windows)


@frozen
class Stack(BlockParallelOp):
    """The inputs (of one shape, at least 1-d) joined along a new ``axis`` (as `np.stack`)."""

    axis: int

    @property
    def name(self) -> str:
        return "stack"

    def output_shape(self, *shapes: tuple[int, ...]) -> tuple[int, ...]:
        return (*shapes[0][: self.axis], len(shapes), *shapes[0][self.axis :])

    def index_map(
        self, out_r: Region, red_r: Region, *shapes: tuple[int, ...]
    ) -> tuple[Region, ...]:
        r = out_r[self.axis]
        rest = (*out_r[: self.axis], *out_r[self.axis + 1 :])
        # an input outside the tile reads an empty box (cut along its first axis)
        empty = (slice(0, 0), *rest[1:])
        return tuple(rest if r.start <= i < r.stop else empty for i in range(len(shapes)))

    def forward_into(self, out: np.ndarray, *blocks: np.ndarray, accumulate: bool) -> None:
        if out.size == 0:
            return
        # in a tile with elements, the inputs it reaches are exactly the non-empty blocks
        reached = [b for b in blocks if b.size]
        out[...] = np.stack(reached, axis=self.axis)

    def backward(
        self,
        driver: Driver,
        inputs: Sequence[Value],
        output: Value,
        g: Value,
        wants: Sequence[bool],
    ) -> list[Value | None]:
        def windows(i: int, x: Value) -> _Bounds:
            start = (*[0] * self.axis, i, *[0] * (len(x.shape) - self.axis))
            stop = (*g.shape[: self.axis], i + 1, *g.shape[self.axis + 1 :])
            drop = tuple(a == self.axis for a in range(len(g.shape)))
            return start, stop, drop

        return _window_grads(driver, self, inputs, g, wants, windows)
