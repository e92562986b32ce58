"""`Contraction`, the primitive of every product of arrays (`matmul`, `tensordot`, ...).

A contraction names each axis of its two operands and of its output with a label
(as ``einsum`` does): labels of the output are looped over, labels of an operand
that are missing from the output are summed. Output tiles are the loop's outer
axes and the summed labels its reduction axes, so memory stays bounded whatever
the sizes. A block is computed as one matrix product (BLAS ``gemm``, accumulating
in place with ``beta=1``) or a stack of them: the labels are grouped into batch,
rows, columns and summed ones, and the blocks reshaped, not copied, whenever
their axes lie in grouped order, as they do for `matmul`, default `tensordot`
axes and both of their gradients.

The backward pass is two more contractions (``dA = g . B``, ``dB = A . g``) over
the whole arrays: each gradient tile is written once, never read back and added to.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, cast

import jax
import numpy as np
from scipy.linalg import blas

from ..arrays._array import Result
from ..arrays._hijax import type_of
from ..arrays._op import BlockParallelOp, apply, frozen
from ..execution._driver import Driver, Value
from ..kernels._promotion import is_differentiable, to_primal_dtype
from ..planning._budget import MemoryBudget
from ..storage._paged_file import Region
from ._contraction_in_memory import _contract_in_memory, _like
from ._contraction_labels import (
    _analyse,
    _gradient_labels,
    _label_sizes,
    _Layout,
    _shape_dtype,
)
from ._resident_product import as_block_map

__all__ = ["Contraction"]


@frozen
class Contraction(BlockParallelOp):
    """``out[out_labels] = sum a[a_labels] * b[b_labels]`` over the labels not in ``out_labels``.

    - `a_labels`, `b_labels`: one int per axis of each operand (``()`` for a 0-d one).
    - `out_labels`: one int per output axis; a label in neither operand is a new
      axis of size 1 (a gradient's broadcast axis).
    - `conj`: conjugate the first / second operand (complex ones only).
    - `result_dtype`: the output's dtype when it is not NumPy's promotion (a float32
      operand's gradient in a float64 product); a complex result cast to a real
      dtype keeps its real part.
    - `label`: the name in errors and progress bars.
    - `in_memory_output`: hold the output in memory and give it as a JAX array (the
      gradient of an in-memory parameter), not write it to disk.
    - `gradient_of`: for the backward product of another contraction, the operand
      (0 or 1) whose gradient this is, with the cotangent at that same position:
      its loss's pass may have computed it already
      (`execution._deferred_cotangents.product_gradient`).

    A label of size 1 in one operand and ``n`` in the other broadcasts, as in NumPy,
    unless it is summed: summed sizes must be equal. A label of one operand only,
    missing from the output, is summed in that operand alone (gradients meet such
    axes of size 1; of a larger size there is no gradient).
    """

    a_labels: tuple[int, ...]
    b_labels: tuple[int, ...]
    out_labels: tuple[int, ...]
    conj: tuple[bool, bool] = (False, False)
    result_dtype: str | None = None
    label: str = "contraction"
    in_memory_output: bool = False
    gradient_of: int | None = None

    @property
    def name(self) -> str:
        return self.label

    # -- shapes and dtypes ------------------------------------------------------

    def output_shape(self, sa: tuple[int, ...], sb: tuple[int, ...]) -> tuple[int, ...]:
        sizes = _label_sizes(self, tuple(sa), tuple(sb))
        return tuple(sizes.get(lab, 1) for lab in self.out_labels)

    def reduction_shape(self, sa: tuple[int, ...], sb: tuple[int, ...]) -> tuple[int, ...]:
        sizes = _label_sizes(self, tuple(sa), tuple(sb))
        return tuple(sizes[lab] for lab in _analyse(self).reduced)

    def output_dtype(self, da: np.dtype, db: np.dtype) -> np.dtype:
        if self.result_dtype is not None:
            return np.dtype(self.result_dtype)
        dtype = np.result_type(da, db)
        if dtype.kind not in "biufc":
            raise TypeError(f"{self.label} is not defined for {da} and {db} arrays.")
        return dtype

    def thin_axes(self, sa: tuple[int, ...], sb: tuple[int, ...]) -> tuple[int, ...]:
        """The batch axes of the output: a tile may cut them below `MIN_SIDE` at no
        cost to the kernel, which computes each matrix of the stack whole."""
        batch = _analyse(self).layout.batch
        return tuple(i for i, lab in enumerate(self.out_labels) if lab in batch)

    def index_map(
        self, out_r: Region, red_r: Region, sa: tuple[int, ...], sb: tuple[int, ...]
    ) -> tuple[Region | None, Region | None]:
        sizes = _label_sizes(self, tuple(sa), tuple(sb))
        at = dict(zip(self.out_labels, out_r))
        at.update(zip(_analyse(self).reduced, red_r))

        def region(labels: tuple[int, ...], shape: tuple[int, ...]) -> Region | None:
            if not labels:
                return None
            return tuple(
                slice(0, 1) if n == 1 and sizes[lab] != 1 else at[lab]
                for lab, n in zip(labels, shape)
            )

        return region(self.a_labels, sa), region(self.b_labels, sb)

    # -- forward ----------------------------------------------------------------

    def as_block_map(self, inputs: Any, budget: MemoryBudget) -> Any:
        """This product as a block map for ``inputs``, or None (`_resident_product`)."""
        return as_block_map(self, inputs, budget)

    def forward(self, driver: Driver, *inputs: Value) -> Value:
        """The tiled loop; with a smaller budget when blocks must be copied into
        grouped order (a copy of each input block and of the output tile at most,
        which the plan does not count: 3/5 of the budget leaves room for them)."""
        if self._copies(*[np.dtype(v.dtype) for v in inputs]):
            nbytes = max(4096, driver.budget.nbytes * 3 // 5)
            driver = Driver(MemoryBudget(nbytes), driver.name, driver.whole_budget)
        return driver.forward(self, inputs)

    def _copies(self, da: np.dtype, db: np.dtype) -> bool:
        conj = any(c and d.kind == "c" for c, d in zip(self.conj, (da, db)))
        cast = self.result_dtype is not None and np.dtype(self.result_dtype) != np.result_type(
            da, db
        )
        return _analyse(self).layout.perms is not None or conj or cast

    def forward_block(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        lay = _analyse(self).layout
        x, y, grouped_shape = self._matrices(a, b)
        part = np.matmul(x, y)
        if lay.perms is not None:  # back from (batch, rows, columns) to the output's order
            part = np.ascontiguousarray(part.reshape(grouped_shape).transpose(lay.perms[2]))
        part = part.reshape(self._out_block_shape(a, b))
        dtype = self.output_dtype(a.dtype, b.dtype)
        return part if part.dtype == dtype else to_primal_dtype(part, dtype)

    def forward_into(self, out: np.ndarray, a: np.ndarray, b: np.ndarray, accumulate: bool) -> None:
        """``out (+)= a . b`` by BLAS ``gemm`` per matrix of the block, accumulating
        with ``beta=1`` (no partial tile); by `forward_block` for other dtypes,
        conjugates, layouts that need copies, and stacks of small matrices (one
        ``gemm`` call each would cost more than NumPy's loop over them)."""
        gemm = self._gemm(out, a, b)
        if gemm is None:
            part = self.forward_block(a, b)
            if accumulate:
                out += part
            else:
                out[...] = part
            return
        lay = _analyse(self).layout
        x, y, _ = self._matrices(a, b, transposed=False)
        o = out.reshape(self._stacked_out_shape(x, y))
        bx, by = x.shape[:-2], y.shape[:-2]
        for idx in np.ndindex(*o.shape[:-2]):
            xi = x[tuple(i if n != 1 else 0 for i, n in zip(idx, bx))]
            yi = y[tuple(i if n != 1 else 0 for i, n in zip(idx, by))]
            c = o[idx]
            if _gemv(out.dtype, xi, yi, c, lay, accumulate):
                continue
            # In Fortran order the C-ordered matrices are their transposes, so
            # compute c.T (+)= op(y).T @ op(x).T on the transposed views: no copies.
            result = gemm(
                1.0,
                yi.T,
                xi.T,
                beta=1.0 if accumulate else 0.0,
                c=c.T,
                trans_a=int(lay.trans_y),
                trans_b=int(lay.trans_x),
                overwrite_c=True,
            )
            if not np.shares_memory(result, c):  # the wrapper copied after all
                c[...] = result.T

    def _gemm(self, out: np.ndarray, a: np.ndarray, b: np.ndarray) -> Callable[..., Any] | None:
        """The BLAS ``gemm`` for this block, or ``None`` where `forward_block` is better."""
        if out.dtype not in _BLAS_TYPES or a.dtype != out.dtype or b.dtype != out.dtype:
            return None
        if self._copies(a.dtype, b.dtype) or not (
            out.flags.c_contiguous and a.flags.c_contiguous and b.flags.c_contiguous
        ):
            return None
        x, y, _ = self._matrices(a, b, transposed=False)
        *stack, m, n = self._stacked_out_shape(x, y)
        k = x.shape[-2] if _analyse(self).layout.trans_x else x.shape[-1]
        if m * n * k == 0 or (math.prod(stack) > 1 and m * n * k < _GEMM_MIN_WORK):
            return None
        return blas.get_blas_funcs("gemm", (out, a, b))

    def _stacked_out_shape(self, x: np.ndarray, y: np.ndarray) -> tuple[int, ...]:
        """``(*batch, m, n)``: the output tile as the stack of products ``x @ y``
        (``x`` and ``y`` as stored, not yet transposed)."""
        lay = _analyse(self).layout
        batch = tuple(np.broadcast_shapes(x.shape[:-2], y.shape[:-2]))
        m = x.shape[-1] if lay.trans_x else x.shape[-2]
        n = y.shape[-2] if lay.trans_y else y.shape[-1]
        return (*batch, m, n)

    def _matrices(
        self, a: np.ndarray, b: np.ndarray, transposed: bool = True
    ) -> tuple[np.ndarray, np.ndarray, tuple[int, ...]]:
        """The blocks as stacks of matrices ``x @ y``, and the product's shape as
        ``(*batch, *rows, *cols)`` (to undo a copy plan with).

        Summed labels found in one operand only are summed first, conjugates taken;
        then each block is reshaped to ``(*batch, rows, cols)`` (a view when its axes
        are grouped, else a copy) and, with ``transposed``, its last two axes swapped
        where the grouping stores it transposed.
        """
        info = _analyse(self)
        lay = info.layout
        blocks = []
        for block, lone, conj in ((a, info.lone_a, self.conj[0]), (b, info.lone_b, self.conj[1])):
            block = np.asarray(block)
            if conj and block.dtype.kind == "c":
                block = np.conj(block)
            if lone:
                block = np.sum(block, axis=lone, dtype=block.dtype)
            blocks.append(block)
        a, b = blocks
        if lay.swap:
            a, b = b, a
        dims: dict[int, int] = {}
        for block, labels in ((a, lay.x_labels), (b, lay.y_labels)):
            dims.update((lab, n) for lab, n in zip(labels, block.shape) if n != 1)
        if lay.perms is not None:
            a, b = a.transpose(lay.perms[0]), b.transpose(lay.perms[1])
        x = a.reshape(self._stack_shape(a.shape, lay.x_groups, lay))
        y = b.reshape(self._stack_shape(b.shape, lay.y_groups, lay))
        if transposed:
            x = x.swapaxes(-1, -2) if lay.trans_x else x
            y = y.swapaxes(-1, -2) if lay.trans_y else y
        return x, y, tuple(dims.get(lab, 1) for lab in lay.batch + lay.rows + lay.cols)

    @staticmethod
    def _stack_shape(
        shape: tuple[int, ...], groups: tuple[tuple[int, ...], ...], lay: _Layout
    ) -> tuple[int, ...]:
        """``shape`` (grouped as ``groups``: the batch labels it has, then two label
        groups) as ``(*batch, rows, cols)``, with 1 for batch labels it lacks."""
        have, first, _ = groups
        own = dict(zip(have, shape))
        rest = shape[len(have) :]
        return (
            *[own.get(lab, 1) for lab in lay.batch],
            math.prod(rest[: len(first)]),
            math.prod(rest[len(first) :]),
        )

    def _out_block_shape(self, a: np.ndarray, b: np.ndarray) -> tuple[int, ...]:
        dims: dict[int, int] = {}
        for block, labels in ((a, self.a_labels), (b, self.b_labels)):
            for lab, n in zip(labels, np.shape(block)):
                if n != 1 or lab not in dims:
                    dims[lab] = n
        return tuple(dims.get(lab, 1) for lab in self.out_labels)

    # -- backward ---------------------------------------------------------------

    def backward_ops(
        self,
        args: tuple[Result, Result],
        out: Result,
        g: Result,
        wants: tuple[bool, ...],
        budget: MemoryBudget,
    ) -> tuple[Result | None, ...]:
        """Both gradients as two more contractions: with ``op`` the conjugation of
        each operand, ``dA = op_a(g . op_b(B))`` and ``dB = op_b(op_a(A) . g)``,
        summed over the axes the operand was broadcast along (JAX's transpose of the
        product); each in its operand's dtype."""
        a, b = args
        (sa, da), (sb, db) = _shape_dtype(a), _shape_dtype(b)
        sizes = _label_sizes(self, sa, sb)
        info = _analyse(self)
        lone = [sa[i] for i in info.lone_a] + [sb[i] for i in info.lone_b]
        if any(n != 1 for n in lone):
            raise TypeError(
                f"{self.label}: a contraction that sums an axis of one operand alone has "
                "no out-of-core gradient; sum that axis first (ooc.sum), then contract."
            )
        ca, cb = self.conj
        da_labels = _gradient_labels(self, self.a_labels, sa, sizes)
        db_labels = _gradient_labels(self, self.b_labels, sb, sizes)
        grads: list[Result | None] = [None, None]
        if type_of(g) is None:
            # a 0-d product (a dot of two vectors): the gradient of one operand whose
            # other operand is in memory involves no DiskArray; JAX computes it
            gj, aj, bj = (cast(jax.Array, v) for v in (g, a, b))  # each read where in memory
            if wants[0] and is_differentiable(da) and type_of(b) is None:
                grads[0] = _like(a, _contract_in_memory(
                    self.out_labels, self.b_labels, da_labels, (ca, ca != cb), gj, bj, da
                ), budget)  # fmt: skip
                wants = (False, wants[1])
            if wants[1] and is_differentiable(db) and type_of(a) is None:
                grads[1] = _like(b, _contract_in_memory(
                    self.a_labels, self.out_labels, db_labels, (ca != cb, cb), aj, gj, db
                ), budget)  # fmt: skip
                wants = (wants[0], False)
        if wants[0] and is_differentiable(da):
            op = Contraction(
                self.out_labels,
                self.b_labels,
                da_labels,
                (ca, ca != cb),
                da.str,
                self.label,
                in_memory_output=type_of(a) is None,
                gradient_of=0,
            )
            grads[0] = apply(op, g, b, budget=budget)
        if wants[1] and is_differentiable(db):
            op = Contraction(
                self.a_labels,
                self.out_labels,
                db_labels,
                (ca != cb, cb),
                db.str,
                self.label,
                in_memory_output=type_of(b) is None,
                gradient_of=1,
            )
            grads[1] = apply(op, a, g, budget=budget)
        return tuple(grads)


def _gemv(
    dtype: np.dtype,
    x: np.ndarray,
    y: np.ndarray,
    c: np.ndarray,
    lay: _Layout,
    accumulate: bool,
) -> bool:
    """``c (+)= op(x) @ op(y)`` as a matrix times a vector when one side of the
    product is one (one row of ``c``, or one column): OpenBLAS's ``gemm`` with a unit
    side runs 3-4 times slower. NumPy's ``matmul`` calls its BLAS ``gemv``, threaded;
    SciPy's took twice as long on a 64 MiB tile here. Returns whether it did."""
    m, n = c.shape
    if (m == 1) == (n == 1):
        return False
    a = x.T if lay.trans_x else x
    b = y.T if lay.trans_y else y
    if m == 1:  # c's one row: the first row of op(x) times op(y)
        vector, matrix, target = a[0, :], b, c[0, :]
        product = lambda out=None: np.matmul(vector, matrix, out=out)
    else:  # c's one column: op(x) times the first column of op(y)
        vector, matrix, target = b[:, 0], a, c[:, 0]
        product = lambda out=None: np.matmul(matrix, vector, out=out)
    if accumulate:
        target += product()
    elif target.flags.c_contiguous and target.dtype == np.result_type(vector, matrix):
        product(out=target)
    else:
        target[...] = product()
    return True


_BLAS_TYPES = frozenset(np.dtype(t) for t in ("float32", "float64", "complex64", "complex128"))

#: Below this many multiply-adds per matrix, a stack of matrices goes to NumPy's
#: matmul loop (one Python-level gemm call per matrix would cost more).
_GEMM_MIN_WORK = 64**3
