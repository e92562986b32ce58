"""`pad`: NumPy's constant padding of a DiskArray, out of core.

Not in the array API standard, but xarray asks an array's namespace for it to
``shift`` and ``pad`` DataArrays. Each padded axis is a `concat` of a constant block
(`full`), the array and another constant block, so the result is a new array whose
gradient with respect to the input is the gradient's middle part, as in JAX. Only
``mode="constant"`` is provided (the mode xarray's ``shift`` uses).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import jax.numpy as jnp
import numpy as np
import numpy.typing as npt

from ..arrays._array import ArrayLike, Result
from ..arrays._hijax import type_of
from ._arg_types import BudgetLike
from ._creation import full
from ._fill_values import is_traced, traced_full
from ._manipulation import concat

__all__ = ["pad"]

#: A pad width as NumPy spells it: one for all, ``(before, after)``, or a pair per axis.
PadWidth = int | Sequence[int] | Sequence[Sequence[int]]


def _widths(pad_width: PadWidth, ndim: int) -> list[tuple[int, int]]:
    """``pad_width`` in NumPy's spellings as one ``(before, after)`` per axis."""
    w = np.asarray(pad_width, dtype=np.int64)
    if w.ndim == 0:
        w = np.full((ndim, 2), int(w))
    elif w.shape == (2,) or w.shape == (1, 2):
        w = np.broadcast_to(w.reshape(1, 2), (ndim, 2))
    elif w.shape == (1,):
        w = np.full((ndim, 2), int(w[0]))
    if w.shape != (ndim, 2) or (w < 0).any():
        raise ValueError(
            f"pad: pad_width {pad_width!r} must give a non-negative (before, after) for "
            f"each of the {ndim} axes."
        )
    return [(int(b), int(a)) for b, a in w]


def _values(constant_values: npt.ArrayLike, ndim: int) -> list[tuple[Any, Any]]:
    """``constant_values`` as one ``(before, after)`` per axis (Python scalars, or a
    traced 0-d JAX value)."""
    if is_traced(constant_values):
        return [(constant_values, constant_values)] * ndim
    v = np.asarray(constant_values, dtype=object)
    if v.ndim == 0:
        return [(v.item(), v.item())] * ndim
    v = np.broadcast_to(v.reshape(-1, 2) if v.size != 1 else v.reshape(1, 1), (ndim, 2))
    return [(b, a) for b, a in v]


def pad(
    x: ArrayLike,
    pad_width: PadWidth,
    mode: str = "constant",
    *,
    constant_values: npt.ArrayLike = 0,
    budget: BudgetLike = None,
) -> Result:
    """``x`` with ``pad_width`` elements of ``constant_values`` before and after each
    axis (``np.pad`` in constant mode), out of core; the result keeps ``x``'s dtype.
    A traced 0-d ``constant_values`` (a JAX parameter) gets its gradient, the sum of
    the cotangent over the padding."""
    t = type_of(x)
    if t is None:
        return jnp.pad(jnp.asarray(x), pad_width, mode=mode, constant_values=constant_values)
    if mode != "constant":
        raise NotImplementedError(
            f"pad(mode={mode!r}): gradpipe.ooc pads with constants only (mode='constant')."
        )
    shape, dtype = tuple(t.shape), np.dtype(t.dtype)
    widths = _widths(pad_width, len(shape))
    values = _values(constant_values, len(shape))
    out = cast("Result", x)  # a DiskArray, or its tracer
    for axis, ((before, after), (vb, va)) in enumerate(zip(widths, values)):
        if not before and not after:
            continue
        parts: list[Result] = []
        for n, v in ((before, vb), (None, None), (after, va)):
            if n is None:
                parts.append(out)
            elif n:
                side = (*shape[:axis], n, *shape[axis + 1 :])
                if is_traced(v):  # a parameter: no file made while JAX traces
                    parts.append(traced_full(side, v, dtype, budget, like=cast("Result", x)))
                else:
                    parts.append(
                        full(side, np.asarray(v, dtype).item(), dtype=dtype, budget=budget)
                    )
        out = concat(parts, axis=axis, budget=budget)
        shape = (*shape[:axis], shape[axis] + before + after, *shape[axis + 1 :])
    return out
