"""Matrix product of two 2-D DiskArrays, either operand optionally transposed."""

from __future__ import annotations

import numpy as np
from scipy.linalg import blas

from .._hijax import type_of
from .._op import BlockParallelOp, apply, frozen
from .._promotion import is_differentiable, to_primal_dtype
from ._elementwise import astype

__all__ = ["MatMul", "matmul"]


@frozen
class MatMul(BlockParallelOp):
    """``op(a) @ op(b)`` where ``op`` transposes when ``transpose_a``/``transpose_b``."""

    transpose_a: bool = False
    transpose_b: bool = False

    @property
    def name(self) -> str:
        return "matmul"

    def _mnk(self, sa, sb):
        if len(sa) != 2 or len(sb) != 2:
            raise ValueError(
                f"matmul needs two 2-D arrays, got shapes {sa} and {sb}; reshape a vector "
                "to (n, 1) with DiskArray.from_numpy(v.reshape(-1, 1))."
            )
        m, k = sa[::-1] if self.transpose_a else sa
        k2, n = sb[::-1] if self.transpose_b else sb
        if k != k2:
            raise ValueError(
                f"matmul: inner dimensions differ ({k} vs {k2}) for shapes {sa} and {sb} "
                f"(transpose_a={self.transpose_a}, transpose_b={self.transpose_b})."
            )
        return m, n, k

    def output_shape(self, sa, sb):
        m, n, _ = self._mnk(sa, sb)
        return (m, n)

    def output_dtype(self, da, db):
        """NumPy's: the promoted dtype (``bool @ bool`` is bool); NumPy's refusal otherwise."""
        try:
            return np.matmul(np.empty((0, 0), da), np.empty((0, 0), db)).dtype
        except TypeError as error:
            raise TypeError(f"matmul of {da} and {db} arrays: {error}") from None

    def reduction_shape(self, sa, sb):
        return (self._mnk(sa, sb)[2],)

    def index_map(self, out_r, red_r, sa, sb):
        i, j = out_r
        (k,) = red_r
        return ((k, i) if self.transpose_a else (i, k), (j, k) if self.transpose_b else (k, j))

    def forward_block(self, a, b):
        return np.matmul(a.T if self.transpose_a else a, b.T if self.transpose_b else b)

    def forward_into(self, out, a, b, accumulate):
        """``out (+)= op(a) @ op(b)`` in one BLAS ``gemm`` call, accumulating with
        ``beta=1``: no partial tile, no separate addition pass."""
        gemm = _gemm(out, a, b)
        if gemm is None:  # mixed or non-BLAS dtypes
            part = self.forward_block(a, b)
            if accumulate:
                out += part
            else:
                out[...] = part
            return
        # In Fortran order the C-ordered tiles are their transposes, so compute
        # out.T (+)= op(b).T @ op(a).T on the transposed views: nothing is copied.
        result = gemm(
            1.0,
            b.T,
            a.T,
            beta=1.0 if accumulate else 0.0,
            c=out.T,
            trans_a=int(self.transpose_b),
            trans_b=int(self.transpose_a),
            overwrite_c=True,
        )
        if not np.shares_memory(result, out):  # the wrapper copied after all
            out[...] = result.T

    def backward_block(self, g, a, b):
        A = a.T if self.transpose_a else a
        B = b.T if self.transpose_b else b
        da, db = g @ B.T, A.T @ g
        da, db = (da.T if self.transpose_a else da), (db.T if self.transpose_b else db)
        return tuple(
            to_primal_dtype(d, x.dtype) if is_differentiable(x.dtype) else None
            for d, x in ((da, a), (db, b))
        )

    def backward_ops(self, args, out, g, wants, budget):
        """Both gradients as two more out-of-core matmuls (no read-modify-write)."""
        a, b = args
        ta, tb = self.transpose_a, self.transpose_b
        wants = [w and is_differentiable(type_of(x).dtype) for w, x in zip(wants, args)]
        da = db = None
        if wants[0]:
            if ta:  # d(a) = op(b) @ g.T
                da = apply(MatMul(tb, True), b, g, budget=budget)
            else:  # d(a) = g @ op(b).T
                da = apply(MatMul(False, not tb), g, b, budget=budget)
        if wants[1]:
            if tb:  # d(b) = g.T @ op(a)
                db = apply(MatMul(True, ta), g, a, budget=budget)
            else:  # d(b) = op(a).T @ g
                db = apply(MatMul(not ta, False), a, g, budget=budget)
        # a float32 operand of a float64 product gets a float32 gradient (and a real
        # one of a complex product the real part), as JAX's transposed cast gives
        return tuple(
            d
            if d is None or type_of(d).dtype == type_of(x).dtype
            else astype(_real_part(d, type_of(x).dtype), type_of(x).dtype, budget=budget)
            for d, x in ((da, a), (db, b))
        )


def matmul(a, b, *, transpose_a: bool = False, transpose_b: bool = False, budget=None):
    """Matrix product of two 2-D DiskArrays, out of core.

    **Arguments:**

    - `a`, `b`: 2-D `DiskArray`s (traced or not).
    - `transpose_a`, `transpose_b`: use ``a.T`` / ``b.T`` without copying them.
    - `budget`: a `MemoryBudget` for this call.

    **Returns:** a `DiskArray` of shape ``(m, n)``. Differentiable in both
    operands; the backward pass is two more out-of-core matmuls.
    """
    return apply(MatMul(bool(transpose_a), bool(transpose_b)), a, b, budget=budget)


def _real_part(d, dtype):
    """The real part of a complex gradient of a real operand (JAX's transposed cast)."""
    if type_of(d).dtype.kind == "c" and np.dtype(dtype).kind != "c":
        from ._elementwise import real

        return real(d)
    return d


_BLAS_TYPES = frozenset(np.dtype(t) for t in ("float32", "float64", "complex64", "complex128"))


def _gemm(out, a, b):
    """BLAS ``gemm`` for three arrays of one BLAS dtype, all C-contiguous (so that
    their transposes are Fortran-ordered views); ``None`` otherwise."""
    arrays = (out, a, b)
    if out.dtype not in _BLAS_TYPES or any(x.dtype != out.dtype for x in arrays):
        return None
    if not all(x.flags.c_contiguous and x.ndim == 2 and x.size for x in arrays):
        return None
    return blas.get_blas_funcs("gemm", arrays)
