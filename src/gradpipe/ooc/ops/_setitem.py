"""``x[key] = value`` on a DiskArray: an in-place write of the selected elements.

The selection is a basic index (ints, slices with any step, ``...``), or a boolean
mask of ``x``'s shape with a scalar value (``where(mask, value, x)`` written back);
the value is a
scalar, a NumPy array or a DiskArray that broadcasts to the selection's shape, and
casts to ``x``'s dtype under NumPy's ``same_kind`` rule (as `update_`). The write
goes in slabs of the selection's first axis, each a read-modify-write of the box
that bounds it, sized from the memory budget. A scratch array is written in place; a
named file is rewritten through `update_`, so that a process killed part-way leaves
it entirely old or entirely new. Mutation cannot be traced: under `jax.jit` it is
refused, and `ooc.where` or `update_` say the same thing functionally.
"""

from __future__ import annotations

import contextlib
import math
import operator
from collections.abc import Callable
from typing import Any, Literal, cast

import jax
import numpy as np

from ..arrays._array import ArrayLike, DiskArray
from ..arrays._hijax import DiskArrayType, type_of
from ..arrays._refusals import refuse_traced
from ..execution._driver import Driver
from ..kernels._promotion import operand_dtypes
from ..planning._array_file import ArrayFile
from ..planning._budget import MemoryBudget, get_budget
from ..planning._chain import is_chain
from ..planning._chain_readers import settle_readers
from ..storage._paged_file import PagedFile
from ._elementwise import where
from ._update import update_

__all__ = ["set_item"]

#: One axis of a basic index: ``("int", i)``, or ``("slice", start, step, count)``.
_Entry = tuple[Literal["int"], int] | tuple[Literal["slice"], int, int, int]


def _normalize(key: Any, shape: tuple[int, ...]) -> list[_Entry]:
    """One ``("int", i)`` or ``("slice", start, step, count)`` per axis of ``shape``."""
    key = key if isinstance(key, tuple) else (key,)
    if sum(k is Ellipsis for k in key) > 1:
        raise IndexError("an index can only have a single ellipsis ('...').")
    if Ellipsis in key:
        at = key.index(Ellipsis)
        key = key[:at] + (slice(None),) * (len(shape) - len(key) + 1) + key[at + 1 :]
    if len(key) > len(shape):
        raise IndexError(f"too many indices ({len(key)}) for a DiskArray of shape {shape}.")
    key = key + (slice(None),) * (len(shape) - len(key))
    out: list[_Entry] = []
    for axis, (k, n) in enumerate(zip(key, shape)):
        if isinstance(k, slice):
            start, stop, step = k.indices(n)
            out.append(("slice", start, step, len(range(start, stop, step))))
            continue
        if isinstance(k, (bool, np.bool_)) or k is None or (hasattr(k, "shape") and k.shape):
            raise IndexError(
                f"x[...] = value takes ints, slices and '...' (a basic index); got "
                f"{type(k).__name__} on axis {axis}. Use ooc.where(mask, value, x) to write "
                "through a mask."
            )
        i = operator.index(k)
        if not -n <= i < n:
            raise IndexError(f"index {i} is out of bounds for axis {axis} of size {n}.")
        out.append(("int", i % n))
    return out


def _value_block(
    value: np.ndarray | ArrayFile,
    vshape: tuple[int, ...],
    sel_shape: tuple[int, ...],
    j0: int,
    j1: int,
    whole: bool = False,
) -> np.ndarray:
    """The value for selection positions ``j0:j1`` of the first axis (all of it when
    ``whole``: the first axis is indexed by an int), as NumPy."""
    if whole or not sel_shape or not vshape or len(vshape) < len(sel_shape) or vshape[0] == 1:
        region = None
    else:
        region = (slice(j0, j1), *(slice(0, n) for n in vshape[1:]))
    if isinstance(value, np.ndarray):
        return value if region is None else value[region]
    return value.read(region)


def set_item(x: DiskArray, key: Any, value: Any) -> None:
    """Write ``value`` into the elements of ``x`` that ``key`` selects (see the module);
    ``value`` is checked here (a number or an array; for a named ``x``, called again
    on a copy, the value's file)."""
    if not isinstance(x._handle, (int, np.integer)):
        refuse_traced()
    f = x._concrete_file("x[...] = value")
    driver = Driver(get_budget(), "x[...] = value")
    if is_chain(f):  # a fused result: written first, then changed in place
        f.store(driver)
    settle_readers(f, driver)
    if not getattr(f, "writable", False):
        raise TypeError(
            "x[...] = value: this DiskArray is read-only (opened without writable=True, or "
            "a constant such as a gradient of a full sum). Copy it with x.save(path) or "
            "ooc.asarray(x, copy=True) first."
        )
    if _is_mask(key, x.shape, type_of):
        _write_through_mask(x, key, value)
        return
    index = _normalize(key, x.shape)
    sel_shape = tuple(entry[3] for entry in index if entry[0] == "slice")
    tv = type_of(value)
    if tv is None and isinstance(value, jax.Array):
        if isinstance(value, jax.core.Tracer):
            refuse_traced()
        value = np.asarray(value)  # a concrete JAX array: its values are known
    if tv is None and not isinstance(value, (bool, int, float, complex, np.generic, np.ndarray)):
        raise TypeError(f"x[...] = value: value must be an array or a number, got {value!r}.")
    _, dv = operand_dtypes((x, value), type_of, "x[...] = value")
    if not np.can_cast(dv, x.dtype, casting="same_kind"):
        raise TypeError(
            f"x[...] = value: cannot write {dv.name} values into a {x.dtype.name} DiskArray "
            "(NumPy's 'same_kind' rule); convert with ooc.astype first."
        )
    vshape = tv.shape if tv is not None else np.shape(value)
    try:
        if np.broadcast_shapes(vshape, sel_shape) != sel_shape:
            raise ValueError
    except ValueError:
        raise ValueError(
            f"x[...] = value: a value of shape {tuple(vshape)} does not broadcast to the "
            f"selection's shape {sel_shape}."
        ) from None
    source: np.ndarray | ArrayFile
    if tv is None:
        source = np.asarray(value, dv)
    else:
        source = cast(DiskArray, value)._concrete_file("x[...] = value")
    in_place = getattr(f, "writes_in_place", False)  # a zarr array: chunk by chunk
    if not f.is_scratch and not in_place:  # named: written whole, atomically
        copy = x._copy(None, "x[...] = value")
        set_item(copy, key, source if tv is None else value)  # value: any DiskArray
        update_(x, copy)
        return
    if any(n == 0 for n in sel_shape) or not x.shape:
        if not x.shape:
            f.write(None, np.asarray(_value_block(source, vshape, (), 0, 1), x.dtype))
        return
    with f.rewriting() if in_place else contextlib.nullcontext():
        _write_slabs(f, index, sel_shape, source, vshape, get_budget(None))


def _is_mask(
    key: Any, shape: tuple[int, ...], type_of: Callable[[Any], DiskArrayType | None]
) -> bool:
    """Whether ``key`` is a boolean array of ``shape`` (a mask of every element)."""
    t = type_of(key)
    dtype, key_shape = (t.dtype, t.shape) if t is not None else (None, ())
    if t is None and isinstance(key, (np.ndarray, jax.Array)):
        dtype, key_shape = np.dtype(key.dtype), tuple(key.shape)
    return dtype == np.bool_ and bool(key_shape) and tuple(key_shape) == tuple(shape)


def _write_through_mask(x: DiskArray, mask: ArrayLike, value: Any) -> None:
    """``x[mask] = value`` for a scalar ``value``: ``where(mask, value, x)`` written
    back into ``x`` (an array value would need as many elements as the mask selects,
    which depends on the data)."""

    if type_of(value) is not None or np.ndim(value):
        raise ValueError(
            "x[mask] = value takes a scalar value: an array would need as many elements as "
            "the mask selects, which depends on the data. Use ooc.where(mask, values, x)."
        )
    _, dv = operand_dtypes((x, value), type_of, "x[mask] = value")
    if not np.can_cast(dv, x.dtype, casting="same_kind"):
        raise TypeError(
            f"x[mask] = value: cannot write {dv.name} values into a {x.dtype.name} DiskArray "
            "(NumPy's 'same_kind' rule); convert with ooc.astype first."
        )
    with np.errstate(all="ignore"):
        fill = np.asarray(value).astype(x.dtype)
    update_(x, where(mask, fill, x))


def _write_slabs(
    f: PagedFile,
    index: list[_Entry],
    sel_shape: tuple[int, ...],
    value: np.ndarray | ArrayFile,
    vshape: tuple[int, ...],
    budget: MemoryBudget,
) -> None:
    first = index[0]
    rest_box: list[slice] = []  # the bounding box of the selection on axes 1..n, and the view in it
    rest_view: list[int | slice] = []
    for entry in index[1:]:
        if entry[0] == "int":
            rest_box.append(slice(entry[1], entry[1] + 1))
            rest_view.append(0)
            continue
        _, start, step, count = entry
        lo = start if step > 0 else start + step * (count - 1)
        hi = (start + step * (count - 1) + 1) if step > 0 else start + 1
        if count == 0:
            lo = hi = 0
        rest_box.append(slice(lo, hi))
        rest_view.append(
            slice(
                start - lo,
                None if step < 0 and start - lo + step * count < 0 else start - lo + step * count,
                step,
            )
        )
    row_bytes = math.prod(s.stop - s.start for s in rest_box) * f.dtype.itemsize
    if first[0] == "int":
        slabs: list[tuple[int, int, int, int, bool]] = [(first[1], first[1] + 1, 0, 1, True)]
    else:
        _, start, step, count = first
        per = max(1, budget.nbytes // 4 // max(row_bytes * abs(step), 1))
        slabs = []
        for j0 in range(0, count, per):
            j1 = min(count, j0 + per)
            a, b = start + step * j0, start + step * (j1 - 1)
            slabs.append((min(a, b), max(a, b) + 1, j0, j1, False))
    for lo, hi, j0, j1, scalar_row in slabs:
        box = (slice(lo, hi), *rest_box)
        block = f.read(box)
        view: tuple[int | slice, ...]
        if scalar_row:
            view = (0, *rest_view)
        else:
            assert first[0] == "slice"  # a slab of an int first axis is a scalar row
            step = first[2]
            a = first[1] + step * j0 - lo
            stop = a + step * (j1 - j0)
            view = (slice(a, stop if stop >= 0 else None, step), *rest_view)
        with np.errstate(all="ignore"):
            block[view] = _value_block(value, vshape, sel_shape, j0, j1, whole=scalar_row)
        f.write(box, block)
