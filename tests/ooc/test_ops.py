"""Every built-in operation against NumPy/JAX on in-memory data, values and gradients."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gradpipe import ooc

SHAPES_2D = [(1, 1), (1, 7), (7, 1), (13, 17), (31, 29)]
DTYPES = [np.float32, np.float64]


def tol(dtype):
    return dict(rtol=2e-4, atol=2e-4) if dtype == np.float32 else dict(rtol=1e-10, atol=1e-10)


def disk(x):
    return ooc.DiskArray.from_numpy(np.asarray(x))


def mem(x):
    return x.to_numpy(force=True)


def grads_of(f_ooc, f_jnp, arrays, dtype):
    """Gradients of scalar functions through ooc (DiskArrays) and jax (in memory)."""
    argnums = tuple(range(len(arrays)))
    with jax.enable_x64(dtype == np.float64):
        got = jax.grad(f_ooc, argnums=argnums)(*[disk(a) for a in arrays])
        want = jax.grad(f_jnp, argnums=argnums)(*[jnp.asarray(a) for a in arrays])
    return [g.to_numpy(force=True) for g in got], [np.asarray(w) for w in want]


# ---------------------------------------------------------------- matmul


MATMUL_CASES = [
    (dtype, mkn, t)
    for mkn in [(1, 1, 1), (1, 5, 1), (7, 1, 3), (31, 29, 37)]
    for t in [(False, False), (True, False), (False, True), (True, True)]
    for dtype in DTYPES
    if dtype == np.float32 or t[0] == t[1]
]


@pytest.mark.parametrize("dtype,mkn,t", MATMUL_CASES, ids=str)
def test_matmul_matches_numpy_and_jax_grad(rng, tiny_budget, dtype, mkn, t):
    (m, k, n), (ta, tb) = mkn, t
    A = rng.standard_normal((k, m) if ta else (m, k)).astype(dtype)
    B = rng.standard_normal((n, k) if tb else (k, n)).astype(dtype)
    opA, opB = (A.T if ta else A), (B.T if tb else B)
    c = ooc.matmul(disk(A), disk(B), transpose_a=ta, transpose_b=tb)
    np.testing.assert_allclose(c.to_numpy(force=True), opA @ opB, **tol(dtype))
    assert c.dtype == dtype

    def f(a, b):
        return ooc.sum(ooc.square(ooc.matmul(a, b, transpose_a=ta, transpose_b=tb)))

    def ref(a, b):
        return jnp.sum(((a.T if ta else a) @ (b.T if tb else b)) ** 2)

    got, want = grads_of(f, ref, [A, B], dtype)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, **tol(dtype))


def test_matmul_refuses_mismatched_shapes():
    with pytest.raises(ValueError, match="inner dimensions"):
        ooc.matmul(disk(np.ones((3, 4), np.float32)), disk(np.ones((5, 2), np.float32)))
    with pytest.raises(ValueError, match="at least one dimension"):
        ooc.matmul(disk(np.ones((3, 2), np.float32)), np.float32(2))


# ---------------------------------------------------------------- reductions


@pytest.mark.parametrize(
    "dtype,shape",
    [(np.float32, s) for s in [(1, 1), (1, 7), (7, 1), (31, 29), (5, 3, 7)]]
    + [(np.float64, (13, 17))],
    ids=str,
)
@pytest.mark.parametrize("name", ["sum", "mean", "max"])
def test_reductions_match_numpy(rng, tiny_budget, dtype, shape, name):
    X = rng.standard_normal(shape).astype(dtype)
    x = disk(X)
    axes = [None, 0, -1, (0, len(shape) - 1)]
    for axis in axes:
        for keepdims in (False, True):
            with jax.enable_x64(dtype == np.float64):  # scalar results are JAX arrays
                got = getattr(ooc, name)(x, axis=axis, keepdims=keepdims)
            want = getattr(np, name)(X, axis=axis, keepdims=keepdims)
            got = got.to_numpy(force=True) if isinstance(got, ooc.DiskArray) else np.asarray(got)
            np.testing.assert_allclose(got, want, **tol(dtype))
            assert got.shape == want.shape


@pytest.mark.parametrize(
    "dtype,axis", [(np.float32, None), (np.float32, 0), (np.float32, 1), (np.float64, 1)]
)
@pytest.mark.parametrize("name", ["sum", "mean", "max"])
def test_reduction_gradients_match_jax(rng, tiny_budget, dtype, name, axis):
    X = rng.standard_normal((13, 17)).astype(dtype)
    ooc_f, jnp_f = getattr(ooc, name), getattr(jnp, name)

    def f(x):
        r = ooc_f(x, axis=axis)
        return r if axis is None else ooc.sum(ooc.square(r))

    def ref(x):
        r = jnp_f(x, axis=axis)
        return r if axis is None else jnp.sum(r**2)

    (got,), (want,) = grads_of(f, ref, [X], dtype)
    np.testing.assert_allclose(got, want, **tol(dtype))


def test_max_gradient_splits_ties_like_jax(tiny_budget):
    X = np.array([[1.0, 3.0, 3.0], [2.0, 2.0, 0.0]], np.float32)
    (got,), (want,) = grads_of(lambda x: ooc.max(x), lambda x: jnp.max(x), [X], np.float32)
    np.testing.assert_allclose(got, want)
    f = lambda x: ooc.sum(ooc.max(x, axis=1))
    (got,), (want,) = grads_of(f, lambda x: jnp.sum(jnp.max(x, axis=1)), [X], np.float32)
    np.testing.assert_allclose(got, want)


# ---------------------------------------------------------------- elementwise

UNARY = {
    "negative": jnp.negative,
    "exp": jnp.exp,
    "log": jnp.log,
    "sqrt": jnp.sqrt,
    "square": jnp.square,
    "abs": jnp.abs,
    "sin": jnp.sin,
    "cos": jnp.cos,
    "tanh": jnp.tanh,
    "sigmoid": jax.nn.sigmoid,
    "relu": jax.nn.relu,
}


@pytest.mark.parametrize(
    "dtype,name",
    [(np.float32, n) for n in sorted(UNARY)] + [(np.float64, n) for n in ("exp", "tanh", "log")],
)
def test_unary_values_and_gradients(rng, tiny_budget, dtype, name):
    X = rng.standard_normal((13, 17)).astype(dtype)
    if name in ("log", "sqrt"):
        X = np.abs(X) + 0.5
    got = getattr(ooc, name)(disk(X)).to_numpy(force=True)
    with jax.enable_x64(dtype == np.float64):
        want = np.asarray(UNARY[name](jnp.asarray(X)))
    np.testing.assert_allclose(got, want, **tol(dtype))
    f = lambda x: ooc.sum(getattr(ooc, name)(x) * 1.5)
    ref = lambda x: jnp.sum(UNARY[name](x) * 1.5)
    (g,), (w,) = grads_of(f, ref, [X], dtype)
    np.testing.assert_allclose(g, w, **tol(dtype))


def test_power_with_constant_exponent(rng, tiny_budget):
    X = np.abs(rng.standard_normal((7, 5))) + 0.1
    np.testing.assert_allclose(ooc.power(disk(X), 3).to_numpy(force=True), X**3)
    (g,), (w,) = grads_of(lambda x: ooc.sum(x**2.5), lambda x: jnp.sum(x**2.5), [X], np.float64)
    np.testing.assert_allclose(g, w, rtol=1e-10)


BINARY = {
    "add": jnp.add,
    "subtract": jnp.subtract,
    "multiply": jnp.multiply,
    "divide": jnp.divide,
    "maximum": jnp.maximum,
    "minimum": jnp.minimum,
}
BROADCASTS = [
    ((13, 17), (13, 17)),
    ((13, 17), (1, 17)),
    ((13, 17), (17,)),
    ((13, 1), (1, 17)),
    ((1, 1), (7, 1)),
    ((5, 3, 7), (3, 1)),
]


BINARY_CASES = [(np.float32, n, s) for n in sorted(BINARY) for s in BROADCASTS[1:5]] + [
    (np.float64, n, BROADCASTS[i % 6]) for i, n in enumerate(sorted(BINARY))
]


@pytest.mark.parametrize("dtype,name,shapes", BINARY_CASES, ids=str)
def test_binary_broadcasting_values_and_gradients(rng, tiny_budget, dtype, name, shapes):
    sa, sb = shapes
    A = rng.standard_normal(sa).astype(dtype)
    B = rng.standard_normal(sb).astype(dtype) + (3 if name == "divide" else 0)
    got = getattr(ooc, name)(disk(A), disk(B)).to_numpy(force=True)
    np.testing.assert_allclose(got, getattr(np, name)(A, B), **tol(dtype))
    f = lambda a, b: ooc.sum(ooc.square(getattr(ooc, name)(a, b)))
    ref = lambda a, b: jnp.sum(BINARY[name](a, b) ** 2)
    got, want = grads_of(f, ref, [A, B], dtype)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, **tol(dtype))


@pytest.mark.parametrize("dtype", DTYPES)
def test_scalar_operands_python_and_traced(rng, tiny_budget, dtype):
    X = rng.standard_normal((13, 17)).astype(dtype)
    x = disk(X)
    np.testing.assert_allclose((2.0 * x - 1).to_numpy(force=True), 2 * X - 1, **tol(dtype))
    np.testing.assert_allclose(
        (1 / (x * x + 1)).to_numpy(force=True), 1 / (X * X + 1), **tol(dtype)
    )

    # a traced scalar is an input: its gradient is a scalar
    def f(s, x):
        return ooc.sum(ooc.square(x * s - s))

    with jax.enable_x64(dtype == np.float64):
        gs, gx = jax.grad(f, argnums=(0, 1))(jnp.asarray(0.7, dtype), x)
        ws, wx = jax.grad(lambda s, x: jnp.sum((x * s - s) ** 2), argnums=(0, 1))(
            jnp.asarray(0.7, dtype), jnp.asarray(X)
        )
    np.testing.assert_allclose(np.asarray(gs), ws, **tol(dtype))
    np.testing.assert_allclose(gx.to_numpy(force=True), wx, **tol(dtype))


def test_in_memory_operands_join_on_disk_and_traced_arrays():
    x = disk(np.ones((3, 3), np.float32))
    bias = np.arange(3, dtype=np.float32)
    want = np.ones((3, 3)) + bias
    np.testing.assert_array_equal(ooc.add(x, bias).to_numpy(), want)
    np.testing.assert_array_equal(ooc.add(x, jnp.asarray(bias)).to_numpy(), want)
    traced = jax.jit(lambda a, b: ooc.add(a, b))(x, jnp.asarray(bias))  # held in memory
    np.testing.assert_array_equal(traced.to_numpy(), want)


# ---------------------------------------------------------------- layout


@pytest.mark.parametrize(
    "dtype,shape,axes",
    [
        (np.float32, (13, 17), None),
        (np.float32, (1, 7), None),
        (np.float64, (5, 3, 7), (2, 0, 1)),
    ],
)
def test_transpose_values_and_gradients(rng, tiny_budget, dtype, shape, axes):
    X = rng.standard_normal(shape).astype(dtype)
    np.testing.assert_allclose(
        ooc.transpose(disk(X), axes).to_numpy(force=True), np.transpose(X, axes)
    )
    W = rng.standard_normal(np.transpose(X, axes).shape).astype(dtype)
    f = lambda x: ooc.sum(ooc.transpose(x, axes) * disk(W))
    (g,), (w,) = grads_of(f, lambda x: jnp.sum(jnp.transpose(x, axes) * W), [X], dtype)
    np.testing.assert_allclose(g, w, **tol(dtype))
    assert (disk(X[:2, :2]).T.to_numpy(force=True) == X[:2, :2].T).all()


INDICES = [
    (slice(3, 9),),
    (slice(0, 1), slice(2, 17)),
    (4,),
    (slice(None), -1),
    (slice(2, 11), slice(5, 6)),
    (Ellipsis, slice(1, 4)),
]


@pytest.mark.parametrize(
    "dtype,index",
    [(np.float32, ix) for ix in INDICES] + [(np.float64, INDICES[1])],
    ids=str,
)
def test_slicing_values_and_gradients(rng, tiny_budget, dtype, index):
    X = rng.standard_normal((13, 17)).astype(dtype)
    np.testing.assert_allclose(disk(X)[index].to_numpy(force=True), X[index])
    f = lambda x: ooc.sum(ooc.square(x[index]))
    (g,), (w,) = grads_of(f, lambda x: jnp.sum(x[index] ** 2), [X], dtype)
    np.testing.assert_allclose(g, w, **tol(dtype))


def test_slice_rows_and_tile(rng, tiny_budget):
    X = rng.standard_normal((31, 29)).astype(np.float32)
    x = disk(X)
    np.testing.assert_array_equal(ooc.slice_rows(x, 7, 20).to_numpy(force=True), X[7:20])
    np.testing.assert_array_equal(
        ooc.slice_tile(x, (3, 30), (28, 29)).to_numpy(force=True), X[3:30, 28:29]
    )


def test_out_of_range_and_mask_indices_are_refused():
    x = disk(np.ones((4, 4), np.float32))
    with pytest.raises(IndexError, match="out of bounds"):
        x[9]
    with pytest.raises(IndexError, match="where"):
        x[x > 0]  # a mask's result size depends on the data


def test_empty_arrays(tiny_budget):
    x = disk(np.zeros((0, 5), np.float32))
    y = disk(np.ones((5, 3), np.float32))
    assert ooc.exp(x).shape == (0, 5)
    assert float(ooc.sum(x)) == 0.0
    np.testing.assert_array_equal(mem(ooc.sum(x, axis=0)), np.zeros(5))
    assert (x @ y).shape == (0, 3)
    assert jax.grad(lambda x: ooc.sum(x @ y))(x).shape == (0, 5)


@pytest.mark.parametrize("ta", [False, True])
@pytest.mark.parametrize("tb", [False, True])
@pytest.mark.parametrize(
    "dtypes",
    [
        ("float32", "float32"),
        ("float64", "float64"),
        ("complex64", "complex64"),
        ("float32", "float64"),
        ("int32", "int32"),
    ],
)
@pytest.mark.parametrize("mkn", [(7, 5, 3), (1, 1, 1), (1, 13, 2)])
def test_matmul_blocks_write_and_accumulate_in_place(ta, tb, dtypes, mkn):
    """`forward_into` (BLAS gemm with beta 0, then 1) against NumPy, from an output
    tile full of NaN (beta 0 must overwrite, never scale, what is there)."""
    from gradpipe.ooc.ops._matmul import MatMul

    rng = np.random.default_rng(3)
    m, k, n = mkn
    a = (rng.standard_normal((k, m) if ta else (m, k)) * 4).astype(dtypes[0])
    b = (rng.standard_normal((n, k) if tb else (k, n)) * 4).astype(dtypes[1])
    if a.dtype.kind == "c":
        a, b = a + 1j * a[::-1], b - 2j * b
    a2, b2 = (a * 2).astype(a.dtype), (b - 1).astype(b.dtype)
    op = MatMul(ta, tb)
    want = op.forward_block(a, b) + op.forward_block(a2, b2)
    out = np.empty(want.shape, want.dtype)
    if out.dtype.kind in "fc":
        out[...] = np.nan
    op.forward_into(out, a, b, accumulate=False)
    op.forward_into(out, a2, b2, accumulate=True)
    rtol = 1e-5 if want.dtype in (np.float32, np.complex64) else 1e-12
    np.testing.assert_allclose(out, want, rtol=rtol)
