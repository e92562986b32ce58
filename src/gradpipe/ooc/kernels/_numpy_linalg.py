"""Host rules for JAX's FFT and dense linear algebra primitives: ``fft``,
``cholesky``, ``eigh``, ``svd``, ``qr``, ``lu`` and ``triangular_solve``, each
answering as XLA's CPU implementation does (a failed Cholesky gives NaNs, ``lu``
gives 0-based pivots and the permutation they make).

Rules take the primitive's operands as NumPy arrays and its parameters as keywords
(see `_numpy_elementwise`); `_numpy_eval` looks them up by name in `RULES`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ._numpy_elementwise import Rule

__all__ = ["RULES"]


def _fft(x: np.ndarray, fft_type: object, fft_lengths: Sequence[int], **_: Any) -> np.ndarray:
    """XLA's FFT over the trailing ``len(fft_lengths)`` axes (its IFFT divides by n)."""
    kind = getattr(fft_type, "name", str(fft_type)).rsplit(".", 1)[-1].upper()
    axes = tuple(range(-len(fft_lengths), 0))
    if kind == "FFT":
        return np.fft.fftn(x, axes=axes)
    if kind == "IFFT":
        return np.fft.ifftn(x, axes=axes)
    if kind == "RFFT":
        return np.fft.rfftn(x, s=tuple(fft_lengths), axes=axes)
    return np.fft.irfftn(x, s=tuple(fft_lengths), axes=axes)


def _cholesky(x: np.ndarray, **_: Any) -> np.ndarray:
    """The lower factor; NaNs for a matrix that is not positive definite (as JAX gives,
    where NumPy raises)."""
    try:
        return np.linalg.cholesky(x)
    except np.linalg.LinAlgError:
        return np.full_like(x, np.nan)


def _eigh(
    x: np.ndarray,
    lower: bool = True,
    sort_eigenvalues: bool = True,
    subset_by_index: Sequence[int] | None = None,
    **_: Any,
) -> list[np.ndarray]:
    if subset_by_index is not None and tuple(subset_by_index) != (0, x.shape[-1]):
        raise NotImplementedError("eigh with subset_by_index has no host rule.")
    w, v = np.linalg.eigh(x, UPLO="L" if lower else "U")
    return [v, w]


def _svd(
    x: np.ndarray,
    full_matrices: bool,
    compute_uv: bool,
    subset_by_index: Sequence[int] | None = None,
    **_: Any,
) -> list[np.ndarray]:
    if subset_by_index is not None and tuple(subset_by_index) != (0, min(x.shape[-2:])):
        raise NotImplementedError("svd with subset_by_index has no host rule.")
    if not compute_uv:
        return [np.linalg.svd(x, compute_uv=False)]
    u, s, vh = np.linalg.svd(x, full_matrices=full_matrices)
    return [s, u, vh]


def _qr(x: np.ndarray, full_matrices: bool, pivoting: bool = False, **_: Any) -> list[np.ndarray]:
    if pivoting:
        raise NotImplementedError("qr with pivoting has no host rule.")
    q, r = np.linalg.qr(x, mode="complete" if full_matrices else "reduced")
    return [q, r]


def _lu(x: np.ndarray, **_: Any) -> list[np.ndarray]:
    """LU with partial pivoting per matrix: the factors, LAPACK's pivots (0-based) and
    the row permutation they make, as JAX's ``lu``."""
    from scipy.linalg import lu_factor

    m, n = x.shape[-2:]
    lu = np.empty_like(x)
    pivots = np.empty((*x.shape[:-2], min(m, n)), np.int32)
    perm = np.empty((*x.shape[:-2], m), np.int32)
    for b in np.ndindex(x.shape[:-2]):
        lu[b], piv = lu_factor(x[b], check_finite=False)
        pivots[b] = piv[: min(m, n)]
        order = np.arange(m)
        for i, p in enumerate(pivots[b]):
            order[i], order[p] = order[p], order[i]
        perm[b] = order
    return [lu, pivots, perm]


def _triangular_solve(
    a: np.ndarray,
    b: np.ndarray,
    left_side: bool,
    lower: bool,
    transpose_a: bool,
    conjugate_a: bool,
    unit_diagonal: bool,
    **_: Any,
) -> np.ndarray:
    """``op(a) x = b`` (or ``x op(a) = b``) for the triangle of ``a`` named by ``lower``."""
    a = np.tril(a) if lower else np.triu(a)
    if unit_diagonal:
        a = a.copy()
        idx = np.arange(a.shape[-1])
        a[..., idx, idx] = 1
    if transpose_a:
        a = np.swapaxes(a, -1, -2)
    if conjugate_a:
        a = np.conj(a)
    if left_side:
        return np.linalg.solve(a, b)
    return np.swapaxes(np.linalg.solve(np.swapaxes(a, -1, -2), np.swapaxes(b, -1, -2)), -1, -2)


RULES: dict[str, Rule] = {
    "fft": _fft,
    "cholesky": _cholesky,
    "eigh": _eigh,
    "svd": _svd,
    "qr": _qr,
    "lu": _lu,
    "triangular_solve": _triangular_solve,
}
