"""The array API standard's `fft` extension, out of core.

Every transform is one or more passes of a 1-D FFT along one axis (`CoreAxes`: each
tile holds whole lines along that axis, as many lines as the budget allows); an
n-dimensional transform is a pass per axis, so one line, never the whole array, has
to fit in memory. Gradients are JAX's VJPs of the same 1-D transforms, evaluated
with NumPy, so they equal `jax.numpy.fft`'s. `fftfreq` and `rfftfreq` are creation
functions; `fftshift` and `ifftshift` are `roll`s.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import ModuleType
from typing import Any, cast

import jax.numpy as jnp
import numpy as np
from numpy.typing import DTypeLike

from ..arrays._array import ArrayLike, Result
from ..arrays._hijax import type_of
from ..kernels._x64 import default_dtypes
from ._arg_types import BudgetLike, DeviceLike
from ._core_axes import core_axes
from ._creation import arange
from ._elementwise import astype, divide, subtract, where
from ._manip_args import dtype_of, normalize_axes, normalize_axis, shape_of
from ._manipulation import roll

__all__ = [
    "fft",
    "fftfreq",
    "fftn",
    "fftshift",
    "hfft",
    "ifft",
    "ifftn",
    "ifftshift",
    "ihfft",
    "irfft",
    "irfftn",
    "rfft",
    "rfftfreq",
    "rfftn",
]

_NORMS = ("backward", "ortho", "forward")


def _kernel(xp: ModuleType, x: Any, *, kind: str, n: int | None, axis: int, norm: str) -> Any:
    return getattr(xp.fft, kind)(x, n=n, axis=axis, norm=norm)


def _check(x: ArrayLike, kind: str, norm: str) -> None:
    if norm not in _NORMS:
        raise ValueError(f"{kind}: norm must be one of {_NORMS}, got {norm!r}.")
    dtype = dtype_of(x)
    real_input = kind in ("rfft", "ihfft")
    if dtype.kind not in ("f" if real_input else "fc"):
        wanted = "a real floating" if real_input else "a floating or complex"
        raise TypeError(f"{kind} needs {wanted} array, got {dtype.name}.")
    if not shape_of(x):
        raise ValueError(f"{kind}: a 0-d array has no axis to transform along.")


def _pass(
    x: ArrayLike, kind: str, n: int | None, axis: int, norm: str, budget: BudgetLike
) -> Result:
    """One 1-D transform ``kind`` along ``axis`` (any sign), ``n`` points."""
    shape = shape_of(x)
    axis = normalize_axis(axis, len(shape), kind)
    if n is not None:
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
            raise ValueError(f"{kind}: n must be a positive int, got {n!r}.")
        n = int(n)
    at = axis - len(shape)
    return core_axes(
        _kernel,
        kind,
        x,
        core=((at,),),
        out_core=(at,),
        budget=budget,
        kind=kind,
        n=n,
        axis=at,
        norm=norm,
    )


def _one(
    kind: str, x: ArrayLike, n: int | None, axis: int, norm: str, budget: BudgetLike
) -> Result:
    _check(x, kind, norm)
    return _pass(x, kind, n, axis, norm, budget)


def fft(
    x: ArrayLike,
    /,
    *,
    n: int | None = None,
    axis: int = -1,
    norm: str = "backward",
    budget: BudgetLike = None,
) -> Result:
    """The 1-D discrete Fourier transform of ``x`` along ``axis``, out of core.

    **Arguments:**

    - `x`: a floating or complex `DiskArray`; real input is taken as complex.
    - `n`: the transform's length (``x`` is cropped or zero-padded to it; default
      its length along ``axis``).
    - `axis`: the axis transformed.
    - `norm`: ``"backward"`` (no scaling), ``"ortho"`` (``1/sqrt(n)``) or
      ``"forward"`` (``1/n``).
    - `budget`: a `MemoryBudget` for this call; one line along ``axis`` must fit.

    **Returns:** a complex `DiskArray` (complex64 from float32 or complex64 input).
    Differentiable.
    """
    return _one("fft", x, n, axis, norm, budget)


def ifft(
    x: ArrayLike,
    /,
    *,
    n: int | None = None,
    axis: int = -1,
    norm: str = "backward",
    budget: BudgetLike = None,
) -> Result:
    """The inverse of `fft` along ``axis`` (``"backward"`` divides by ``n``); see `fft`."""
    return _one("ifft", x, n, axis, norm, budget)


def rfft(
    x: ArrayLike,
    /,
    *,
    n: int | None = None,
    axis: int = -1,
    norm: str = "backward",
    budget: BudgetLike = None,
) -> Result:
    """The FFT of real ``x`` along ``axis``: its ``n//2 + 1`` non-negative
    frequencies; see `fft`."""
    return _one("rfft", x, n, axis, norm, budget)


def irfft(
    x: ArrayLike,
    /,
    *,
    n: int | None = None,
    axis: int = -1,
    norm: str = "backward",
    budget: BudgetLike = None,
) -> Result:
    """The inverse of `rfft`: ``n`` real points (default ``2*(m - 1)``) from ``m``
    non-negative frequencies along ``axis``; see `fft`."""
    return _one("irfft", x, n, axis, norm, budget)


def hfft(
    x: ArrayLike,
    /,
    *,
    n: int | None = None,
    axis: int = -1,
    norm: str = "backward",
    budget: BudgetLike = None,
) -> Result:
    """The FFT of a signal with Hermitian symmetry given by its first half: ``n`` real
    points (default ``2*(m - 1)``); see `fft`."""
    return _one("hfft", x, n, axis, norm, budget)


def ihfft(
    x: ArrayLike,
    /,
    *,
    n: int | None = None,
    axis: int = -1,
    norm: str = "backward",
    budget: BudgetLike = None,
) -> Result:
    """The inverse of `hfft`: the ``n//2 + 1`` first points of real ``x``'s inverse
    FFT; see `fft`."""
    return _one("ihfft", x, n, axis, norm, budget)


# ------------------------------------------------------------ n-dimensional


def _plan(
    x: ArrayLike, s: Sequence[int] | None, axes: Sequence[int] | None, kind: str
) -> tuple[tuple[int, ...], list[int | None]]:
    """The axes transformed and their lengths, as the standard defaults them."""
    ndim = len(shape_of(x))
    if s is not None:
        s = tuple(s)
    if axes is None:
        axes = tuple(range(ndim)) if s is None else tuple(range(ndim - len(s), ndim))
    else:
        axes = normalize_axes(tuple(axes), ndim, kind)
    lengths: list[int | None]
    if s is None:
        lengths = [None] * len(axes)
    elif len(s) != len(axes):
        raise ValueError(f"{kind}: s {s} and axes {axes} must have the same length.")
    else:
        lengths = [None if k == -1 else k for k in s]
    if not axes:
        raise ValueError(f"{kind}: there must be at least one axis to transform.")
    return axes, list(lengths)


def _nd(
    kind: str,
    x: ArrayLike,
    s: Sequence[int] | None,
    axes: Sequence[int] | None,
    norm: str,
    budget: BudgetLike,
) -> Result:
    _check(x, kind, norm)
    ax, lengths = _plan(x, s, axes, kind + "n")
    one_d = {"rfft": "fft", "irfft": "ifft"}.get(kind, kind)
    if kind == "rfft":  # the real pass first, on the last axis
        x = _pass(x, "rfft", lengths[-1], ax[-1], norm, budget)
        ax, lengths = ax[:-1], lengths[:-1]
    last = None
    if kind == "irfft":  # the real pass last, on the last axis
        last, ax, lengths = (ax[-1], lengths[-1]), ax[:-1], lengths[:-1]
    for a, k in zip(reversed(ax), reversed(lengths)):
        x = _pass(x, one_d, k, a, norm, budget)
    if last is not None:
        x = _pass(x, "irfft", last[1], last[0], norm, budget)
    return cast(Result, x)  # one pass at least: `_plan` refuses no axes


def fftn(
    x: ArrayLike,
    /,
    *,
    s: Sequence[int] | None = None,
    axes: Sequence[int] | None = None,
    norm: str = "backward",
    budget: BudgetLike = None,
) -> Result:
    """The n-D discrete Fourier transform, as one 1-D `fft` pass per axis.

    ``s`` gives the lengths along ``axes`` (``-1``: the axis's own); with ``s`` and
    no ``axes``, the last ``len(s)`` axes; with neither, every axis.
    """
    return _nd("fft", x, s, axes, norm, budget)


def ifftn(
    x: ArrayLike,
    /,
    *,
    s: Sequence[int] | None = None,
    axes: Sequence[int] | None = None,
    norm: str = "backward",
    budget: BudgetLike = None,
) -> Result:
    """The inverse of `fftn`, one 1-D `ifft` pass per axis; see `fftn`."""
    return _nd("ifft", x, s, axes, norm, budget)


def rfftn(
    x: ArrayLike,
    /,
    *,
    s: Sequence[int] | None = None,
    axes: Sequence[int] | None = None,
    norm: str = "backward",
    budget: BudgetLike = None,
) -> Result:
    """The n-D FFT of real ``x``: `rfft` along the last of ``axes``, then `fft`
    along the others; see `fftn`."""
    return _nd("rfft", x, s, axes, norm, budget)


def irfftn(
    x: ArrayLike,
    /,
    *,
    s: Sequence[int] | None = None,
    axes: Sequence[int] | None = None,
    norm: str = "backward",
    budget: BudgetLike = None,
) -> Result:
    """The inverse of `rfftn`: `ifft` along all but the last of ``axes``, then
    `irfft` along it (``s[-1]`` real points, default ``2*(m - 1)``); see `fftn`."""
    return _nd("irfft", x, s, axes, norm, budget)


# ------------------------------------------------------ frequencies and shifts


def _freq_dtype(dtype: DTypeLike | None, fn: str) -> np.dtype:
    dtype = default_dtypes()["real floating"] if dtype is None else np.dtype(dtype)
    if dtype.kind != "f":
        raise TypeError(f"{fn}: dtype must be a real floating dtype, got {dtype.name}.")
    return dtype


def _check_n(n: object, fn: str) -> int:
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"{fn}: n must be a positive int, got {n!r}.")
    return int(n)


def fftfreq(
    n: int,
    /,
    *,
    d: float = 1.0,
    dtype: DTypeLike | None = None,
    device: DeviceLike = None,
    budget: BudgetLike = None,
) -> Result:
    """The sample frequencies of an ``n``-point `fft` with sample spacing ``d``:
    ``[0, 1, ..., (n-1)//2, -(n//2), ..., -1] / (d*n)``, a `DiskArray` of ``dtype``
    (default: the default float dtype, float32 while ``jax_enable_x64`` is off)."""
    n = _check_n(n, "fftfreq")
    dtype = _freq_dtype(dtype, "fftfreq")
    k = arange(n, dtype=np.int64, device=device, budget=budget)
    k = where(k < (n + 1) // 2, k, subtract(k, n, budget=budget), budget=budget)
    return astype(divide(k, float(d * n), budget=budget), dtype, budget=budget)


def rfftfreq(
    n: int,
    /,
    *,
    d: float = 1.0,
    dtype: DTypeLike | None = None,
    device: DeviceLike = None,
    budget: BudgetLike = None,
) -> Result:
    """The sample frequencies of an ``n``-point `rfft` with sample spacing ``d``:
    ``[0, 1, ..., n//2] / (d*n)``, a `DiskArray` of ``dtype`` (default as `fftfreq`'s)."""
    n = _check_n(n, "rfftfreq")
    dtype = _freq_dtype(dtype, "rfftfreq")
    k = arange(n // 2 + 1, dtype=np.int64, device=device, budget=budget)
    return astype(divide(k, float(d * n), budget=budget), dtype, budget=budget)


def _shift(
    x: ArrayLike, axes: int | Sequence[int] | None, sign: int, fn: str, budget: BudgetLike
) -> Result:
    shape = shape_of(x)
    axes = tuple(range(len(shape))) if axes is None else normalize_axes(axes, len(shape), fn)
    if not axes:  # no axis to shift: x as it is (in memory, a JAX array, as jnp gives)
        return cast(Result, x) if type_of(x) is not None else jnp.asarray(x)
    shifts = tuple(sign * (shape[a] // 2) for a in axes)
    return roll(x, shifts, axis=axes, budget=budget)


def fftshift(
    x: ArrayLike, /, *, axes: int | Sequence[int] | None = None, budget: BudgetLike = None
) -> Result:
    """``x`` with the zero frequency moved to the middle along ``axes`` (default all):
    a `roll` by ``n//2``. Differentiable."""
    return _shift(x, axes, 1, "fftshift", budget)


def ifftshift(
    x: ArrayLike, /, *, axes: int | Sequence[int] | None = None, budget: BudgetLike = None
) -> Result:
    """The inverse of `fftshift`: a `roll` by ``-(n//2)``. Differentiable."""
    return _shift(x, axes, -1, "ifftshift", budget)
