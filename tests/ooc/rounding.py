"""Rounding-error bounds for tests that compare two computations of the same sums.

Two paths that add the same terms in another order (other tiles, another BLAS thread
count or CPU kernel, tasks on a cluster) agree only to rounding, never bit for bit.
The bounds here hold for *every* order of the additions (Higham, *Accuracy and
Stability of Numerical Algorithms*, 2nd ed., 3.1 and 4.2): a computed sum of ``n``
terms, or an inner product of length ``n``, is within ``gamma(n) * sum |terms|`` of
the exact one, where ``gamma(n) = n u / (1 - n u)`` and ``u`` is the unit roundoff
(``2**-24`` for float32). They are worst cases: the differences seen are far smaller
(about ``sqrt(n) u``), but only the worst case holds on every machine.
"""

from __future__ import annotations

import numpy as np


def gamma(n: int, dtype=np.float32) -> float:
    """Higham's ``gamma_n``: the relative error of ``n`` roundings in ``dtype``."""
    nu = n * float(np.finfo(dtype).eps) / 2
    assert nu < 1, f"{n} roundings of {np.dtype(dtype)} have no bound"
    return nu / (1 - nu)


def product_reference(a, b) -> tuple[np.ndarray, np.ndarray]:
    """``a @ b`` in float64 and the bound on how far a float32 ``a @ b`` may lie from it.

    The float32 product is within ``gamma(K) |a| @ |b|`` of the exact one (``K`` the
    inner length), whatever the order of its sums; the float64 reference is within
    ``gamma(K, float64) |a| @ |b|`` of it (float32 operands multiply exactly in
    float64).
    """
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    k = a.shape[-1]
    return a @ b, (gamma(k) + gamma(k, np.float64)) * (np.abs(a) @ np.abs(b))


def assert_within(got, want, bound, what: str) -> None:
    """``|got - want| <= bound`` elementwise (compared in float64, or complex128)."""
    got, want = np.asarray(got), np.asarray(want)
    wide = np.complex128 if np.iscomplexobj(got) or np.iscomplexobj(want) else np.float64
    err = np.abs(got.astype(wide) - want.astype(wide))
    if not err.size:
        return
    worst = np.unravel_index(np.argmax(err - bound), np.shape(err))
    assert np.all(err <= bound), (
        f"{what}: |got - want| = {err[worst]:.3g} exceeds the rounding bound "
        f"{np.broadcast_to(bound, err.shape)[worst]:.3g} at {worst}"
    )
