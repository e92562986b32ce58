"""The array API's creation functions, writing new arrays on disk block by block.

Every array is written one page row at a time (`DiskArray.from_row_blocks`), so
none is ever whole in memory; a small `arange`, `linspace`, `eye` or triangle mask
is held in memory as a small result is (`_creation_args.from_rows`). A 0-d result
is a JAX array, as every 0-d result of `gradpipe.ooc` is. Default dtypes are ``jax.numpy``'s, as
`__array_namespace_info__().default_dtypes()` reports: float32, int32 and
complex64 while ``jax_enable_x64`` is off, float64, int64 and complex128 while it
is on (see `_x64`).
"""

from __future__ import annotations

import builtins
import math
import operator
from collections.abc import Sequence
from typing import Any, cast

import jax.numpy as jnp
import numpy as np
import numpy.typing as npt
from numpy.typing import DTypeLike

from ..arrays._array import ArrayLike, DiskArray, Result
from ..arrays._device import check_device
from ..arrays._hijax import DiskArrayType, type_of
from ..kernels._x64 import default_dtypes, number_dtype
from ._arg_types import BudgetLike, DeviceLike
from ._creation_args import (
    as_shape,
    default_float,
    from_rows,
    python_numbers_dtype,
    shape_dtype_like,
    triangle,
    zero_d,
)
from ._fill_values import FillValue, as_number, fill_dtype, is_traced, traced_full

__all__ = [
    "arange",
    "asarray",
    "empty",
    "empty_like",
    "eye",
    "from_dlpack",
    "full",
    "full_like",
    "linspace",
    "meshgrid",
    "ones",
    "ones_like",
    "tril",
    "triu",
    "zeros",
    "zeros_like",
]


def full(
    shape: int | Sequence[int],
    fill_value: FillValue,
    *,
    dtype: DTypeLike | None = None,
    device: DeviceLike = None,
    budget: BudgetLike = None,
) -> Result:
    """A new array of ``shape`` on disk with every element ``fill_value``.

    **Arguments:**

    - `shape`: an int or a tuple of ints.
    - `fill_value`: a Python number (or bool), a NumPy scalar or a 0-d JAX value
      (a traced one too: the array is then differentiable in it, as ``jnp.full``).
    - `dtype`: the dtype (default: bool for a bool ``fill_value``, the default dtype
      of its kind for a Python number, else ``fill_value``'s own, as `jax.numpy.full`).
    - `device`: ``None`` or `gradpipe.ooc`'s one device.
    - `budget`: the budget the page shape is derived from.
    """
    check_device(device)
    shape = as_shape(shape)
    dtype = np.dtype(dtype) if dtype is not None else fill_dtype(fill_value)
    if is_traced(fill_value):
        return traced_full(shape, fill_value, dtype, budget)
    if not shape:
        return zero_d(as_number(fill_value), dtype)
    return DiskArray.full(shape, as_number(fill_value), dtype, budget=budget)


def zeros(
    shape: int | Sequence[int],
    *,
    dtype: DTypeLike | None = None,
    device: DeviceLike = None,
    budget: BudgetLike = None,
) -> Result:
    """A new array of zeros (a sparse file where the file system allows), of the
    default float dtype unless ``dtype`` is given."""
    return full(shape, 0, dtype=default_float(dtype), device=device, budget=budget)


def ones(
    shape: int | Sequence[int],
    *,
    dtype: DTypeLike | None = None,
    device: DeviceLike = None,
    budget: BudgetLike = None,
) -> Result:
    """A new array of ones, of the default float dtype unless ``dtype`` is given."""
    return full(shape, 1, dtype=default_float(dtype), device=device, budget=budget)


def empty(
    shape: int | Sequence[int],
    *,
    dtype: DTypeLike | None = None,
    device: DeviceLike = None,
    budget: BudgetLike = None,
) -> Result:
    """A new array whose values are unspecified (zeros here: a sparse new file)."""
    return zeros(shape, dtype=dtype, device=device, budget=budget)


def full_like(
    x: ArrayLike,
    /,
    fill_value: FillValue,
    *,
    dtype: DTypeLike | None = None,
    device: DeviceLike = None,
    budget: BudgetLike = None,
) -> Result:
    """A new array of ``x``'s shape (and dtype, unless given) filled with ``fill_value``
    (a number, or a 0-d JAX value, traced too: see `full`)."""
    shape, dtype = shape_dtype_like(x, dtype)
    if is_traced(fill_value):  # converted to dtype as jnp.full_like does
        check_device(device)
        return traced_full(shape, fill_value, dtype, budget, like=x)
    if dtype.kind in "iub" and isinstance(fill_value, float) and not fill_value.is_integer():
        raise TypeError(f"full_like: fill value {fill_value} for a {dtype.name} array.")
    return full(shape, fill_value, dtype=dtype, device=device, budget=budget)


def zeros_like(
    x: ArrayLike,
    /,
    *,
    dtype: DTypeLike | None = None,
    device: DeviceLike = None,
    budget: BudgetLike = None,
) -> Result:
    """A new array of zeros of ``x``'s shape and dtype (unless given)."""
    return full_like(x, 0, dtype=dtype, device=device, budget=budget)


def ones_like(
    x: ArrayLike,
    /,
    *,
    dtype: DTypeLike | None = None,
    device: DeviceLike = None,
    budget: BudgetLike = None,
) -> Result:
    """A new array of ones of ``x``'s shape and dtype (unless given)."""
    return full_like(x, 1, dtype=dtype, device=device, budget=budget)


def empty_like(
    x: ArrayLike,
    /,
    *,
    dtype: DTypeLike | None = None,
    device: DeviceLike = None,
    budget: BudgetLike = None,
) -> Result:
    """A new array of ``x``'s shape and dtype (unless given), values unspecified (zeros)."""
    return zeros_like(x, dtype=dtype, device=device, budget=budget)


def arange(
    start: float,
    /,
    stop: float | None = None,
    step: float = 1,
    *,
    dtype: DTypeLike | None = None,
    device: DeviceLike = None,
    budget: BudgetLike = None,
) -> Result:
    """Evenly spaced values in ``[start, stop)``, written block by block (as `np.arange`);
    the default dtype is the default int for ints, else the default float (or complex)."""
    check_device(device)
    if stop is None:
        start, stop = 0, start
    if step == 0:
        raise ValueError("arange: step must not be zero.")
    numbers = (start, stop, step)
    if dtype is None:
        dtype = np.result_type(*[number_dtype(v) for v in numbers])
    dtype = np.dtype(dtype)
    n = builtins.max(0, math.ceil((stop - start) / step))
    if dtype.kind in "iu":

        def rows(a: int, b: int) -> np.ndarray:
            return (start + np.arange(a, b, dtype=np.int64) * step).astype(dtype)

    else:
        work = np.result_type(dtype, np.float64) if dtype.kind != "c" else dtype

        def rows(a: int, b: int) -> np.ndarray:
            # as NumPy fills: the first value plus i times the step
            return (np.asarray(start, work) + np.arange(a, b, dtype=work) * step).astype(dtype)

    return from_rows((n,), dtype, rows, budget)


def linspace(
    start: complex,
    stop: complex,
    /,
    num: int,
    *,
    dtype: DTypeLike | None = None,
    device: DeviceLike = None,
    endpoint: bool = True,
    budget: BudgetLike = None,
) -> Result:
    """``num`` evenly spaced values from ``start`` to ``stop`` (as `np.linspace`), of
    the default float (or complex) dtype unless ``dtype`` is given; computed in 64
    bits and rounded once."""
    check_device(device)
    num = operator.index(num)
    if num < 0:
        raise ValueError(f"linspace: num must be non-negative, got {num}.")
    if dtype is None:
        complex_ = isinstance(start, complex) or isinstance(stop, complex)
        dtype = default_dtypes()["complex floating" if complex_ else "real floating"]
    dtype = np.dtype(dtype)
    div = (num - 1) if endpoint else num
    work = np.complex128 if dtype.kind == "c" else np.float64
    step = (np.asarray(stop, work) - np.asarray(start, work)) / div if div > 0 else None

    def rows(a: int, b: int) -> np.ndarray:
        i = np.arange(a, b, dtype=work)
        if step is None:
            out = np.full(b - a, start, work)
        else:
            out = i * step + np.asarray(start, work)
        if endpoint and num > 1 and b == num:
            out[-1] = stop
        return out.astype(dtype)

    return from_rows((num,), dtype, rows, budget)


def eye(
    n_rows: int,
    n_cols: int | None = None,
    /,
    *,
    k: int = 0,
    dtype: DTypeLike | None = None,
    device: DeviceLike = None,
    budget: BudgetLike = None,
) -> Result:
    """A 2-D array with ones on the ``k``-th diagonal and zeros elsewhere (of the
    default float dtype unless ``dtype`` is given)."""
    check_device(device)
    n_cols = n_rows if n_cols is None else n_cols
    dtype = default_float(dtype)
    # a diagonal past the last row or column is all zeros whatever its distance
    # (so any Python int will do: NumPy's index arithmetic takes 64 bits)
    k = max(-n_rows, min(int(k), n_cols))

    def rows(a: int, b: int) -> np.ndarray:
        out = np.zeros((b - a, n_cols), dtype)
        r = np.arange(a, b)
        c = r + k
        ok = (c >= 0) & (c < n_cols)
        out[(r - a)[ok], c[ok]] = 1
        return out

    return from_rows(as_shape((n_rows, n_cols)), dtype, rows, budget)


def tril(x: ArrayLike, /, *, k: int = 0, budget: BudgetLike = None) -> Result:
    """``x`` with the elements above the ``k``-th diagonal of its last two axes zeroed;
    differentiable."""
    return triangle(x, k, True, "tril", budget)


def triu(x: ArrayLike, /, *, k: int = 0, budget: BudgetLike = None) -> Result:
    """``x`` with the elements below the ``k``-th diagonal of its last two axes zeroed;
    differentiable."""
    return triangle(x, k, False, "triu", budget)


def asarray(
    obj: ArrayLike | npt.ArrayLike,
    /,
    *,
    dtype: DTypeLike | None = None,
    device: DeviceLike = None,
    copy: bool | None = None,
    budget: BudgetLike = None,
) -> Result:
    """``obj`` as an array of this namespace.

    A `DiskArray` is returned as it is (converted if ``dtype`` differs, copied if
    ``copy=True``); NumPy and JAX arrays, nested sequences and Python scalars are
    written to a new file (a 0-d one becomes a 0-d JAX array). Python numbers and
    lists of them take the default dtypes (of the widest kind among them), as in
    ``jax.numpy``; NumPy arrays keep their dtype. ``copy=False`` is refused when a
    copy is needed, as the standard says.
    """
    check_device(device)
    t = type_of(obj)
    if t is not None:
        from ._elementwise import astype

        same = dtype is None or np.dtype(dtype) == t.dtype
        if copy is False and not same:
            raise ValueError("asarray: copy=False, but converting the dtype needs a copy.")
        disk = cast("Result", obj)  # a DiskArray, or its tracer: it has a type
        if same and not copy:
            return disk
        return astype(disk, dtype if dtype is not None else t.dtype, budget=budget)
    if copy is False and not isinstance(obj, jnp.ndarray):
        raise ValueError(
            "asarray: copy=False, but a new DiskArray is always a copy of in-memory data."
        )
    if dtype is None:
        dtype = python_numbers_dtype(obj)
    array = np.asarray(obj, dtype=dtype)
    if array.dtype == object or array.dtype.kind in "USVMm":
        raise TypeError(f"asarray: cannot make an array of {array.dtype} values from {obj!r}.")
    if array.shape == ():
        return zero_d(array, array.dtype)
    return DiskArray.from_numpy(array, budget=budget)


def from_dlpack(
    x: Any,
    /,
    *,
    device: DeviceLike = None,
    copy: bool | None = None,
    budget: BudgetLike = None,
) -> Result:
    """A DiskArray holding a copy of ``x``, an object with a DLPack buffer (a NumPy,
    JAX or PyTorch array): DLPack shares memory, and a DiskArray's data is on disk, so
    ``copy=False`` is refused."""
    check_device(device)
    if copy is False:
        raise ValueError(
            "from_dlpack: copy=False, but a DiskArray cannot share an in-memory buffer; "
            "its data is always a copy on disk."
        )
    return asarray(np.from_dlpack(x), budget=budget)


def meshgrid(*arrays: ArrayLike, indexing: str = "xy", budget: BudgetLike = None) -> list[Result]:
    """Coordinate grids from 1-D arrays, as `np.meshgrid`: a list of arrays of the grid's
    shape (``indexing="xy"`` swaps its first two axes, ``"ij"`` keeps them), each
    written to disk. Differentiable in every input."""
    from ._manipulation import broadcast_to, reshape

    if indexing not in ("xy", "ij"):
        raise ValueError(f"meshgrid: indexing must be 'xy' or 'ij', got {indexing!r}.")
    types: list[DiskArrayType] = []
    for i, a in enumerate(arrays):
        t = type_of(a)
        if t is None or len(t.shape) != 1:
            raise ValueError(f"meshgrid: arrays[{i}] must be a 1-D DiskArray.")
        types.append(t)
    dtypes = {t.dtype for t in types}
    if len(dtypes) > 1:
        raise TypeError(
            f"meshgrid: the arrays must share one dtype, got {sorted(map(str, dtypes))}."
        )
    sides = [t.shape[0] for t in types]
    if indexing == "xy" and len(sides) > 1:
        sides[0], sides[1] = sides[1], sides[0]
    out = []
    for i, a in enumerate(arrays):
        axis = (1 - i if i < 2 else i) if indexing == "xy" and len(arrays) > 1 else i
        shape = [1] * len(arrays)
        shape[axis] = types[i].shape[0]
        out.append(broadcast_to(reshape(a, tuple(shape)), tuple(sides), budget=budget))
    return out
