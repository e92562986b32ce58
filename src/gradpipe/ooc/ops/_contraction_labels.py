"""How a `Contraction` groups its labels: which are looped over, which summed, and
how a pair of blocks becomes a stack of matrix products (`_analyse`), with each
label's size (`_label_sizes`) and the labels of an operand's gradient."""

from __future__ import annotations

import functools
from collections.abc import Hashable
from typing import Any, NamedTuple, Protocol

import numpy as np

from ..arrays._hijax import type_of

#: One label per axis of an operand or of the output.
Labels = tuple[int, ...]


class _Labelled(Hashable, Protocol):
    """What the analysis reads of a `Contraction` (which imports this module)."""

    @property
    def a_labels(self) -> Labels: ...
    @property
    def b_labels(self) -> Labels: ...
    @property
    def out_labels(self) -> Labels: ...
    @property
    def label(self) -> str: ...


class _Layout(NamedTuple):
    """How a block pair becomes a stack of matrix products.

    The product is ``x @ y`` with ``(x, y) = (a, b)``, or ``(b, a)`` when `swap`
    (so that the output's rows come first). Each of ``x``, ``y`` is grouped as
    ``(batch labels it has, first group, second group)`` in its stored axis order;
    `trans_x` / `trans_y` say its groups are (summed, rows) / (cols, summed), that
    is, stored transposed. `perms`, when not None, permutes ``x`` and ``y`` into
    grouped order first (a copy) and the product back into the output's order.
    """

    swap: bool
    batch: Labels
    rows: Labels
    cols: Labels
    x_labels: Labels
    y_labels: Labels
    x_groups: tuple[Labels, Labels, Labels]
    y_groups: tuple[Labels, Labels, Labels]
    trans_x: bool
    trans_y: bool
    perms: tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]] | None


class _Analysis(NamedTuple):
    reduced: Labels  # the reduction loop's labels
    lone_a: tuple[int, ...]  # axes of a summed on their own (their label in no other place)
    lone_b: tuple[int, ...]
    layout: _Layout


@functools.lru_cache(maxsize=1024)
def _analyse(op: _Labelled) -> _Analysis:
    a, b, out = op.a_labels, op.b_labels, op.out_labels
    for labels, what in ((a, "a_labels"), (b, "b_labels"), (out, "out_labels")):
        if len(set(labels)) != len(labels):
            raise ValueError(f"{op.label}: {what} {labels} repeats a label.")
    lone_a = tuple(i for i, lab in enumerate(a) if lab not in b and lab not in out)
    lone_b = tuple(i for i, lab in enumerate(b) if lab not in a and lab not in out)
    a2 = tuple(lab for i, lab in enumerate(a) if i not in lone_a)
    b2 = tuple(lab for i, lab in enumerate(b) if i not in lone_b)
    summed = tuple(lab for lab in a2 if lab in b2 and lab not in out)
    reduced = summed + tuple(a[i] for i in lone_a) + tuple(b[i] for i in lone_b)
    return _Analysis(reduced, lone_a, lone_b, _layout(a2, b2, out, summed))


def _layout(a: Labels, b: Labels, out: Labels, summed: Labels) -> _Layout:
    """The grouping with the fewest batch labels that needs no copy, else a copy plan."""
    kept = tuple(lab for lab in out if lab in a or lab in b)
    for p in range(len(kept) + 1):
        for swap in (False, True):
            x, y = (b, a) if swap else (a, b)
            lay = _grouped(x, y, kept, p, summed, swap)
            if lay is not None:
                return lay
    batch = tuple(lab for lab in kept if lab in a and lab in b)
    rows = tuple(lab for lab in kept if lab in a and lab not in b)
    cols = tuple(lab for lab in kept if lab in b and lab not in a)
    px, py = batch + rows + summed, batch + summed + cols
    to_out = tuple((batch + rows + cols).index(lab) for lab in kept)
    perms = (tuple(a.index(lab) for lab in px), tuple(b.index(lab) for lab in py), to_out)
    return _Layout(
        False,
        batch,
        rows,
        cols,
        a,
        b,
        (batch, rows, summed),
        (batch, summed, cols),
        False,
        False,
        perms,
    )


def _grouped(
    x: Labels, y: Labels, kept: Labels, p: int, summed: Labels, swap: bool
) -> _Layout | None:
    """The layout with the first ``p`` output labels as batch, if ``x`` and ``y`` are
    stored grouped for it (else None)."""
    batch, rest = kept[:p], kept[p:]
    rows = tuple(lab for lab in rest if lab in x)
    cols = tuple(lab for lab in rest if lab in y)
    if set(rows) & set(cols) or rest != rows + cols:
        return None
    x_batch = tuple(lab for lab in batch if lab in x)
    y_batch = tuple(lab for lab in batch if lab in y)
    if x[: len(x_batch)] != x_batch or y[: len(y_batch)] != y_batch:
        return None
    k = tuple(lab for lab in x[len(x_batch) :] if lab in summed)
    x_order = _in_order(x[len(x_batch) :], rows, k)
    y_order = _in_order(y[len(y_batch) :], k, cols)
    if x_order is None or y_order is None:
        return None
    (x_first, x_second), trans_x = x_order
    (y_first, y_second), trans_y = y_order
    xg, yg = (x_batch, x_first, x_second), (y_batch, y_first, y_second)
    return _Layout(swap, batch, rows, cols, x, y, xg, yg, trans_x, trans_y, None)


def _in_order(
    stored: Labels, first: Labels, second: Labels
) -> tuple[tuple[Labels, Labels], bool] | None:
    """``((first, second), False)`` if ``stored`` is ``first + second``, the groups
    swapped and True if it is ``second + first`` (a transposed matrix), else None."""
    if stored == first + second:
        return (first, second), False
    if stored == second + first:
        return (second, first), True
    return None


@functools.lru_cache(maxsize=1024)
def _label_sizes(op: _Labelled, sa: tuple[int, ...], sb: tuple[int, ...]) -> dict[int, int]:
    """Each label's size; a size-1 axis broadcasts against another size, except summed."""
    if len(sa) != len(op.a_labels) or len(sb) != len(op.b_labels):
        raise ValueError(
            f"{op.label}: operands of shapes {sa} and {sb} do not match labels "
            f"{op.a_labels} and {op.b_labels}."
        )
    sizes: dict[int, int] = {}
    for labels, shape in ((op.a_labels, sa), (op.b_labels, sb)):
        for lab, n in zip(labels, shape):
            prev = sizes.get(lab)
            if prev is None or prev == n:
                sizes[lab] = n
            elif lab in op.out_labels and 1 in (prev, n):
                sizes[lab] = n if prev == 1 else prev
            else:
                raise ValueError(
                    f"{op.label}: an axis of size {prev} of the first operand (shape {sa}) "
                    f"meets an axis of size {n} of the second (shape {sb}); "
                    + (
                        "summed axes must have equal sizes."
                        if lab not in op.out_labels
                        else "they do not broadcast."
                    )
                )
    return sizes


def _gradient_labels(
    op: _Labelled, labels: Labels, shape: tuple[int, ...], sizes: dict[int, int]
) -> Labels:
    """An operand's labels for its gradient: an axis it was broadcast along (size 1,
    the label's size not) gets a label of its own, so that the gradient sums over it."""
    fresh = max((*op.a_labels, *op.b_labels, *op.out_labels, -1)) + 1
    return tuple(
        fresh + i if n == 1 and sizes[lab] != 1 else lab
        for i, (lab, n) in enumerate(zip(labels, shape))
    )


def _shape_dtype(x: Any) -> tuple[tuple[int, ...], np.dtype]:
    t = type_of(x)
    if t is not None:
        return tuple(t.shape), np.dtype(t.dtype)
    dtype = getattr(x, "dtype", None)
    return tuple(np.shape(x)), np.dtype(np.asarray(x).dtype if dtype is None else dtype)
