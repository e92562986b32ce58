"""Manipulation functions of the array API standard (reshape, concat, stack, ...), out of core.

Each function checks its arguments as NumPy does and picks the operation that
moves the data: a box-to-box move the driver tiles (`Flip`, `UnitAxes`,
`BroadcastTo`, `Concat`, `Stack`, and `transpose` for axis permutations), a copy
of flat ranges (`FlatCopy`: reshape, flattening concatenation and roll), or a
gather with one index map per axis (`AxisGather`: roll along axes, tile, repeat).
Every result is a new array, except where the standard or NumPy returns its input
unchanged: `reshape` to the same shape (unless ``copy=True``), and `broadcast_to`
(or `broadcast_arrays`) of an array that already has the shape, which return the
input itself. With no `DiskArray` among the arguments a function runs in memory on
``jax.numpy``, with NumPy's result dtypes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import cast

import jax.numpy as jnp
import numpy as np

from ..arrays._array import ArrayLike, Result
from ..arrays._hijax import type_of
from ..arrays._op import apply
from ..arrays._primitives import bind
from ..planning._budget import get_budget
from ._arg_types import AxesLike, BudgetLike, ShapeLike
from ._axis_gather import AxisGather, Cyclic, Repeated, RepeatedBy, Same, Shifted
from ._concat import Concat, Stack
from ._layout import getitem, transpose
from ._manip_args import (
    array_list,
    as_ints,
    dtype_of,
    in_memory,
    is_disk,
    normalize_axes,
    normalize_axis,
    not_disk,
    repeat_counts,
    shape_of,
)
from ._manip_boxes import BroadcastTo, Flip, UnitAxes
from ._reshape import FlatCopy, flat_concat, reshaped

__all__ = [
    "broadcast_arrays",
    "broadcast_to",
    "concat",
    "expand_dims",
    "flip",
    "moveaxis",
    "permute_dims",
    "repeat",
    "reshape",
    "roll",
    "squeeze",
    "stack",
    "tile",
    "unstack",
]


# ---------------------------------------------------------------- reshaping


def reshape(
    x: ArrayLike, /, shape: ShapeLike, *, copy: bool | None = None, budget: BudgetLike = None
) -> Result:
    """``x`` with a new ``shape`` (one side may be ``-1``: inferred), the elements
    in the same C order.

    A `DiskArray` reshaped to its own shape is returned as it is unless
    ``copy=True``; any other shape is a new array (its own file, so ``copy=False``
    is refused with a `ValueError`). The output is written in tiles of whole
    trailing rows, each a flat range of the input read as a few boxes.
    """
    old = shape_of(x)
    size = math.prod(old)
    shape = as_ints(shape, "reshape: shape")
    unknown = [i for i, n in enumerate(shape) if n == -1]
    if len(unknown) > 1 or any(n < -1 for n in shape):
        raise ValueError(f"reshape: shape {shape} may have one -1 and no other negative side.")
    known = math.prod(n for n in shape if n != -1)
    if unknown and known and size % known == 0:
        shape = tuple(size // known if n == -1 else n for n in shape)
    if (unknown and -1 in shape) or math.prod(shape) != size:
        raise ValueError(f"reshape: cannot reshape an array of size {size} into shape {shape}.")
    if not is_disk(x):
        return jnp.reshape(not_disk(x), shape)
    if shape == old and not copy:
        return cast("Result", x)  # a DiskArray, or its tracer
    if copy is False:
        raise ValueError(
            f"reshape: copy=False, but a DiskArray of shape {shape} is a new file (a copy) "
            f"of one of shape {old}. Pass copy=None to allow it."
        )
    return reshaped(x, shape, "reshape", budget)


def expand_dims(x: ArrayLike, /, axis: AxesLike, *, budget: BudgetLike = None) -> Result:
    """``x`` with a new axis of size 1 at ``axis`` (in ``[-ndim - 1, ndim]``); a tuple
    of axes inserts several, as NumPy does. A new array."""
    old = shape_of(x)
    axes = normalize_axes(axis, len(old) + len(as_ints(axis, "expand_dims: axis")), "expand_dims")
    if not is_disk(x):
        return jnp.expand_dims(not_disk(x), axes)
    shape: list[int] = []
    it = iter(old)
    for a in range(len(old) + len(axes)):
        shape.append(1 if a in axes else next(it))
    return apply(UnitAxes(tuple(shape), "expand_dims"), x, budget=budget)


def squeeze(x: ArrayLike, /, axis: AxesLike, *, budget: BudgetLike = None) -> Result:
    """``x`` without the size-1 axes ``axis`` (an int or a tuple); a `ValueError` if
    one of them is longer. A new array (0-d: a JAX array)."""
    old = shape_of(x)
    axes = normalize_axes(axis, len(old), "squeeze")
    longer = [a for a in axes if old[a] != 1]
    if longer:
        raise ValueError(
            f"squeeze: axis {longer[0]} has size {old[longer[0]]}; only axes of size 1 "
            f"can be removed (shape {old})."
        )
    if not is_disk(x):
        return jnp.squeeze(not_disk(x), axes)
    shape = tuple(n for a, n in enumerate(old) if a not in axes)
    return apply(UnitAxes(shape, "squeeze"), x, budget=budget)


# ---------------------------------------------------------------- joining and splitting


def concat(
    arrays: Sequence[ArrayLike], /, *, axis: int | None = 0, budget: BudgetLike = None
) -> Result:
    """The arrays joined along an existing ``axis`` (``None``: all flattened first),
    in NumPy's promoted dtype. A new array; each output tile reads only the parts
    of the inputs it holds."""
    arrays = array_list(arrays, "concat")
    shapes = [shape_of(a) for a in arrays]
    if not is_disk(*arrays):
        dtype = np.result_type(*[dtype_of(a) for a in arrays])
        values = in_memory(arrays, dtype)
        if axis is None:
            return jnp.concatenate([v.reshape(-1) for v in values])
        return jnp.concatenate(values, axis=axis)
    if axis is None:
        if all(len(s) == 1 for s in shapes):
            return apply(Concat(0), *arrays, budget=budget)
        return flat_concat(arrays, "concat", budget)
    ndim = len(shapes[0])
    if ndim == 0 or any(len(s) != ndim for s in shapes):
        raise ValueError(
            f"concat: the arrays must have one number of dimensions (at least 1), got "
            f"shapes {shapes}."
        )
    ax = normalize_axis(axis, ndim, "concat")
    for s in shapes[1:]:
        if s[:ax] + s[ax + 1 :] != shapes[0][:ax] + shapes[0][ax + 1 :]:
            raise ValueError(
                f"concat: shapes {shapes} differ along an axis other than the joining axis {ax}."
            )
    return apply(Concat(ax), *arrays, budget=budget)


def stack(arrays: Sequence[ArrayLike], /, *, axis: int = 0, budget: BudgetLike = None) -> Result:
    """The arrays (of one shape) joined along a new ``axis`` (in ``[-ndim - 1, ndim]``),
    in NumPy's promoted dtype. A new array."""
    arrays = array_list(arrays, "stack")
    shapes = [shape_of(a) for a in arrays]
    if any(s != shapes[0] for s in shapes):
        raise ValueError(f"stack: all arrays must have one shape, got {shapes}.")
    ax = normalize_axis(axis, len(shapes[0]) + 1, "stack")
    if not is_disk(*arrays):
        dtype = np.result_type(*[dtype_of(a) for a in arrays])
        return jnp.stack(in_memory(arrays, dtype), axis=ax)
    if not shapes[0]:  # 0-d arrays: a flattening concatenation
        return flat_concat(arrays, "stack", budget)
    return apply(Stack(ax), *arrays, budget=budget)


def unstack(x: ArrayLike, /, *, axis: int = 0, budget: BudgetLike = None) -> tuple[Result, ...]:
    """The slices of ``x`` along ``axis``, as a tuple of new arrays (each reads
    only its slice)."""
    shape = shape_of(x)
    if not shape:
        raise ValueError("unstack: x must have at least one dimension, got a 0-d array.")
    ax = normalize_axis(axis, len(shape), "unstack")
    if not is_disk(x):
        return tuple(jnp.moveaxis(jnp.asarray(x), ax, 0))
    index: list[slice | int] = [slice(None)] * len(shape)
    out = []
    for i in range(shape[ax]):
        index[ax] = i
        out.append(getitem(x, tuple(index), budget=budget))
    return tuple(out)


# ---------------------------------------------------------------- axes


def permute_dims(x: ArrayLike, /, axes: Sequence[int], *, budget: BudgetLike = None) -> Result:
    """``x`` with its axes permuted: output axis ``i`` is input axis ``axes[i]``."""
    ndim = len(shape_of(x))
    perm = tuple(
        normalize_axis(a, ndim, "permute_dims") for a in as_ints(axes, "permute_dims: axes")
    )
    if sorted(perm) != list(range(ndim)):
        raise ValueError(
            f"permute_dims: axes {tuple(axes)} is not a permutation of the {ndim} axes."
        )
    if not is_disk(x):
        return jnp.transpose(not_disk(x), perm)
    return transpose(x, perm, budget=budget)


def moveaxis(
    x: ArrayLike, source: AxesLike, destination: AxesLike, /, *, budget: BudgetLike = None
) -> Result:
    """``x`` with the axes ``source`` moved to positions ``destination`` (ints or
    tuples of one length), the other axes in their order."""
    ndim = len(shape_of(x))
    src, dst = (
        normalize_axes(source, ndim, "moveaxis"),
        normalize_axes(destination, ndim, "moveaxis"),
    )
    if len(src) != len(dst):
        raise ValueError(
            f"moveaxis: source {source!r} and destination {destination!r} must name as many axes."
        )
    if not is_disk(x):
        return jnp.moveaxis(not_disk(x), src, dst)
    perm = [a for a in range(ndim) if a not in src]
    for d, s in sorted(zip(dst, src)):
        perm.insert(d, s)
    return transpose(x, tuple(perm), budget=budget)


def flip(x: ArrayLike, /, *, axis: AxesLike | None = None, budget: BudgetLike = None) -> Result:
    """``x`` reversed along ``axis`` (an int, a tuple, or ``None``: all axes). A new array."""
    ndim = len(shape_of(x))
    axes = tuple(range(ndim)) if axis is None else normalize_axes(axis, ndim, "flip")
    if not is_disk(x):
        return jnp.flip(not_disk(x), axes)
    return apply(Flip(axes), x, budget=budget)


def roll(
    x: ArrayLike, /, shift: ShapeLike, *, axis: AxesLike | None = None, budget: BudgetLike = None
) -> Result:
    """``x`` with its elements shifted by ``shift`` along ``axis`` (those rolling off
    one end come back at the other); ``axis=None`` rolls the flattened array. A
    tuple ``shift`` needs a tuple ``axis`` of its length; an int shift applies to
    every axis given."""
    shape = shape_of(x)
    shifts = as_ints(shift, "roll: shift")
    if axis is None:
        if isinstance(shift, (tuple, list)):
            raise ValueError("roll: a tuple shift needs a tuple axis of the same length.")
        if not is_disk(x):
            return jnp.roll(not_disk(x), shifts[0])
        size = math.prod(shape)
        s = shifts[0] % size if size else 0
        pieces = tuple(p for p in ((0, size - s, 0, s), (0, 0, s, size - s)) if p[3])
        return apply(FlatCopy(shape, pieces, "roll"), x, budget=budget)
    axes = tuple(normalize_axis(a, len(shape), "roll") for a in as_ints(axis, "roll: axis"))
    if len(shifts) == 1:
        shifts = shifts * len(axes)
    elif len(shifts) != len(axes) or not isinstance(axis, (tuple, list)):
        raise ValueError(f"roll: shift {shift!r} and axis {axis!r} must have one length.")
    if not is_disk(x):
        return jnp.roll(not_disk(x), shifts, axes)
    total = [0] * len(shape)
    for s, a in zip(shifts, axes):
        total[a] += s  # an axis named twice is shifted by the sum, as in NumPy
    maps = tuple(Shifted(n, s % n) if n and s % n else Same(n) for n, s in zip(shape, total))
    return apply(AxisGather(maps, 0, "roll"), x, budget=budget)


# ---------------------------------------------------------------- broadcasting


def broadcast_to(x: ArrayLike, /, shape: ShapeLike, *, budget: BudgetLike = None) -> Result:
    """``x`` broadcast to ``shape`` (as NumPy broadcasts), as a new array; an array
    that already has ``shape`` is returned as it is."""
    shape = as_ints(shape, "broadcast_to: shape")
    old = shape_of(x)
    lead = len(shape) - len(old)
    if (
        lead < 0
        or any(n != 1 and n != m for n, m in zip(old, shape[lead:]))
        or min(shape, default=0) < 0
    ):
        raise ValueError(f"broadcast_to: an array of shape {old} cannot be broadcast to {shape}.")
    if not is_disk(x):
        return jnp.broadcast_to(not_disk(x), shape)
    if old == shape:
        return cast("Result", x)  # a DiskArray, or its tracer
    return apply(BroadcastTo(shape), x, budget=budget)


def broadcast_arrays(*arrays: ArrayLike, budget: BudgetLike = None) -> list[Result]:
    """The arrays broadcast against each other (see `broadcast_to`): each already of
    the broadcast shape is returned as it is."""
    shapes = [shape_of(a) for a in arrays]
    try:
        shape = tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        listed = " and ".join(str(s) for s in shapes)
        raise ValueError(f"broadcast_arrays: shapes {listed} do not broadcast together.") from None
    if not is_disk(*arrays):
        return [jnp.broadcast_to(not_disk(a), shape) for a in arrays]
    return [
        cast("Result", a)
        if s == shape and type_of(a) is not None
        else bind(BroadcastTo(shape), get_budget(budget), a)
        for a, s in zip(arrays, shapes)
    ]


# ---------------------------------------------------------------- repetition


def repeat(
    x: ArrayLike, repeats: ArrayLike, /, *, axis: int | None = None, budget: BudgetLike = None
) -> Result:
    """Each element of ``x`` repeated ``repeats`` times along ``axis`` (``None``:
    of the flattened array). ``repeats`` is an int, or a 1-D integer array of one
    count per element (or one count for all); a `DiskArray` of counts is read
    into memory (it must fit the budget), so it cannot be traced."""
    counts = repeat_counts(repeats, budget)
    shape = shape_of(x)
    if axis is None:
        n, ax = math.prod(shape), 0
    else:
        ax = normalize_axis(axis, len(shape), "repeat")
        n = shape[ax]
    if isinstance(counts, np.ndarray):
        if counts.shape not in ((1,), (n,)):
            raise ValueError(
                f"repeat: repeats has shape {counts.shape}, but x has {n} elements along the "
                f"axis (give one count, or {n})."
            )
        if np.any(counts < 0):
            raise ValueError("repeat: repeats may not contain negative values.")
        if counts.shape == (1,):
            counts = int(counts[0])
    elif counts < 0:
        raise ValueError(f"repeat: repeats may not be negative, got {counts}.")
    if not is_disk(x):
        return jnp.repeat(not_disk(x), counts, axis=axis)
    if axis is None and len(shape) != 1:
        x, shape = reshaped(x, (n,), "repeat", budget), (n,)
    along: RepeatedBy | Repeated
    if isinstance(counts, np.ndarray):
        along = RepeatedBy.of(counts)
    else:
        along = Repeated(n, counts)
    maps = tuple(along if a == ax else Same(m) for a, m in enumerate(shape))
    return apply(AxisGather(maps, 0, "repeat"), x, budget=budget)


def tile(x: ArrayLike, repetitions: ShapeLike, /, *, budget: BudgetLike = None) -> Result:
    """``x`` repeated ``repetitions[i]`` times along each axis ``i`` (the shorter of
    the two padded with leading ones, as the standard says). A new array."""
    reps = as_ints(repetitions, "tile: repetitions")
    if any(r < 0 for r in reps):
        raise ValueError(f"tile: repetitions {reps} may not be negative.")
    shape = shape_of(x)
    if not is_disk(x):
        return jnp.tile(not_disk(x), reps)
    lead = max(len(reps) - len(shape), 0)
    sides = (1,) * lead + shape
    reps = (1,) * (len(sides) - len(reps)) + reps
    maps = tuple(Cyclic(n, r) if r != 1 else Same(n) for n, r in zip(sides, reps))
    return apply(AxisGather(maps, lead, "tile"), x, budget=budget)
