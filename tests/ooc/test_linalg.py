"""matmul, tensordot, vecdot and matrix_transpose against NumPy (values, dtypes,
shapes) and jax.numpy (gradients), on arrays cut into several tiles."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from gradcases import MODE_IDS, MODES, GradCase, check
from rounding import assert_within, gamma, product_reference

from gradpipe import ooc
from gradpipe.ooc.arrays._hijax import type_of
from gradpipe.ooc.ops._contraction import Contraction
from gradpipe.ooc.ops._contraction_labels import _analyse
from gradpipe.ooc.ops._matmul import MatMul

BUDGET = 4096


def _data(rng, shape, dtype):
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return rng.random(shape) > 0.5
    if dtype.kind in "iu":
        return rng.integers(-4 if dtype.kind == "i" else 0, 5, shape).astype(dtype)
    x = rng.standard_normal(shape)
    if dtype.kind == "c":
        x = x + 1j * rng.standard_normal(shape)
    return x.astype(dtype)


def _forward(fn, arrays, jit: bool):
    """``fn`` on DiskArrays of ``arrays`` under a tiny budget, as NumPy."""
    with jax.enable_x64(True), ooc.MemoryBudget(BUDGET):
        disks = [ooc.DiskArray.from_numpy(a) for a in arrays]
        out = (jax.jit(fn) if jit else fn)(*disks)
        if type_of(out) is None:
            assert isinstance(out, jax.Array) and out.shape == ()
            return np.asarray(out)
        return out.to_numpy(force=True)


def _assert_matches(got, want, magnitude=None, k: int = 0):
    """``got`` has NumPy's shape, dtype and value: bit for bit for integers, bools and
    layout (``magnitude`` None); for a product of inner length ``k``, to rounding.

    ooc's tiles and NumPy's BLAS each sum in an order of their own (which depends on
    the BLAS thread count and the CPU), so each is within ``gamma(k) magnitude`` of
    the exact product, ``magnitude`` being the same product of |A| and |B|; a
    complex one within ``sqrt(2) gamma(k + 2) magnitude`` (Higham, problem 3.7).
    """
    assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, got.dtype, want)
    if want.dtype.kind in "biu" or magnitude is None:
        np.testing.assert_array_equal(got, want)
        return
    if want.dtype.kind == "c":
        one = np.sqrt(2) * gamma(k + 2, want.real.dtype)
    else:
        one = gamma(k, want.dtype)
    assert_within(got, want, 2 * one * np.asarray(magnitude), f"product of inner length {k}")


def _magnitude(fn, A, B):
    """``fn`` of |A| and |B|, in float64: the sum of |a| |b| that bounds its rounding."""
    return fn(np.abs(A).astype(np.float64), np.abs(B).astype(np.float64))


# ---------------------------------------------------------------- matmul


MATMUL_SHAPES = [
    ((9, 17), (17, 6)),
    ((3, 9, 17), (3, 17, 6)),  # batched
    ((1, 9, 17), (3, 17, 6)),  # batch broadcast
    ((4, 1, 5, 7), (3, 7, 2)),  # batch broadcast, different ranks
    ((3, 9, 17), (17, 6)),  # stack @ matrix
    ((9, 17), (3, 17, 6)),  # matrix @ stack
    ((17,), (17, 6)),  # 1-D first operand: a row vector
    ((3, 9, 17), (17,)),  # 1-D second operand: a column vector
    ((17,), (2, 3, 17, 4)),
    ((40,), (40,)),  # two vectors: a 0-d result
    ((0, 5), (5, 3)),
    ((2, 4, 0), (0, 3)),  # empty contracted axis: zeros
]


@pytest.mark.parametrize("jit", [False, True])
@pytest.mark.parametrize("shapes", MATMUL_SHAPES, ids=str)
def test_matmul_matches_numpy(shapes, jit):
    rng = np.random.default_rng(0)
    A, B = (_data(rng, s, np.float32) for s in shapes)
    got, want = _forward(ooc.matmul, [A, B], jit), np.matmul(A, B)
    _assert_matches(got, want, _magnitude(np.matmul, A, B), A.shape[-1])


@pytest.mark.parametrize(
    "dtypes",
    [
        ("float64", "float64"),
        ("float32", "float64"),
        ("complex64", "complex64"),
        ("int8", "int8"),
        ("int32", "uint8"),
        ("bool", "bool"),
        ("int16", "float32"),
    ],
    ids=str,
)
@pytest.mark.parametrize("shapes", [((3, 9, 17), (17, 6)), ((1, 9, 17), (2, 17, 6))], ids=str)
def test_matmul_gives_numpys_dtype_and_value(dtypes, shapes):
    rng = np.random.default_rng(1)
    A, B = (_data(rng, s, d) for s, d in zip(shapes, dtypes))
    got, want = _forward(ooc.matmul, [A, B], jit=False), np.matmul(A, B)
    _assert_matches(got, want, _magnitude(np.matmul, A, B), A.shape[-1])


@pytest.mark.parametrize("jit", [False, True])
@pytest.mark.parametrize("ta,tb", [(True, False), (False, True), (True, True)])
def test_matmul_transposes_batched_operands_in_place(ta, tb, jit):
    rng = np.random.default_rng(2)
    A = _data(rng, (2, 17, 9) if ta else (2, 9, 17), np.float32)
    B = _data(rng, (1, 6, 17) if tb else (1, 17, 6), np.float32)

    def fn(a, b):
        return ooc.matmul(a, b, transpose_a=ta, transpose_b=tb)

    a, b = (A.swapaxes(-1, -2) if ta else A), (B.swapaxes(-1, -2) if tb else B)
    want = np.matmul(a, b)
    _assert_matches(_forward(fn, [A, B], jit), want, _magnitude(np.matmul, a, b), 17)


def test_the_operator_and_in_memory_operands():
    rng = np.random.default_rng(3)
    A, B = _data(rng, (2, 9, 17), np.float32), _data(rng, (17,), np.float32)
    got = _forward(lambda a, b: a @ b, [A, B], jit=True)
    _assert_matches(got, A @ B, _magnitude(np.matmul, A, B), 17)
    # with no DiskArray the product runs in memory, on jax.numpy
    got = ooc.matmul(jnp.asarray(A), jnp.asarray(B))
    assert isinstance(got, jax.Array)
    # XLA's product against a float64 one: to rounding, gamma(K) |A| @ |B|, whatever
    # order either sums in (a relative tolerance alone bounds nothing near 0)
    want, bound = product_reference(A, B)
    assert_within(got, want, bound, "jax.numpy's A @ B")


@pytest.mark.parametrize(
    "sa,sb,match",
    [
        ((3, 4), (5, 2), "inner dimensions"),
        ((4,), (3,), "inner dimensions"),
        ((2, 3, 4), (3, 4, 2), "batch shapes"),
        ((), (3, 2), "at least one dimension"),
    ],
)
def test_matmul_refuses_bad_shapes(sa, sb, match):
    a = ooc.DiskArray.from_numpy(np.ones(sa, np.float32)) if sa else np.float32(2)
    b = ooc.DiskArray.from_numpy(np.ones(sb, np.float32))
    with pytest.raises(ValueError, match=match):
        ooc.matmul(a, b)
    v = ooc.DiskArray.from_numpy(np.ones(3, np.float32))
    with pytest.raises(ValueError, match="two or more dimensions"):
        ooc.matmul(v, v, transpose_a=True)


def test_matmul_and_its_gradients_read_blocks_in_place():
    """The products of matmul, default tensordot axes and all their gradients are
    views of the blocks (BLAS reads them transposed where needed), never copies."""
    ops = [MatMul(ta, tb) for ta in (False, True) for tb in (False, True)]
    ops += [Contraction((0, 1, 4), (0, 4, 3), (0, 1, 3))]  # a batched product
    ops += [Contraction((0, 1, 4), (4, 3), (0, 1, 3))]  # stack @ matrix: one gemm
    ops += [Contraction((0, 1, 2, 3), (2, 3, 4), (0, 1, 4))]  # tensordot, axes=2
    for op in list(ops):
        ops.append(Contraction(op.out_labels, op.b_labels, op.a_labels))  # its dA
        ops.append(Contraction(op.a_labels, op.out_labels, op.b_labels))  # its dB
    for op in ops:
        assert _analyse(op).layout.perms is None, op


def test_matmul_blocks_accumulate_in_place_per_matrix():
    """`forward_into` for stacks (one gemm per matrix, beta 0 then 1) against NumPy,
    from an output tile of NaN (beta 0 must overwrite it) and with a broadcast batch."""
    rng = np.random.default_rng(4)
    op = Contraction((0, 1, 3), (0, 3, 2), (0, 1, 2))
    a = _data(rng, (1, 70, 80), np.float64)
    b = _data(rng, (3, 80, 60), np.float64)
    a2, b2 = a * 2, b - 1
    out = np.full((3, 70, 60), np.nan)
    assert op._gemm(out, a, b) is not None  # large matrices: the gemm path
    op.forward_into(out, a, b, accumulate=False)
    op.forward_into(out, a2, b2, accumulate=True)
    np.testing.assert_allclose(out, a @ b + a2 @ b2, rtol=1e-12)


# ---------------------------------------------------------------- tensordot


TENSORDOT = [
    ((3, 4, 5), (4, 5, 2), 2),
    ((3, 4, 5), (5, 2), 1),
    ((3, 4), (2, 5), 0),  # outer product
    ((3, 4, 5), (5, 4, 2), ([1, 2], [1, 0])),  # pairs out of order: blocks are copied
    ((3, 4, 5), (2, 3), ([-3], [-1])),
    ((3, 4), (3, 4), ((0, 1), (0, 1))),  # every axis: a 0-d result
    ((6, 5), (5,), (1, 0)),  # ints as the pair, as NumPy takes them
]


@pytest.mark.parametrize("jit", [False, True])
@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "complex64"])
@pytest.mark.parametrize("sa,sb,axes", TENSORDOT, ids=str)
def test_tensordot_matches_numpy(sa, sb, axes, dtype, jit):
    rng = np.random.default_rng(5)
    A, B = _data(rng, sa, dtype), _data(rng, sb, dtype)
    got = _forward(lambda a, b: ooc.tensordot(a, b, axes=axes), [A, B], jit)
    want = np.asarray(np.tensordot(A, B, axes=axes))
    summed = range(A.ndim - axes, A.ndim) if isinstance(axes, int) else np.atleast_1d(axes[0])
    k = math.prod(A.shape[i] for i in summed)
    magnitude = _magnitude(lambda a, b: np.tensordot(a, b, axes=axes), A, B)
    _assert_matches(got, want, magnitude, k)


def test_tensordot_takes_a_0d_operand_and_runs_in_memory_without_diskarrays():
    rng = np.random.default_rng(6)
    A = _data(rng, (3, 4), np.float32)
    got = _forward(lambda a: ooc.tensordot(a, jnp.float32(2.5), axes=0), [A], jit=False)
    _assert_matches(got, A * np.float32(2.5), np.abs(A) * 2.5, 1)
    got = ooc.tensordot(jnp.asarray(A), jnp.asarray(A), axes=2)
    assert isinstance(got, jax.Array)
    np.testing.assert_allclose(got, np.sum(A * A), rtol=1e-5)


@pytest.mark.parametrize(
    "sa,sb,axes,error,match",
    [
        ((3, 4), (5, 2), 1, ValueError, "sizes must be equal"),
        ((3, 4), (4, 2), 3, ValueError, "between 0 and"),
        ((3, 4), (4, 2), ([1], [0, 1]), ValueError, "pair up"),
        ((3, 4), (4, 2), ([2], [0]), ValueError, "out of range"),
        ((3, 4), (4, 4), ([1, 1], [0, 1]), ValueError, "repeat"),
        ((3, 4), (4, 2), "x", TypeError, "pair of sequences"),
    ],
)
def test_tensordot_refuses_bad_axes(sa, sb, axes, error, match):
    a = ooc.DiskArray.from_numpy(np.ones(sa, np.float32))
    b = ooc.DiskArray.from_numpy(np.ones(sb, np.float32))
    with pytest.raises(error, match=match):
        ooc.tensordot(a, b, axes=axes)


# ---------------------------------------------------------------- vecdot


VECDOT = [
    ((9, 17), (9, 17), -1),
    ((3, 1, 17), (4, 17), -1),  # batch broadcast
    ((4, 17, 3), (17, 3), -2),  # not the last axis: blocks are copied
    ((40,), (40,), -1),  # a 0-d result
    ((2, 3, 4), (2, 4), 0),  # an axis of each operand, as in NumPy and JAX
]


@pytest.mark.parametrize("jit", [False, True])
@pytest.mark.parametrize("dtype", ["float32", "float64", "int16", "complex128"])
@pytest.mark.parametrize("sa,sb,axis", VECDOT, ids=str)
def test_vecdot_matches_numpy(sa, sb, axis, dtype, jit):
    rng = np.random.default_rng(7)
    A, B = _data(rng, sa, dtype), _data(rng, sb, dtype)
    got = _forward(lambda a, b: ooc.vecdot(a, b, axis=axis), [A, B], jit)
    want = np.asarray(np.vecdot(A, B, axis=axis))
    magnitude = _magnitude(lambda a, b: np.vecdot(a, b, axis=axis), A, B)
    _assert_matches(got, want, magnitude, A.shape[axis])


def test_vecdot_conjugates_its_first_operand():
    x1 = ooc.DiskArray.from_numpy(np.array([1j, 2j, 3j]))
    x2 = ooc.DiskArray.from_numpy(np.array([1, 2j, 3]))
    with jax.enable_x64(True):
        assert complex(ooc.vecdot(x1, x2)) == 4 - 10j
        assert complex(ooc.vecdot(x2, x1)) == 4 + 10j


@pytest.mark.parametrize(
    "sa,sb,axis,match",
    [
        ((3, 4), (3, 5), -1, "must be equal"),
        ((3, 4), (4,), -2, "out of range"),
        ((2, 4), (3, 4), -1, "broadcast"),
    ],
)
def test_vecdot_refuses_bad_shapes(sa, sb, axis, match):
    a = ooc.DiskArray.from_numpy(np.ones(sa, np.float32))
    b = ooc.DiskArray.from_numpy(np.ones(sb, np.float32))
    with pytest.raises(ValueError, match=match):
        ooc.vecdot(a, b, axis=axis)


# ---------------------------------------------------------------- matrix_transpose


@pytest.mark.parametrize("jit", [False, True])
@pytest.mark.parametrize("dtype", ["float32", "int8", "bool", "complex64"])
@pytest.mark.parametrize("shape", [(9, 17), (3, 9, 17), (2, 1, 5, 1)], ids=str)
def test_matrix_transpose_matches_numpy(shape, dtype, jit):
    X = _data(np.random.default_rng(8), shape, dtype)
    _assert_matches(_forward(ooc.matrix_transpose, [X], jit), np.matrix_transpose(X))


def test_matrix_transpose_refuses_a_vector():
    with pytest.raises(ValueError, match="at least two dimensions"):
        ooc.matrix_transpose(ooc.DiskArray.from_numpy(np.ones(3, np.float32)))


# ---------------------------------------------------------------- gradients


def _matmul(xp, a, b):
    return xp.matmul(a, b)


def _mT_matmul(xp, a, b):
    return xp.matmul(xp.matrix_transpose(a), b)


CASES = [
    GradCase("matmul", _matmul, ((20, 24), (24, 12))),
    GradCase("matmul", _matmul, ((1, 12, 16), (3, 16, 10))),  # batch broadcast
    GradCase("matmul", _matmul, ((2, 1, 12, 24), (3, 24, 2))),
    GradCase("matmul", _matmul, ((3, 12, 16), (16, 10))),
    GradCase("matmul", _matmul, ((12, 16), (3, 16, 10))),
    GradCase("matmul", _matmul, ((40,), (2, 40, 8))),
    GradCase("matmul", _matmul, ((2, 12, 40), (40,))),
    GradCase("matmul", _matmul, ((700,), (700,))),  # a 0-d result
    GradCase("matmul", _mT_matmul, ((2, 24, 12), (1, 24, 10))),
    GradCase("tensordot", lambda xp, a, b: xp.tensordot(a, b), ((4, 6, 10), (6, 10, 5))),
    GradCase("tensordot", lambda xp, a, b: xp.tensordot(a, b, axes=0), ((6, 8), (5, 4))),
    GradCase(
        "tensordot",
        lambda xp, a, b: xp.tensordot(a, b, axes=([1, 2], [1, 0])),
        ((4, 6, 10), (10, 6, 5)),
    ),
    GradCase("vecdot", lambda xp, a, b: xp.vecdot(a, b), ((12, 40), (12, 40))),
    GradCase("vecdot", lambda xp, a, b: xp.vecdot(a, b), ((3, 1, 100), (4, 100))),
    GradCase("vecdot", lambda xp, a, b: xp.vecdot(a, b, axis=-2), ((6, 40, 3), (40, 1))),
    GradCase("matrix_transpose", lambda xp, x: xp.matrix_transpose(x), ((3, 12, 20),)),
]


@pytest.mark.parametrize("dtype, jit", MODES, ids=MODE_IDS)
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_gradient_equals_jax(case, dtype, jit):
    check(case, dtype, jit)


@pytest.mark.parametrize("name", ["matmul", "vecdot", "tensordot"])
def test_complex_and_mixed_precision_gradients_equal_jax(name):
    """A complex product's gradients (vecdot conjugates its first operand) and a
    float32 operand's gradient in a float64 product (float32, as JAX gives)."""
    rng = np.random.default_rng(9)
    fns = {
        "matmul": lambda xp, a, b: xp.matmul(a, b),
        "vecdot": lambda xp, a, b: xp.vecdot(a, b),
        "tensordot": lambda xp, a, b: xp.tensordot(a, b, axes=1),
    }
    fn = fns[name]
    sa, sb = {"matmul": ((2, 9, 7), (1, 7, 5)), "vecdot": ((3, 1, 17), (4, 17))}.get(
        name, ((2, 9, 7), (7, 5))
    )
    for da, db in [("complex128", "complex128"), ("float64", "complex128"), ("float32", "float64")]:
        A, B = _data(rng, sa, da), _data(rng, sb, db)
        with jax.enable_x64(True):
            W = _data(rng, jax.eval_shape(lambda a, b: fn(jnp, a, b), A, B).shape, "complex128")

            def want_loss(a, b):
                return jnp.real(jnp.sum(fn(jnp, a, b) * W))

            want = jax.grad(want_loss, (0, 1))(A, B)
            with ooc.MemoryBudget(BUDGET):
                w = ooc.DiskArray.from_numpy(W)

                def loss(a, b):
                    return jnp.real(ooc.sum(ooc.multiply(fn(ooc, a, b), w)))

                got = jax.jit(jax.grad(loss, (0, 1)))(
                    ooc.DiskArray.from_numpy(A), ooc.DiskArray.from_numpy(B)
                )
                for g, r, x in zip(got, want, (A, B)):
                    assert g.dtype == x.dtype
                    np.testing.assert_allclose(g.to_numpy(force=True), r, rtol=1e-5, atol=1e-5)


def test_integer_operands_get_no_gradient_and_floats_get_theirs():
    rng = np.random.default_rng(10)
    A, B = _data(rng, (2, 9, 7), "float32"), _data(rng, (7, 5), "int32")
    with jax.enable_x64(True), ooc.MemoryBudget(BUDGET):
        a, b = ooc.DiskArray.from_numpy(A), ooc.DiskArray.from_numpy(B)
        got = jax.grad(lambda a: ooc.sum(ooc.matmul(a, b)))(a)
        want = jax.grad(lambda a: jnp.sum(jnp.matmul(a, B.astype(np.float64))))(A)
        assert got.dtype == np.float32
        np.testing.assert_allclose(got.to_numpy(force=True), want, rtol=1e-5)
        with pytest.raises(TypeError):
            jax.grad(lambda b: ooc.sum(ooc.matmul(a, b)))(b)
