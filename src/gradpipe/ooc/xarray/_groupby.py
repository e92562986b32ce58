"""Two steps of xarray's ``groupby`` and ``resample``, adjusted for DiskArrays.

xarray computes a grouped reduction (``t.groupby("time.month").mean()``, every
``resample(...)`` reduction, a grouped ``quantile``) as one reduction per group,
stacked; and grouped arithmetic (``t.groupby("time.month") - climatology``) by
expanding the other operand to every step of the group dimension. Two of those
steps do not fit arrays on disk; `install` adjusts them, for grouped objects that
hold concrete DiskArrays (everything else runs xarray's code unchanged):

- **A group reduced to one number.** A group of a 1-D variable (a time series)
  reduced over its one dimension is a 0-d result, which `gradpipe.ooc` returns as a
  JAX value: rounded to 32 bits while x64 is off, and stacked by xarray into an
  in-memory JAX array (float32, int32) rather than a DiskArray. Here such a
  reduction runs over a trailing axis of size 1 added to the group (a view), so its
  result is a one-element DiskArray in NumPy's dtype and value, kept as a 0-d
  DiskArray that xarray stacks with `gradpipe.ooc.stack` into a DiskArray. A grouped
  ``quantile`` of one number (a scalar ``q``) is asked with ``[q]`` and the
  quantile axis taken away afterwards, for the same reason.
- **The other operand of grouped arithmetic.** When the grouped object is chunked
  and the other operand is not (NumPy data; a JAX value traced by ``jax.grad``),
  xarray chunks it with its default chunk manager, dask when installed: a NumPy
  climatology expanded to every time step becomes a dask array that gradpipe then
  computes whole in memory, and a traced value fails (dask cannot hold a JAX
  tracer: ``LinearizeTracer has no attribute _handle``). Here NumPy data is moved
  to disk first (so xarray does not chunk it by the grouped object's chunks, which
  a DiskArray and its coordinates need not share) and expanded as it is read, and
  the operation runs with gradpipe as xarray's chunk manager
  (``xr.set_options(chunk_manager=...)``, for the call), so a traced value is kept
  as it is (`_from_array.from_array`), as under ``jax.jit``.

`install` runs when xarray loads gradpipe's chunk manager (opening or chunking data
with ``chunked_array_type="gradpipe"``, or any call that looks chunk managers up),
and when `gradpipe.ooc` or `gradpipe.ooc.xarray` is imported after xarray. It
wraps four methods of xarray's groupby classes (each wrapper calls the original);
a version of xarray without them is left alone (`installed` then says False).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from ..arrays._array import DiskArray, _is_concrete

__all__ = ["install", "installed"]

#: Marks a wrapper installed here (so `install` is idempotent).
_MARK = "_gradpipe_wrapped"


def _is_disk_array(data: Any) -> bool:
    return isinstance(data, DiskArray) and _is_concrete(data._handle)


def _variables(obj: Any) -> Iterable[Any]:
    variables = getattr(obj, "variables", None)
    if variables is not None:  # a Dataset
        return list(variables.values())
    return [obj.variable]


def holds_disk_arrays(obj: Any) -> bool:
    """Whether the DataArray or Dataset ``obj`` has a concrete DiskArray variable."""
    return any(_is_disk_array(getattr(v, "_data", None)) for v in _variables(obj))


# ---------------------------------------------------------------- one number per group


def _one_number(values: Any, axis: Any) -> bool:
    """Whether reducing ``values`` over ``axis`` leaves a 0-d result of a DiskArray."""
    if not _is_disk_array(values) or values.ndim == 0:
        return False
    if axis is None:
        return True
    axes = {int(a) % values.ndim for a in np.atleast_1d(axis)}
    return len(axes) == values.ndim


def _kept_on_disk(func: Callable[..., Any]) -> Callable[..., Any]:
    """``func`` (one of xarray's reductions), giving a 0-d DiskArray rather than a
    JAX value where it would reduce a DiskArray to one number (see the module)."""

    @functools.wraps(func)
    def reduce(values: Any, axis: Any = None, **kwargs: Any) -> Any:
        if not _one_number(values, axis):
            return func(values, **kwargs) if axis is None else func(values, axis=axis, **kwargs)
        n = values.ndim
        kept = func(values[..., None], axis=0 if n == 1 else tuple(range(n)), **kwargs)
        if isinstance(kept, DiskArray) and kept.shape == (1,):
            return DiskArray.from_numpy(kept.to_numpy(force=True).reshape(()))
        return kept.reshape(()) if getattr(kept, "shape", None) == (1,) else kept

    return reduce


def _reduce(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def reduce(self: Any, func: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        if holds_disk_arrays(self._obj):
            func = _kept_on_disk(func)
        return original(self, func, *args, **kwargs)

    setattr(reduce, _MARK, True)
    return reduce


def _quantile(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def quantile(self: Any, q: Any, *args: Any, **kwargs: Any) -> Any:
        if not (holds_disk_arrays(self._obj) and np.ndim(q) == 0):
            return original(self, q, *args, **kwargs)
        result = original(self, np.atleast_1d(np.asarray(q, dtype=np.float64)), *args, **kwargs)
        return result.squeeze("quantile")

    setattr(quantile, _MARK, True)
    return quantile


# ---------------------------------------------------------------- grouped arithmetic


def _chunked(obj: Any) -> bool:
    arrays = obj.data_vars.values() if hasattr(obj, "data_vars") else [obj]
    return any(a.chunks for a in arrays)


def _binary_op(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def binary_op(self: Any, other: Any, *args: Any, **kwargs: Any) -> Any:
        obj = getattr(self, "_original_obj", self._obj)
        if not holds_disk_arrays(obj):
            return original(self, other, *args, **kwargs)
        import xarray as xr

        with xr.set_options(chunk_manager="gradpipe"):
            # moved to disk here, xarray does not chunk it by the grouped object's
            # chunks: those of a DiskArray and of its coordinates need not agree
            # (each is planned from the budget), which xarray would refuse
            if isinstance(other, (xr.DataArray, xr.Dataset)) and not _chunked(other):
                other = other.chunk(chunked_array_type="gradpipe")
            return original(self, other, *args, **kwargs)

    setattr(binary_op, _MARK, True)
    return binary_op


# ---------------------------------------------------------------- installing


def _targets() -> list[tuple[type, str, Callable[..., Any]]]:
    from xarray.core import groupby

    return [
        (groupby.DataArrayGroupByBase, "reduce", _reduce),
        (groupby.DatasetGroupByBase, "reduce", _reduce),
        (groupby.GroupBy, "quantile", _quantile),
        (groupby.GroupBy, "_binary_op", _binary_op),
    ]


def install() -> None:
    """Wrap xarray's grouped ``reduce``, ``quantile`` and arithmetic (see the module);
    again is a no-op."""
    try:
        targets = _targets()
    except (ImportError, AttributeError):  # another xarray: its own code runs
        return
    for cls, name, wrap in targets:
        current = cls.__dict__.get(name)
        if current is None or getattr(current, _MARK, False):
            continue
        setattr(cls, name, wrap(current))


def installed() -> bool:
    """Whether xarray's groupby classes run the wrappers of this module."""
    try:
        targets = _targets()
    except (ImportError, AttributeError):
        return False
    return all(getattr(cls.__dict__.get(name), _MARK, False) for cls, name, _ in targets)
