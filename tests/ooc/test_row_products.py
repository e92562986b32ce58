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


def test_integers_are_not_batched():
    a, b = np.ones(4096, np.int32), np.ones((4096, 3), np.int32)
    (eqn,) = _products(_closed(lambda a, b: a @ b, a, b))
    assert _row_products._batches(eqn) == 0


def test_a_least_squares_step_over_the_disk_matches_jax_numpy(tmp_path):
    """The loss's pass on the host, with the batched gradient product, against
    jax.numpy in memory: value and gradient."""
    rng = np.random.default_rng(3)
    Xv = rng.standard_normal((20000, 48)).astype(np.float32)
    yv = rng.standard_normal(20000).astype(np.float32)
    X = ooc.DiskArray.from_numpy(Xv, path=tmp_path / "x.gpa")
    y = ooc.DiskArray.from_numpy(yv, path=tmp_path / "y.gpa")
    p = {"w": jnp.asarray(rng.standard_normal(48).astype(np.float32)), "b": jnp.float32(0.3)}

    def loss(xp, X, y):
        return lambda p: xp.mean(xp.square(X @ p["w"] + p["b"] - y))

    with ooc.MemoryBudget(2 * 2**20, device="host"):
        value, grad = jax.jit(jax.value_and_grad(loss(ooc, X, y)))(p)
    want, want_grad = jax.value_and_grad(loss(jnp, Xv, yv))(p)
    np.testing.assert_allclose(value, want, rtol=1e-5)
    for k in p:
        np.testing.assert_allclose(grad[k], want_grad[k], rtol=1e-4, atol=1e-5)
