"""A host program's products of a vector with a matrix's rows are computed in batches
(`_row_products`): the same values as the program as traced, for the products of a
loss's gradient, and other products left as they are."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gradpipe import ooc
from gradpipe.ooc.execution import _row_products


def _closed(fn, *args):
    with jax.enable_x64(True):
        return jax.make_jaxpr(fn)(*args)


def _products(closed):
    return [e for e in closed.jaxpr.eqns if e.primitive.name == "dot_general"]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("rows", [4096, 4100, 64 * 7 * 3])
def test_the_gradient_of_a_matrix_vector_product_is_batched_and_equal(rows, dtype):
    rng = np.random.default_rng(rows)
    X = rng.standard_normal((rows, 33)).astype(dtype)
    w = rng.standard_normal(33).astype(dtype)

    def value_and_grad(w, X):
        # (the loss's pass traces this: the product's VJP is r @ X over X's rows)
        return jax.value_and_grad(lambda w: jnp.sum(jnp.square(X @ w - 1.0)))(w)

    closed = _closed(value_and_grad, w, X)
    assert [_row_products._batches(e) > 0 for e in _products(closed)] == [False, True]
    with jax.enable_x64(True):
        got = jax.jit(lambda *a: _row_products.evaluate(closed, a))(w, X)
        want = jax.jit(lambda *a: jax.core.eval_jaxpr(closed.jaxpr, closed.consts, *a))(w, X)
    tol = 2e-5 if dtype == np.float32 else 1e-12
    for g, h in zip(got, want):
        assert g.dtype == h.dtype and g.shape == h.shape
        np.testing.assert_allclose(g, h, rtol=tol, atol=tol * float(np.max(np.abs(h))))


@pytest.mark.parametrize(
    "fn, shapes",
    [
        (lambda a, b: a.T @ b, [(4096, 8), (4096, 16)]),  # matrix by matrix: XLA's own
        (lambda a, b: a @ b, [(4096,), (4096, 16)]),  # (the vector first: batched)
        (lambda a, b: a @ b, [(31,), (31, 16)]),  # too few rows
        (lambda a, b: jnp.einsum("bn,bnk->bk", a, b), [(3, 4096), (3, 4096, 5)]),  # batch axes
    ],
)
def test_only_a_vector_with_enough_rows_is_batched(fn, shapes):
    args = [np.ones(s, np.float32) for s in shapes]
    closed = _closed(fn, *args)
    batched = [_row_products._batches(e) > 0 for e in _products(closed)]
    assert batched == [len(shapes[0]) == 1 and shapes[0][0] >= 4096]
    got = _row_products.evaluate(closed, args)
    np.testing.assert_allclose(got[0], fn(*args), rtol=1e-6)


@pytest.mark.parametrize("dtype", [np.int32, np.float16, jnp.bfloat16, np.complex64])
def test_other_types_are_not_batched(dtype):
    """Integers and complex numbers, and floats narrower than 32 bits (each batch's
    result rounded to 16 bits would lose what XLA's one product keeps)."""
    a, b = np.ones(4096, dtype), np.ones((4096, 3), dtype)
    (eqn,) = _products(_closed(lambda a, b: a @ b, a, b))
    assert _row_products._batches(eqn) == 0


def test_the_matrix_first_keeps_each_operands_precision():
    rng = np.random.default_rng(0)
    M, v = rng.standard_normal((4096, 5)).astype(np.float32), rng.standard_normal(4096)
    v = v.astype(np.float32)

    def fn(M, v):
        dims = (((0,), (0,)), ((), ()))
        precision = (jax.lax.Precision.HIGHEST, jax.lax.Precision.DEFAULT)
        return jax.lax.dot_general(M, v, dims, precision=precision)

    closed = _closed(fn, M, v)
    (eqn,) = _products(closed)
    assert _row_products._batches(eqn) > 0
    got = jax.jit(lambda *a: _row_products.evaluate(closed, a))(M, v)
    np.testing.assert_allclose(got[0], M.T.astype(np.float64) @ v, rtol=1e-5)
    text = jax.jit(lambda *a: _row_products.evaluate(closed, a)).lower(M, v).as_text()
    # the vector's precision first, the matrix's second, as the operands now stand
    (line,) = [t for t in text.splitlines() if "dot_general" in t and "HIGHEST" in t]
    assert line.index("DEFAULT") < line.index("HIGHEST")


def test_a_least_squares_step_over_the_disk_matches_jax_numpy(tmp_path, monkeypatch):
    """The loss's pass on the host, in one pass, its gradient's product batched,
    against jax.numpy in memory: value and gradient."""
    batched = []
    real = _row_products._batched
    monkeypatch.setattr(_row_products, "_batched", lambda *a: batched.append(a) or real(*a))
    rng = np.random.default_rng(3)
    Xv = rng.standard_normal((8192, 16)).astype(np.float32)
    yv = rng.standard_normal(8192).astype(np.float32)
    X = ooc.DiskArray.from_numpy(Xv, path=tmp_path / "x.gpa")
    y = ooc.DiskArray.from_numpy(yv, path=tmp_path / "y.gpa")
    p = {"w": jnp.asarray(rng.standard_normal(16).astype(np.float32)), "b": jnp.float32(0.3)}

    def loss(xp, X, y):
        return lambda p: xp.mean(xp.square(X @ p["w"] + p["b"] - y))

    with ooc.MemoryBudget(256 * 2**10, device="host"):
        plan = ooc.explain(jax.jit(jax.value_and_grad(loss(ooc, X, y))), p)
    assert [s.phase for s in plan.stages] == ["value and gradient"] and batched
    value, grad = plan.result
    want, want_grad = jax.value_and_grad(loss(jnp, Xv, yv))(p)
    np.testing.assert_allclose(value, want, rtol=1e-5)
    for k in p:
        np.testing.assert_allclose(grad[k], want_grad[k], rtol=1e-4, atol=1e-5)
