"""`Contraction`, the primitive of every product of arrays, and `matmul`.

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

import functools
import math
from typing import NamedTuple

import jax.numpy as jnp
import numpy as np
from scipy.linalg import blas

from ..arrays._hijax import type_of
from ..arrays._op import BlockParallelOp, apply, frozen
from ..execution._driver import Driver
from ..kernels._promotion import is_differentiable, to_primal_dtype
from ..planning._budget import MemoryBudget

__all__ = ["Contraction", "MatMul", "matmul"]


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

    @property
    def name(self) -> str:
        return self.label

    # -- shapes and dtypes ------------------------------------------------------

    def output_shape(self, sa, sb):
        sizes = _label_sizes(self, tuple(sa), tuple(sb))
        return tuple(sizes.get(lab, 1) for lab in self.out_labels)

    def reduction_shape(self, sa, sb):
        sizes = _label_sizes(self, tuple(sa), tuple(sb))
        return tuple(sizes[lab] for lab in _analyse(self).reduced)

    def output_dtype(self, da, db):
        if self.result_dtype is not None:
            return np.dtype(self.result_dtype)
        dtype = np.result_type(da, db)
        if dtype.kind not in "biufc":
            raise TypeError(f"{self.label} is not defined for {da} and {db} arrays.")
        return dtype

    def thin_axes(self, sa, sb) -> tuple[int, ...]:
        """The batch axes of the output: a tile may cut them below `MIN_SIDE` at no
        cost to the kernel, which computes each matrix of the stack whole."""
        batch = _analyse(self).layout.batch
        return tuple(i for i, lab in enumerate(self.out_labels) if lab in batch)

    def index_map(self, out_r, red_r, sa, sb):
        sizes = _label_sizes(self, tuple(sa), tuple(sb))
        at = dict(zip(self.out_labels, out_r))
        at.update(zip(_analyse(self).reduced, red_r))

        def region(labels, shape):
            if not labels:
                return None
            return tuple(
                slice(0, 1) if n == 1 and sizes[lab] != 1 else at[lab]
                for lab, n in zip(labels, shape)
            )

        return region(self.a_labels, sa), region(self.b_labels, sb)

    # -- forward ----------------------------------------------------------------

    def forward(self, driver, *inputs):
        """The tiled loop; with a smaller budget when blocks must be copied into
        grouped order (a copy of each input block and of the output tile at most,
        which the plan does not count: 3/5 of the budget leaves room for them)."""
        if self._copies(*[np.dtype(v.dtype) for v in inputs]):
            nbytes = max(4096, driver.budget.nbytes * 3 // 5)
            driver = Driver(MemoryBudget(nbytes), driver.name, driver.whole_budget)
        return driver.forward(self, inputs)

    def _copies(self, da, db) -> bool:
        conj = any(c and d.kind == "c" for c, d in zip(self.conj, (da, db)))
        cast = self.result_dtype is not None and np.dtype(self.result_dtype) != np.result_type(
            da, db
        )
        return _analyse(self).layout.perms is not None or conj or cast

    def forward_block(self, a, b):
        lay = _analyse(self).layout
        x, y, grouped_shape = self._matrices(a, b)
        part = np.matmul(x, y)
        if lay.perms is not None:  # back from (batch, rows, columns) to the output's order
            part = np.ascontiguousarray(part.reshape(grouped_shape).transpose(lay.perms[2]))
        part = part.reshape(self._out_block_shape(a, b))
        dtype = self.output_dtype(a.dtype, b.dtype)
        return part if part.dtype == dtype else to_primal_dtype(part, dtype)

    def forward_into(self, out, a, b, accumulate):
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

    def _gemm(self, out, a, b):
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

    def _stacked_out_shape(self, x, y):
        """``(*batch, m, n)``: the output tile as the stack of products ``x @ y``
        (``x`` and ``y`` as stored, not yet transposed)."""
        lay = _analyse(self).layout
        batch = tuple(np.broadcast_shapes(x.shape[:-2], y.shape[:-2]))
        m = x.shape[-1] if lay.trans_x else x.shape[-2]
        n = y.shape[-2] if lay.trans_y else y.shape[-1]
        return (*batch, m, n)

    def _matrices(self, a, b, transposed: bool = True):
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
        dims = {}
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
    def _stack_shape(shape, groups, lay):
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

    def _out_block_shape(self, a, b):
        dims = {}
        for block, labels in ((a, self.a_labels), (b, self.b_labels)):
            for lab, n in zip(labels, np.shape(block)):
                if n != 1 or lab not in dims:
                    dims[lab] = n
        return tuple(dims.get(lab, 1) for lab in self.out_labels)

    # -- backward ---------------------------------------------------------------

    def backward_ops(self, args, out, g, wants, budget):
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
        grads = [None, None]
        if type_of(g) is None:
            # a 0-d product (a dot of two vectors): the gradient of one operand whose
            # other operand is in memory involves no DiskArray; JAX computes it
            if wants[0] and is_differentiable(da) and type_of(b) is None:
                grads[0] = _like(a, _contract_in_memory(
                    self.out_labels, self.b_labels, da_labels, (ca, ca != cb), g, b, da
                ), budget)  # fmt: skip
                wants = (False, wants[1])
            if wants[1] and is_differentiable(db) and type_of(a) is None:
                grads[1] = _like(b, _contract_in_memory(
                    self.a_labels, self.out_labels, db_labels, (ca != cb, cb), a, g, db
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
            )
            grads[1] = apply(op, a, g, budget=budget)
        return tuple(grads)


def _gemv(dtype, x, y, c, lay, accumulate) -> bool:
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


def _like(operand, grad, budget):
    """``grad`` (a JAX array) as the gradient of ``operand``: a DiskArray's is a
    DiskArray (the in-memory values added to its symbolic zero, which has no file)."""
    t = type_of(operand)
    if t is None:
        return grad
    from ..arrays._hijax import DiskArrayType
    from ._elementwise import add

    return add(DiskArrayType(t.shape, t.dtype).vspace_zero(), grad, budget=budget)


def _contract_in_memory(x_labels, y_labels, out_labels, conj, x, y, dtype):
    """`Contraction`'s result in ``jax.numpy`` (``einsum``), for operands in memory: a
    label of the output in neither operand is a new axis of size 1."""
    letter = {lab: chr(ord("a") + i) for i, lab in enumerate(sorted({*x_labels, *y_labels}))}
    x = jnp.conj(x) if conj[0] else x
    y = jnp.conj(y) if conj[1] else y
    present = [lab for lab in out_labels if lab in letter]
    spec = "".join(letter[lab] for lab in x_labels) + "," + "".join(letter[lab] for lab in y_labels)
    out = jnp.einsum(spec + "->" + "".join(letter[lab] for lab in present), x, y)
    sizes = iter(out.shape)
    out = jnp.reshape(out, tuple(next(sizes) if lab in letter else 1 for lab in out_labels))
    if jnp.iscomplexobj(out) and np.dtype(dtype).kind != "c":
        out = jnp.real(out)
    return out.astype(dtype)


class MatMul(Contraction):
    """The 2-D product ``op(a) @ op(b)``, ``op`` transposing where `transpose_a` /
    `transpose_b` (read in place: nothing is copied)."""

    def __init__(self, transpose_a: bool = False, transpose_b: bool = False):
        super().__init__(
            a_labels=(2, 0) if transpose_a else (0, 2),
            b_labels=(1, 2) if transpose_b else (2, 1),
            out_labels=(0, 1),
            label="matmul",
        )

    transpose_a = property(lambda self: self.a_labels == (2, 0))
    transpose_b = property(lambda self: self.b_labels == (1, 2))


def matmul(x1, x2, /, *, transpose_a: bool = False, transpose_b: bool = False, budget=None):
    """The matrix product ``x1 @ x2`` of the array API standard, out of core.

    Operands of two or more dimensions are stacks of matrices whose leading (batch)
    axes broadcast; a 1-D first operand is a row vector and a 1-D second one a
    column vector, their added axis removed from the result (NumPy's rules).

    **Arguments:**

    - `x1`, `x2`: `DiskArray`s (traced or not) of at least one dimension.
    - `transpose_a`, `transpose_b`: use ``x1`` / ``x2`` with its last two axes
      swapped, read in place (operands of two or more dimensions).
    - `budget`: a `MemoryBudget` for this call.

    **Returns:** a `DiskArray` of shape ``(*batch, m, n)`` (a 0-d JAX array for two
    vectors), in NumPy's dtype (``bool @ bool`` is bool; integers wrap).
    Differentiable in every floating operand: the backward pass is two more
    out-of-core products.
    """
    if type_of(x1) is None and type_of(x2) is None:
        a, b = jnp.asarray(x1), jnp.asarray(x2)
        a = jnp.swapaxes(a, -1, -2) if transpose_a else a
        b = jnp.swapaxes(b, -1, -2) if transpose_b else b
        return jnp.matmul(a, b)
    sa, sb = _shape_dtype(x1)[0], _shape_dtype(x2)[0]
    if not sa or not sb:
        raise ValueError(
            f"matmul needs operands of at least one dimension, got shapes {sa} and {sb}; "
            "multiply by a scalar with ooc.multiply."
        )
    for flag, shape, which in ((transpose_a, sa, "transpose_a"), (transpose_b, sb, "transpose_b")):
        if flag and len(shape) < 2:
            raise ValueError(
                f"matmul: {which} needs an operand of two or more dimensions, got {shape}."
            )
    ka = sa[-2] if transpose_a else sa[-1]
    kb = sb[-1] if len(sb) == 1 else sb[-1] if transpose_b else sb[-2]
    if ka != kb:
        raise ValueError(
            f"matmul: inner dimensions differ ({ka} vs {kb}) for shapes {sa} and {sb} "
            f"(transpose_a={transpose_a}, transpose_b={transpose_b}): the contracted axis "
            "of x1 is its last, of x2 its second-to-last (its only one for a vector)."
        )
    ba, bb = sa[:-2], sb[:-2]
    try:
        np.broadcast_shapes(ba, bb)
    except ValueError:
        raise ValueError(
            f"matmul: the batch shapes {ba} and {bb} (of operands {sa} and {sb}) do not "
            "broadcast together."
        ) from None
    if len(sa) == len(sb) == 2:
        op: Contraction = MatMul(bool(transpose_a), bool(transpose_b))
    else:
        nb = max(len(ba), len(bb))
        batch, (m, n, k) = tuple(range(nb)), (nb, nb + 1, nb + 2)
        mat_a = (k,) if len(sa) == 1 else (k, m) if transpose_a else (m, k)
        mat_b = (k,) if len(sb) == 1 else (n, k) if transpose_b else (k, n)
        out = batch + (m,) * (len(sa) > 1) + (n,) * (len(sb) > 1)
        op = Contraction(
            batch[nb - len(ba) :] + mat_a, batch[nb - len(bb) :] + mat_b, out, label="matmul"
        )
    return apply(op, x1, x2, budget=budget)


# ---------------------------------------------------------------- label analysis


class _Layout(NamedTuple):
    """How a block pair becomes a stack of matrix products.

    The product is ``x @ y`` with ``(x, y) = (a, b)``, or ``(b, a)`` when `swap`
    (so that the output's rows come first). Each of ``x``, ``y`` is grouped as
    ``(batch labels it has, first group, second group)`` in its stored axis order;
    `trans_x` / `trans_y` say its groups are (summed, rows) / (cols, summed), that
    is, stored transposed. `perms`, when not None, permutes ``x`` and ``y`` into
    grouped order first (a copy) and the product back into the output's order.
    """

    swap: bool
    batch: tuple
    rows: tuple
    cols: tuple
    x_labels: tuple
    y_labels: tuple
    x_groups: tuple
    y_groups: tuple
    trans_x: bool
    trans_y: bool
    perms: tuple | None


class _Analysis(NamedTuple):
    reduced: tuple  # the reduction loop's labels
    lone_a: tuple  # axes of a summed on their own (their label in no other place)
    lone_b: tuple
    layout: _Layout


@functools.lru_cache(maxsize=1024)
def _analyse(op: Contraction) -> _Analysis:
    a, b, out = op.a_labels, op.b_labels, op.out_labels
    for labels, what in ((a, "a_labels"), (b, "b_labels"), (out, "out_labels")):
        if len(set(labels)) != len(labels):
            raise ValueError(f"{op.label}: {what} {labels} repeats a label.")
    lone_a = tuple(i for i, lab in enumerate(a) if lab not in b and lab not in out)
    lone_b = tuple(i for i, lab in enumerate(b) if lab not in a and lab not in out)
    a2 = tuple(lab for i, lab in enumerate(a) if i not in lone_a)
    b2 = tuple(lab for i, lab in enumerate(b) if i not in lone_b)
    summed = tuple(lab for lab in a2 if lab in b2 and lab not in out)
    reduced = summed + tuple(a[i] for i in lone_a) + tuple(b[i] for i in lone_b)
    return _Analysis(reduced, lone_a, lone_b, _layout(a2, b2, out, summed))


def _layout(a, b, out, summed) -> _Layout:
    """The grouping with the fewest batch labels that needs no copy, else a copy plan."""
    kept = tuple(lab for lab in out if lab in a or lab in b)
    for p in range(len(kept) + 1):
        for swap in (False, True):
            x, y = (b, a) if swap else (a, b)
            lay = _grouped(x, y, kept, p, summed, swap)
            if lay is not None:
                return lay
    batch = tuple(lab for lab in kept if lab in a and lab in b)
    rows = tuple(lab for lab in kept if lab in a and lab not in b)
    cols = tuple(lab for lab in kept if lab in b and lab not in a)
    px, py = batch + rows + summed, batch + summed + cols
    to_out = tuple((batch + rows + cols).index(lab) for lab in kept)
    perms = (tuple(a.index(lab) for lab in px), tuple(b.index(lab) for lab in py), to_out)
    return _Layout(
        False,
        batch,
        rows,
        cols,
        a,
        b,
        (batch, rows, summed),
        (batch, summed, cols),
        False,
        False,
        perms,
    )


def _grouped(x, y, kept, p, summed, swap):
    """The layout with the first ``p`` output labels as batch, if ``x`` and ``y`` are
    stored grouped for it (else None)."""
    batch, rest = kept[:p], kept[p:]
    rows = tuple(lab for lab in rest if lab in x)
    cols = tuple(lab for lab in rest if lab in y)
    if set(rows) & set(cols) or rest != rows + cols:
        return None
    x_batch = tuple(lab for lab in batch if lab in x)
    y_batch = tuple(lab for lab in batch if lab in y)
    if x[: len(x_batch)] != x_batch or y[: len(y_batch)] != y_batch:
        return None
    k = tuple(lab for lab in x[len(x_batch) :] if lab in summed)
    xg = _in_order(x[len(x_batch) :], rows, k)
    yg = _in_order(y[len(y_batch) :], k, cols)
    if xg is None or yg is None:
        return None
    (x_first, x_second), trans_x = xg
    (y_first, y_second), trans_y = yg
    xg, yg = (x_batch, x_first, x_second), (y_batch, y_first, y_second)
    return _Layout(swap, batch, rows, cols, x, y, xg, yg, trans_x, trans_y, None)


def _in_order(stored, first, second):
    """``((first, second), False)`` if ``stored`` is ``first + second``, the groups
    swapped and True if it is ``second + first`` (a transposed matrix), else None."""
    if stored == first + second:
        return (first, second), False
    if stored == second + first:
        return (second, first), True
    return None


@functools.lru_cache(maxsize=1024)
def _label_sizes(op: Contraction, sa: tuple, sb: tuple) -> dict:
    """Each label's size; a size-1 axis broadcasts against another size, except summed."""
    if len(sa) != len(op.a_labels) or len(sb) != len(op.b_labels):
        raise ValueError(
            f"{op.label}: operands of shapes {sa} and {sb} do not match labels "
            f"{op.a_labels} and {op.b_labels}."
        )
    sizes: dict = {}
    for labels, shape in ((op.a_labels, sa), (op.b_labels, sb)):
        for lab, n in zip(labels, shape):
            prev = sizes.get(lab)
            if prev is None or prev == n:
                sizes[lab] = n
            elif lab in op.out_labels and 1 in (prev, n):
                sizes[lab] = n if prev == 1 else prev
            else:
                raise ValueError(
                    f"{op.label}: an axis of size {prev} of the first operand (shape {sa}) "
                    f"meets an axis of size {n} of the second (shape {sb}); "
                    + (
                        "summed axes must have equal sizes."
                        if lab not in op.out_labels
                        else "they do not broadcast."
                    )
                )
    return sizes


def _gradient_labels(op, labels, shape, sizes):
    """An operand's labels for its gradient: an axis it was broadcast along (size 1,
    the label's size not) gets a label of its own, so that the gradient sums over it."""
    fresh = max((*op.a_labels, *op.b_labels, *op.out_labels, -1)) + 1
    return tuple(
        fresh + i if n == 1 and sizes[lab] != 1 else lab
        for i, (lab, n) in enumerate(zip(labels, shape))
    )


def _shape_dtype(x) -> tuple[tuple, np.dtype]:
    t = type_of(x)
    if t is not None:
        return tuple(t.shape), np.dtype(t.dtype)
    dtype = getattr(x, "dtype", None)
    return tuple(np.shape(x)), np.dtype(np.asarray(x).dtype if dtype is None else dtype)


_BLAS_TYPES = frozenset(np.dtype(t) for t in ("float32", "float64", "complex64", "complex128"))

#: Below this many multiply-adds per matrix, a stack of matrices goes to NumPy's
#: matmul loop (one Python-level gemm call per matrix would cost more).
_GEMM_MIN_WORK = 64**3
