"""The dense per-matrix functions of `linalg` (`cholesky`, `det`, `eigh`, `inv`,
`qr`, `svd`, ...), as `CoreAxes` kernels, and the named tuples they return.

Each tile holds whole matrices of a stack, as many as the budget allows (one matrix
must fit; a `MemoryError` says so otherwise). The forward pass is NumPy's LAPACK;
the gradient is JAX's VJP of the same ``jax.numpy.linalg`` function evaluated with
NumPy, and a function whose VJP JAX refuses (`svd` with ``full_matrices=True``,
`matrix_rank`) is refused by name. Functions returning several arrays return the
standard's named tuples; each field is its own pass over the stack.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any, Literal, NamedTuple

import numpy as np

from ..arrays._array import ArrayLike, Result
from ._arg_types import BudgetLike
from ._core_axes import core_axes
from ._manip_args import dtype_of, is_disk, shape_of

__all__ = [
    "EighResult",
    "QRResult",
    "SVDResult",
    "SlogdetResult",
    "cholesky",
    "det",
    "eigh",
    "eigvalsh",
    "inv",
    "matrix_power",
    "matrix_rank",
    "pinv",
    "qr",
    "slogdet",
    "solve",
    "svd",
    "svdvals",
]


class EighResult(NamedTuple):
    eigenvalues: Result
    eigenvectors: Result


class QRResult(NamedTuple):
    Q: Result
    R: Result


class SlogdetResult(NamedTuple):
    sign: Result
    logabsdet: Result


class SVDResult(NamedTuple):
    U: Result
    S: Result
    Vh: Result


def _matrix_shape(x: ArrayLike, fn: str) -> tuple[int, ...]:
    shape = shape_of(x)
    if len(shape) < 2:
        raise ValueError(f"{fn} needs a stack of matrices (at least 2 dimensions), got {shape}.")
    return shape


def _dense(x: ArrayLike, fn: str, square: bool = False) -> tuple[int, ...]:
    shape = _matrix_shape(x, fn)
    if dtype_of(x).kind not in "fc":
        raise TypeError(f"{fn} needs a floating or complex array, got {dtype_of(x).name}.")
    if square and shape[-1] != shape[-2]:
        raise ValueError(f"{fn} needs square matrices, got shape {shape}.")
    return shape


_MATRIX = ((-2, -1),)


def _cholesky(xp: ModuleType, x: Any, *, upper: bool) -> Any:
    return xp.linalg.cholesky(x, upper=upper)


def cholesky(x: ArrayLike, /, *, upper: bool = False, budget: BudgetLike = None) -> Result:
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


def _det(xp: ModuleType, x: Any) -> Any:
    return xp.linalg.det(x)


def det(x: ArrayLike, /, *, budget: BudgetLike = None) -> Result:
    """The determinant of each square matrix (a 0-d JAX array for one matrix)."""
    _dense(x, "det", square=True)
    return core_axes(_det, "det", x, core=_MATRIX, out_core=(), budget=budget)


def _slogdet(xp: ModuleType, x: Any, *, index: int) -> Any:
    return xp.linalg.slogdet(x)[index]


def slogdet(x: ArrayLike, /, *, budget: BudgetLike = None) -> SlogdetResult:
    """The sign and the log of the absolute value of each determinant."""
    _dense(x, "slogdet", square=True)
    return SlogdetResult(
        *(
            core_axes(_slogdet, "slogdet", x, core=_MATRIX, out_core=(), index=i, budget=budget)
            for i in range(2)
        )
    )


def _eigh(xp: ModuleType, x: Any, *, index: int) -> Any:
    return xp.linalg.eigh(x)[index]


def eigh(x: ArrayLike, /, *, budget: BudgetLike = None) -> EighResult:
    """The eigenvalues (ascending) and eigenvectors (columns) of each symmetric
    (Hermitian) matrix; NumPy reads its lower triangle, JAX's gradient symmetrizes."""
    _dense(x, "eigh", square=True)
    return EighResult(
        core_axes(_eigh, "eigh", x, core=_MATRIX, out_core=(-1,), index=0, budget=budget),
        core_axes(_eigh, "eigh", x, core=_MATRIX, out_core=(-2, -1), index=1, budget=budget),
    )


def _eigvalsh(xp: ModuleType, x: Any) -> Any:
    return xp.linalg.eigvalsh(x)


def eigvalsh(x: ArrayLike, /, *, budget: BudgetLike = None) -> Result:
    """The eigenvalues of each symmetric (Hermitian) matrix, ascending."""
    _dense(x, "eigvalsh", square=True)
    return core_axes(_eigvalsh, "eigvalsh", x, core=_MATRIX, out_core=(-1,), budget=budget)


def _inv(xp: ModuleType, x: Any) -> Any:
    return xp.linalg.inv(x)


def inv(x: ArrayLike, /, *, budget: BudgetLike = None) -> Result:
    """The inverse of each square matrix."""
    _dense(x, "inv", square=True)
    return core_axes(_inv, "inv", x, core=_MATRIX, out_core=(-2, -1), budget=budget)


def _matrix_power(xp: ModuleType, x: Any, *, n: int) -> Any:
    return xp.linalg.matrix_power(x, n)


def matrix_power(x: ArrayLike, n: int, /, *, budget: BudgetLike = None) -> Result:
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


def _tolerance(rtol: float | None, fn: str) -> float | None:
    if rtol is None:
        return None
    if np.ndim(rtol) != 0:
        raise TypeError(f"{fn}: rtol must be a number (a per-matrix array is not supported).")
    return float(rtol)


def _matrix_rank(xp: ModuleType, x: Any, *, rtol: float | None) -> Any:
    return xp.linalg.matrix_rank(x, rtol=rtol)


def matrix_rank(x: ArrayLike, /, *, rtol: float | None = None, budget: BudgetLike = None) -> Result:
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


def _pinv(xp: ModuleType, x: Any, *, rtol: float | None) -> Any:
    return xp.linalg.pinv(x, rtol=rtol)


def pinv(x: ArrayLike, /, *, rtol: float | None = None, budget: BudgetLike = None) -> Result:
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


def _qr(xp: ModuleType, x: Any, *, mode: str, index: int) -> Any:
    return xp.linalg.qr(x, mode=mode)[index]


def qr(
    x: ArrayLike, /, *, mode: Literal["reduced", "complete"] = "reduced", budget: BudgetLike = None
) -> QRResult:
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


def _solve(xp: ModuleType, x1: Any, x2: Any) -> Any:
    return xp.linalg.solve(x1, x2)


def solve(x1: ArrayLike, x2: ArrayLike, /, *, budget: BudgetLike = None) -> Result:
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


def _svd(xp: ModuleType, x: Any, *, full_matrices: bool, index: int) -> Any:
    return xp.linalg.svd(x, full_matrices=full_matrices)[index]


def svd(x: ArrayLike, /, *, full_matrices: bool = True, budget: BudgetLike = None) -> SVDResult:
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


def _svdvals(xp: ModuleType, x: Any) -> Any:
    return xp.linalg.svdvals(x)


def svdvals(x: ArrayLike, /, *, budget: BudgetLike = None) -> Result:
    """The singular values of each matrix, descending."""
    _dense(x, "svdvals")
    return core_axes(_svdvals, "svdvals", x, core=_MATRIX, out_core=(-1,), budget=budget)
