"""The array API standard's `linalg` extension, out of core (beyond the products).

Two kinds of function:

- functions of a few entries or of whole axes (`diagonal`, `trace`, `outer`,
  `cross`, `vector_norm`, `matrix_norm`) are written with the namespace's own
  out-of-core functions (reshape and strided indexing, reductions, elementwise
  kernels), so memory stays bounded whatever the matrix size and their gradients
  come with those functions;
- dense per-matrix factorizations (`cholesky`, `det`, `eigh`, `inv`, `qr`, `svd`,
  ...) are `CoreAxes` kernels: each tile holds whole matrices of a stack, as many
  as the budget allows (one matrix must fit; a `MemoryError` says so otherwise).
  The forward pass is NumPy's LAPACK; the gradient is JAX's VJP of the same
  ``jax.numpy.linalg`` function evaluated with NumPy, and a function whose VJP JAX
  refuses (`svd` with ``full_matrices=True``, `matrix_rank`) is refused by name.

Functions returning several arrays return the standard's named tuples; each field
is its own pass over the stack.
"""

from __future__ import annotations

import builtins
import math
from typing import Any, Literal, NamedTuple

import numpy as np

from ._core_axes import core_axes
from ._elementwise import (
    abs,
    astype,
    conj,
    multiply,
    not_equal,
    power,
    real,
    sqrt,
    subtract,
)
from ._layout import getitem
from ._manip_args import dtype_of, is_disk, normalize_axes, normalize_axis, shape_of
from ._manipulation import concat, expand_dims, reshape
from ._reduce import max, min, sum

__all__ = [
    "EighResult",
    "QRResult",
    "SVDResult",
    "SlogdetResult",
    "cholesky",
    "cross",
    "det",
    "diagonal",
    "eigh",
    "eigvalsh",
    "inv",
    "matrix_norm",
    "matrix_power",
    "matrix_rank",
    "outer",
    "pinv",
    "qr",
    "slogdet",
    "solve",
    "svd",
    "svdvals",
    "trace",
    "vector_norm",
]


class EighResult(NamedTuple):
    eigenvalues: Any
    eigenvectors: Any


class QRResult(NamedTuple):
    Q: Any
    R: Any


class SlogdetResult(NamedTuple):
    sign: Any
    logabsdet: Any


class SVDResult(NamedTuple):
    U: Any
    S: Any
    Vh: Any


# ------------------------------------------------- entries and whole axes


def _matrix_shape(x, fn: str) -> tuple[int, ...]:
    shape = shape_of(x)
    if len(shape) < 2:
        raise ValueError(f"{fn} needs a stack of matrices (at least 2 dimensions), got {shape}.")
    return shape


def diagonal(x, /, *, offset: int = 0, budget=None):
    """The ``offset`` diagonal of each matrix of ``x`` (``offset > 0`` above the main
    one), out of core: a strided slice of the matrices seen as rows of ``M*N``."""
    shape = _matrix_shape(x, "diagonal")
    if isinstance(offset, bool) or not isinstance(offset, (int, np.integer)):
        raise TypeError(f"diagonal: offset must be an int, got {offset!r}.")
    m, n = shape[-2:]
    k = int(offset)
    length = builtins.max(0, builtins.min(m, n - k) if k >= 0 else builtins.min(m + k, n))
    start = k if k >= 0 else -k * n
    stop = start + (length - 1) * (n + 1) + 1 if length else start
    flat = reshape(x, (*shape[:-2], m * n), budget=budget)
    return getitem(flat, (Ellipsis, slice(start, stop, n + 1)), budget=budget)


def trace(x, /, *, offset: int = 0, dtype=None, budget=None):
    """The sum of the ``offset`` diagonal of each matrix of ``x``; ``dtype`` as in `sum`."""
    return sum(diagonal(x, offset=offset, budget=budget), axis=-1, dtype=dtype, budget=budget)


def outer(x1, x2, /, *, budget=None):
    """The outer product of two vectors: ``out[i, j] = x1[i] * x2[j]``, out of core."""
    s1, s2 = shape_of(x1), shape_of(x2)
    if len(s1) != 1 or len(s2) != 1:
        raise ValueError(f"outer needs two 1-D arrays, got shapes {s1} and {s2}.")
    return multiply(reshape(x1, (s1[0], 1), budget=budget), x2, budget=budget)


def cross(x1, x2, /, *, axis: int = -1, budget=None):
    """The cross product of 3-element vectors along ``axis`` (other axes broadcast)."""
    s1, s2 = shape_of(x1), shape_of(x2)
    if not s1 or not s2:
        raise ValueError("cross needs arrays of at least one dimension.")
    a1 = normalize_axis(axis, len(s1), "cross") - len(s1)
    a2 = normalize_axis(axis, len(s2), "cross") - len(s2)
    if a1 != a2:
        raise ValueError(f"cross: axis {axis} names different axes of shapes {s1} and {s2}.")
    if s1[a1] != 3 or s2[a2] != 3:
        raise ValueError(
            f"cross: the vectors along axis {axis} must have 3 elements, got shapes {s1} and {s2}."
        )

    def part(x, i):
        return getitem(x, (Ellipsis, slice(i, i + 1)) + (slice(None),) * (-a1 - 1), budget=budget)

    u = [part(x1, i) for i in range(3)]
    v = [part(x2, i) for i in range(3)]

    def term(i, j):
        return subtract(
            multiply(u[i], v[j], budget=budget), multiply(u[j], v[i], budget=budget), budget=budget
        )

    return concat([term(1, 2), term(2, 0), term(0, 1)], axis=a1, budget=budget)


def _abs_squared(x, budget):
    if dtype_of(x).kind == "c":
        return real(multiply(x, conj(x, budget=budget), budget=budget), budget=budget)
    return multiply(x, x, budget=budget)


def vector_norm(x, /, *, axis=None, keepdims: bool = False, ord: float = 2, budget=None):
    """The ``ord``-norm of ``x`` over ``axis`` (an int, a tuple, or None: every entry).

    ``ord`` is any non-zero real (``sum(|x|**ord)**(1/ord)``), ``inf``/``-inf``
    (the largest/smallest ``|x|``) or ``0`` (the number of non-zero entries). The
    result is real (float32 for complex64 input). Differentiable.
    """
    shape = shape_of(x)
    axes = None if axis is None else normalize_axes(axis, len(shape), "vector_norm")
    kw = dict(axis=axes, keepdims=keepdims, budget=budget)
    if isinstance(ord, bool) or not isinstance(ord, (int, float, np.integer, np.floating)):
        raise ValueError(f"vector_norm: ord must be a real number, got {ord!r}.")
    ord = float(ord)
    if ord == 2:
        return sqrt(sum(_abs_squared(x, budget), **kw), budget=budget)
    a = abs(x, budget=budget)
    if ord == math.inf:
        return max(a, **kw)
    if ord == -math.inf:
        return min(a, **kw)
    if ord == 0:
        return sum(astype(not_equal(x, 0, budget=budget), dtype_of(a), budget=budget), **kw)
    if ord == 1:
        return sum(a, **kw)
    return power(sum(power(a, ord, budget=budget), **kw), 1.0 / ord, budget=budget)


def matrix_norm(
    x, /, *, keepdims: bool = False, ord: float | Literal["fro", "nuc"] = "fro", budget=None
):
    """The ``ord``-norm of each matrix of ``x``: ``"fro"`` (Frobenius), ``"nuc"``
    (the sum of singular values), ``1``/``-1`` (largest/smallest column sum of
    ``|x|``), ``inf``/``-inf`` (rows), ``2``/``-2`` (largest/smallest singular
    value). Differentiable (the singular-value ones through `svdvals`)."""
    _matrix_shape(x, "matrix_norm")
    if ord == "fro":
        return vector_norm(x, axis=(-2, -1), keepdims=keepdims, budget=budget)
    if ord in ("nuc", 2, -2):
        s = svdvals(x, budget=budget)
        pick = sum if ord == "nuc" else max if ord == 2 else min
        out = pick(s, axis=-1, keepdims=keepdims, budget=budget)
        return expand_dims(out, -1, budget=budget) if keepdims else out
    if ord in (1, -1, math.inf, -math.inf):
        along = -2 if ord in (1, -1) else -1
        pick = max if ord > 0 else min
        sums = sum(abs(x, budget=budget), axis=along, keepdims=True, budget=budget)
        out = pick(sums, axis=(-2, -1), keepdims=keepdims, budget=budget)
        return out
    raise ValueError(
        f"matrix_norm: ord must be 'fro', 'nuc', 1, -1, 2, -2, inf or -inf, got {ord!r}."
    )


# ------------------------------------------------------- per-matrix kernels


def _dense(x, fn: str, square: bool = False) -> tuple[int, ...]:
    shape = _matrix_shape(x, fn)
    if dtype_of(x).kind not in "fc":
        raise TypeError(f"{fn} needs a floating or complex array, got {dtype_of(x).name}.")
    if square and shape[-1] != shape[-2]:
        raise ValueError(f"{fn} needs square matrices, got shape {shape}.")
    return shape


_MATRIX = ((-2, -1),)


def _cholesky(xp, x, *, upper):
    return xp.linalg.cholesky(x, upper=upper)


def cholesky(x, /, *, upper: bool = False, budget=None):
    """The Cholesky factor of each symmetric (Hermitian) positive-definite matrix:
    lower triangular ``L`` with ``x = L L^H`` (``upper``: ``U`` with ``x = U^H U``)."""
    _dense(x, "cholesky", square=True)
    return core_axes(
        _cholesky,
        "cholesky",
        x,
        core=_MATRIX,
        out_core=(-2, -1),
        upper=bool(upper),
        budget=budget,
    )


def _det(xp, x):
    return xp.linalg.det(x)


def det(x, /, *, budget=None):
    """The determinant of each square matrix (a 0-d JAX array for one matrix)."""
    _dense(x, "det", square=True)
    return core_axes(_det, "det", x, core=_MATRIX, out_core=(), budget=budget)


def _slogdet(xp, x, *, index):
    return xp.linalg.slogdet(x)[index]


def slogdet(x, /, *, budget=None) -> SlogdetResult:
    """The sign and the log of the absolute value of each determinant."""
    _dense(x, "slogdet", square=True)
    return SlogdetResult(
        *(
            core_axes(_slogdet, "slogdet", x, core=_MATRIX, out_core=(), index=i, budget=budget)
            for i in range(2)
        )
    )


def _eigh(xp, x, *, index):
    return xp.linalg.eigh(x)[index]


def eigh(x, /, *, budget=None) -> EighResult:
    """The eigenvalues (ascending) and eigenvectors (columns) of each symmetric
    (Hermitian) matrix; NumPy reads its lower triangle, JAX's gradient symmetrizes."""
    _dense(x, "eigh", square=True)
    return EighResult(
        core_axes(_eigh, "eigh", x, core=_MATRIX, out_core=(-1,), index=0, budget=budget),
        core_axes(_eigh, "eigh", x, core=_MATRIX, out_core=(-2, -1), index=1, budget=budget),
    )


def _eigvalsh(xp, x):
    return xp.linalg.eigvalsh(x)


def eigvalsh(x, /, *, budget=None):
    """The eigenvalues of each symmetric (Hermitian) matrix, ascending."""
    _dense(x, "eigvalsh", square=True)
    return core_axes(_eigvalsh, "eigvalsh", x, core=_MATRIX, out_core=(-1,), budget=budget)


def _inv(xp, x):
    return xp.linalg.inv(x)


def inv(x, /, *, budget=None):
    """The inverse of each square matrix."""
    _dense(x, "inv", square=True)
    return core_axes(_inv, "inv", x, core=_MATRIX, out_core=(-2, -1), budget=budget)


def _matrix_power(xp, x, *, n):
    return xp.linalg.matrix_power(x, n)


def matrix_power(x, n: int, /, *, budget=None):
    """Each square matrix raised to the integer power ``n`` (negative: of its inverse)."""
    _dense(x, "matrix_power", square=True)
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)):
        raise TypeError(f"matrix_power: n must be an int, got {n!r}.")
    return core_axes(
        _matrix_power,
        "matrix_power",
        x,
        core=_MATRIX,
        out_core=(-2, -1),
        n=int(n),
        budget=budget,
    )


def _tolerance(rtol, fn: str) -> float | None:
    if rtol is None:
        return None
    if np.ndim(rtol) != 0:
        raise TypeError(f"{fn}: rtol must be a number (a per-matrix array is not supported).")
    return float(rtol)


def _matrix_rank(xp, x, *, rtol):
    return xp.linalg.matrix_rank(x, rtol=rtol)


def matrix_rank(x, /, *, rtol: float | None = None, budget=None):
    """The number of singular values of each matrix above ``rtol`` times the largest
    (default ``max(M, N) * eps``). Integer valued: no gradient."""
    _dense(x, "matrix_rank")
    return core_axes(
        _matrix_rank,
        "matrix_rank",
        x,
        core=_MATRIX,
        out_core=(),
        differentiable=False,
        rtol=_tolerance(rtol, "matrix_rank"),
        budget=budget,
    )


def _pinv(xp, x, *, rtol):
    return xp.linalg.pinv(x, rtol=rtol)


def pinv(x, /, *, rtol: float | None = None, budget=None):
    """The Moore-Penrose pseudo-inverse of each matrix (singular values below ``rtol``
    times the largest count as zero; default ``max(M, N) * eps``)."""
    _dense(x, "pinv")
    return core_axes(
        _pinv,
        "pinv",
        x,
        core=_MATRIX,
        out_core=(-2, -1),
        rtol=_tolerance(rtol, "pinv"),
        budget=budget,
    )


def _qr(xp, x, *, mode, index):
    return xp.linalg.qr(x, mode=mode)[index]


def qr(x, /, *, mode: Literal["reduced", "complete"] = "reduced", budget=None) -> QRResult:
    """The QR factorization of each matrix: orthonormal ``Q`` and upper triangular ``R``."""
    _dense(x, "qr")
    if mode not in ("reduced", "complete"):
        raise ValueError(f"qr: mode must be 'reduced' or 'complete', got {mode!r}.")
    return QRResult(
        *(
            core_axes(
                _qr, "qr", x, core=_MATRIX, out_core=(-2, -1), mode=mode, index=i, budget=budget
            )
            for i in range(2)
        )
    )


def _solve(xp, x1, x2):
    return xp.linalg.solve(x1, x2)


def solve(x1, x2, /, *, budget=None):
    """The solution ``X`` of ``x1 X = x2`` for each square matrix of ``x1``. ``x2`` of
    shape ``(M,)`` is one right-hand side for every matrix (the result is ``(..., M)``);
    otherwise ``(..., M, K)``, its batch axes broadcast against ``x1``'s."""
    s1 = _dense(x1, "solve", square=True)
    s2 = shape_of(x2)
    if not s2 or s2[-1 if len(s2) == 1 else -2] != s1[-1]:
        raise ValueError(f"solve: x2 of shape {s2} does not match matrices of shape {s1[-2:]}.")
    if not is_disk(x2) and is_disk(x1):
        from ._creation import asarray

        x2 = asarray(x2, budget=budget)
    if not is_disk(x1) and is_disk(x2):
        from ._creation import asarray

        x1 = asarray(x1, budget=budget)
    vector = len(s2) == 1
    core2 = (-1,) if vector else (-2, -1)
    return core_axes(
        _solve, "solve", x1, x2, core=(_MATRIX[0], core2), out_core=core2, budget=budget
    )


def _svd(xp, x, *, full_matrices, index):
    return xp.linalg.svd(x, full_matrices=full_matrices)[index]


def svd(x, /, *, full_matrices: bool = True, budget=None) -> SVDResult:
    """The singular value decomposition ``x = U diag(S) Vh`` of each matrix (``S``
    descending). JAX differentiates it only with ``full_matrices=False``."""
    _dense(x, "svd")
    cores = ((-2, -1), (-1,), (-2, -1))
    return SVDResult(
        *(
            core_axes(
                _svd,
                "svd",
                x,
                core=_MATRIX,
                out_core=c,
                full_matrices=bool(full_matrices),
                index=i,
                budget=budget,
            )
            for i, c in enumerate(cores)
        )
    )


def _svdvals(xp, x):
    return xp.linalg.svdvals(x)


def svdvals(x, /, *, budget=None):
    """The singular values of each matrix, descending."""
    _dense(x, "svdvals")
    return core_axes(_svdvals, "svdvals", x, core=_MATRIX, out_core=(-1,), budget=budget)
