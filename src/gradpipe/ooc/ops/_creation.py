"""The array API's creation functions, writing new arrays on disk block by block.

Every array is written one page row at a time (`DiskArray.from_row_blocks`), so
none is ever whole in memory. A 0-d result is a JAX array, as every 0-d result of
`gradpipe.ooc` is. Default dtypes are ``jax.numpy``'s, as
`__array_namespace_info__().default_dtypes()` reports: float32, int32 and
complex64 while ``jax_enable_x64`` is off, float64, int64 and complex128 while it
is on (see `_x64`).
"""

from __future__ import annotations

import builtins
import math
import operator

import jax.numpy as jnp
import numpy as np

from ..arrays._array import DiskArray
from ..arrays._device import check_device
from ..arrays._hijax import type_of
from ..kernels._x64 import default_dtypes, jax_value_dtype, number_dtype

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


def _shape(shape) -> tuple[int, ...]:
    if isinstance(shape, (int, np.integer)) and not isinstance(shape, bool):
        shape = (shape,)
    try:
        shape = tuple(operator.index(n) for n in shape)
    except TypeError:
        raise TypeError(f"a shape must be an int or a tuple of ints, got {shape!r}.") from None
    if any(n < 0 for n in shape):
        raise ValueError(f"negative dimensions are not allowed, got shape {shape}.")
    return shape


def _default_float(dtype=None) -> np.dtype:
    return np.dtype(dtype) if dtype is not None else default_dtypes()["real floating"]


def _zero_d(value, dtype) -> jnp.ndarray:
    """A 0-d result: a JAX array, of a 32-bit dtype for a 64-bit one while x64 is off."""
    value = np.asarray(value, dtype)
    return jnp.asarray(value, jax_value_dtype(value.dtype, "a 0-d array"))


def _from_rows(shape, dtype, rows, budget):
    """A DiskArray of ``shape`` whose rows ``a:b`` are ``rows(a, b)``."""
    dtype = np.dtype(dtype)
    if not shape:
        return _zero_d(rows(0, 1), dtype)
    return DiskArray.from_row_blocks(shape, dtype, rows, budget=budget)


def full(shape, fill_value, *, dtype=None, device=None, budget=None):
    """A new array of ``shape`` on disk with every element ``fill_value``.

    **Arguments:**

    - `shape`: an int or a tuple of ints.
    - `fill_value`: a Python number (or bool).
    - `dtype`: the dtype (default: bool for a bool ``fill_value``, else the default
      dtype of its kind, as `jax.numpy.full`).
    - `device`: ``None`` or `gradpipe.ooc`'s one device.
    - `budget`: the budget the page shape is derived from.
    """
    check_device(device)
    shape = _shape(shape)
    dtype = np.dtype(dtype) if dtype is not None else number_dtype(fill_value)
    if not shape:
        return _zero_d(fill_value, dtype)
    return DiskArray.full(shape, fill_value, dtype, budget=budget)


def zeros(shape, *, dtype=None, device=None, budget=None):
    """A new array of zeros (a sparse file where the file system allows), of the
    default float dtype unless ``dtype`` is given."""
    return full(shape, 0, dtype=_default_float(dtype), device=device, budget=budget)


def ones(shape, *, dtype=None, device=None, budget=None):
    """A new array of ones, of the default float dtype unless ``dtype`` is given."""
    return full(shape, 1, dtype=_default_float(dtype), device=device, budget=budget)


def empty(shape, *, dtype=None, device=None, budget=None):
    """A new array whose values are unspecified (zeros here: a sparse new file)."""
    return zeros(shape, dtype=dtype, device=device, budget=budget)


def _like(x, dtype):
    t = type_of(x)
    if t is None:
        x = np.asarray(x)
        return x.shape, np.dtype(x.dtype if dtype is None else dtype)
    return t.shape, np.dtype(t.dtype if dtype is None else dtype)


def full_like(x, /, fill_value, *, dtype=None, device=None, budget=None):
    """A new array of ``x``'s shape (and dtype, unless given) filled with ``fill_value``."""
    shape, dtype = _like(x, dtype)
    if dtype.kind in "iub" and isinstance(fill_value, float) and not fill_value.is_integer():
        raise TypeError(f"full_like: fill value {fill_value} for a {dtype.name} array.")
    return full(shape, fill_value, dtype=dtype, device=device, budget=budget)


def zeros_like(x, /, *, dtype=None, device=None, budget=None):
    """A new array of zeros of ``x``'s shape and dtype (unless given)."""
    return full_like(x, 0, dtype=dtype, device=device, budget=budget)


def ones_like(x, /, *, dtype=None, device=None, budget=None):
    """A new array of ones of ``x``'s shape and dtype (unless given)."""
    return full_like(x, 1, dtype=dtype, device=device, budget=budget)


def empty_like(x, /, *, dtype=None, device=None, budget=None):
    """A new array of ``x``'s shape and dtype (unless given), values unspecified (zeros)."""
    return zeros_like(x, dtype=dtype, device=device, budget=budget)


def arange(start, /, stop=None, step=1, *, dtype=None, device=None, budget=None):
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

        def rows(a, b):
            return (start + np.arange(a, b, dtype=np.int64) * step).astype(dtype)

    else:
        work = np.result_type(dtype, np.float64) if dtype.kind != "c" else dtype

        def rows(a, b):
            # as NumPy fills: the first value plus i times the step
            return (np.asarray(start, work) + np.arange(a, b, dtype=work) * step).astype(dtype)

    return _from_rows((n,), dtype, rows, budget)


def linspace(start, stop, /, num, *, dtype=None, device=None, endpoint=True, budget=None):
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

    def rows(a, b):
        i = np.arange(a, b, dtype=work)
        if step is None:
            out = np.full(b - a, start, work)
        else:
            out = i * step + np.asarray(start, work)
        if endpoint and num > 1 and b == num:
            out[-1] = stop
        return out.astype(dtype)

    return _from_rows((num,), dtype, rows, budget)


def eye(n_rows, n_cols=None, /, *, k=0, dtype=None, device=None, budget=None):
    """A 2-D array with ones on the ``k``-th diagonal and zeros elsewhere (of the
    default float dtype unless ``dtype`` is given)."""
    check_device(device)
    n_cols = n_rows if n_cols is None else n_cols
    dtype = _default_float(dtype)
    # a diagonal past the last row or column is all zeros whatever its distance
    # (so any Python int will do: NumPy's index arithmetic takes 64 bits)
    k = max(-n_rows, min(int(k), n_cols))

    def rows(a, b):
        out = np.zeros((b - a, n_cols), dtype)
        r = np.arange(a, b)
        c = r + k
        ok = (c >= 0) & (c < n_cols)
        out[(r - a)[ok], c[ok]] = 1
        return out

    return _from_rows(_shape((n_rows, n_cols)), dtype, rows, budget)


def _triangle(x, k, lower: bool, name: str, budget):
    from ._elementwise import where

    t = type_of(x)
    if t is None or len(t.shape) < 2:
        raise ValueError(f"{name}: x must be an array of at least 2 dimensions.")
    n, m = t.shape[-2:]

    def rows(a, b):
        r = np.arange(a, b)[:, None]
        c = np.arange(m)[None, :]
        return (c - r <= k) if lower else (c - r >= k)

    mask = _from_rows((n, m), bool, rows, budget)
    zero = np.zeros((), t.dtype)
    return where(mask, x, zero, budget=budget)


def tril(x, /, *, k=0, budget=None):
    """``x`` with the elements above the ``k``-th diagonal of its last two axes zeroed;
    differentiable."""
    return _triangle(x, k, True, "tril", budget)


def triu(x, /, *, k=0, budget=None):
    """``x`` with the elements below the ``k``-th diagonal of its last two axes zeroed;
    differentiable."""
    return _triangle(x, k, False, "triu", budget)


def asarray(obj, /, *, dtype=None, device=None, copy=None, budget=None):
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
        if same and not copy:
            return obj
        return astype(obj, dtype if dtype is not None else t.dtype, budget=budget)
    if copy is False and not isinstance(obj, jnp.ndarray):
        raise ValueError(
            "asarray: copy=False, but a new DiskArray is always a copy of in-memory data."
        )
    if dtype is None:
        dtype = _python_numbers_dtype(obj)
    array = np.asarray(obj, dtype=dtype)
    if array.dtype == object or array.dtype.kind in "USVMm":
        raise TypeError(f"asarray: cannot make an array of {array.dtype} values from {obj!r}.")
    if array.shape == ():
        return _zero_d(array, array.dtype)
    return DiskArray.from_numpy(array, budget=budget)


def _python_numbers_dtype(obj) -> np.dtype | None:
    """The default dtype for a Python number or a (nested) list or tuple of them:
    that of the widest kind among them (bool < int < float < complex), float for an
    empty list; None when anything else is inside."""
    kinds = (bool, int, float, complex)  # narrowest first (a bool is an int too)
    widest, todo = None, [obj]
    while todo:
        item = todo.pop()
        if isinstance(item, (list, tuple)):
            todo.extend(item)
            continue
        kind = next((k for k in kinds if isinstance(item, k)), None)
        if kind is None:
            return None
        if widest is None or kinds.index(kind) > kinds.index(widest):
            widest = kind
    return number_dtype((widest or float)(0))


def from_dlpack(x, /, *, device=None, copy=None, budget=None):
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


def meshgrid(*arrays, indexing: str = "xy", budget=None):
    """Coordinate grids from 1-D arrays, as `np.meshgrid`: a list of arrays of the grid's
    shape (``indexing="xy"`` swaps its first two axes, ``"ij"`` keeps them), each
    written to disk. Differentiable in every input."""
    from ._manipulation import broadcast_to, reshape

    if indexing not in ("xy", "ij"):
        raise ValueError(f"meshgrid: indexing must be 'xy' or 'ij', got {indexing!r}.")
    types = [type_of(a) for a in arrays]
    for i, t in enumerate(types):
        if t is None or len(t.shape) != 1:
            raise ValueError(f"meshgrid: arrays[{i}] must be a 1-D DiskArray.")
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
