"""A backward pass reads its stored inputs as the forward pass saw them
(`_kept_residuals`): an array written in place between the forward and the backward
pass (inside the loss, or between ``jax.vjp`` and its pullback) is copied first, and
a pullback run again after a write that followed its first run is refused."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gradpipe import ooc

N, K = 300, 8
BUDGET = 16 * 2**10


def _data(seed=0):
    rng = np.random.default_rng(seed)
    A = rng.standard_normal((N, K)).astype(np.float32)
    return A, jnp.asarray(rng.standard_normal(K), jnp.float32)


def _open(A, named, tmp_path):
    return ooc.DiskArray.from_numpy(A, path=tmp_path / "X.gpa" if named else None)


@pytest.mark.parametrize("named", [False, True], ids=["scratch", "named"])
def test_an_array_written_inside_the_loss_is_read_as_it_was_by_the_backward_pass(named, tmp_path):
    """``X @ w`` then ``X[:50] = 2``: the matrix product's gradient is X's old rows
    (a scratch array is written in place, a named one renamed over)."""
    A, w = _data()

    def loss(xp, X, write):
        def f(w):
            before = xp.tanh(X @ w)
            return xp.mean(before) + xp.mean(write(X) @ w)

        return f

    def write(X):
        X[:50] = 2.0
        return X

    want = jax.value_and_grad(loss(jnp, jnp.asarray(A), lambda X: X.at[:50].set(2.0)))(w)
    with ooc.MemoryBudget(BUDGET):
        X = _open(A, named, tmp_path)
        got = jax.value_and_grad(loss(ooc, X, write))(w)
        assert np.all(X[:50].to_numpy() == 2.0)  # (the write itself happened)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5)
    np.testing.assert_allclose(got[1], want[1], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("named", [False, True], ids=["scratch", "named"])
def test_a_pullback_called_after_its_input_was_written_uses_the_old_values(named, tmp_path):
    A, w = _data(1)
    B = A * 3
    with ooc.MemoryBudget(BUDGET):
        X = _open(A, named, tmp_path)
        y, pull = jax.vjp(lambda w: ooc.tanh(X @ w), w)
        X[...] = B  # (whole: every page of X rewritten)
        ct = ooc.DiskArray.from_numpy(np.linspace(-1, 1, N).astype(np.float32))
        (got,) = pull(ct)
        y_now = y.to_numpy()
    want_y, want_pull = jax.vjp(lambda w: jnp.tanh(jnp.asarray(A) @ w), w)
    np.testing.assert_allclose(y_now, want_y, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got, want_pull(jnp.linspace(-1, 1, N))[0], rtol=1e-4, atol=1e-5)


def test_a_pullback_run_again_after_a_write_that_followed_it_is_refused():
    """Its first run let its residuals go (no copy at later writes): a second run
    would read the new values, so it says so instead."""
    A, w = _data(2)
    with ooc.MemoryBudget(BUDGET):
        X = ooc.DiskArray.from_numpy(A)
        _, pull = jax.vjp(lambda w: ooc.tanh(X @ w), w)
        ct = ooc.DiskArray.from_numpy(np.ones(N, np.float32))
        first = pull(ct)[0]
        again = pull(ct)[0]  # (no write between: the same answer)
        np.testing.assert_array_equal(first, again)
        X[:10] = 0.0
        with pytest.raises(RuntimeError, match="written in place after the pass ran once"):
            pull(ct)


def test_a_training_loop_that_writes_its_data_after_each_step_copies_nothing():
    """Writes after a step's backward pass are the usual loop: nothing is copied
    for them (the bytes written are those of the writes)."""
    A, w = _data(3)
    with ooc.MemoryBudget(BUDGET):
        X = ooc.DiskArray.from_numpy(A)
        for step in range(3):
            jax.grad(lambda w: ooc.mean(ooc.tanh(X @ w)))(w)
            before = ooc.io_stats()
            X[:10] = float(step)
            written = (ooc.io_stats() - before).bytes_written
            assert written < X.nbytes  # (10 rows, not a copy of X)


def test_a_result_written_into_after_the_forward_pass_is_read_as_it_was():
    """A result computed on read (``tanh(X)``, a chain) written into by a set-item
    between ``jax.vjp`` and its pullback: the product's gradient reads the
    result's values from before the write."""
    A, w = _data(4)
    with ooc.MemoryBudget(BUDGET):
        T = ooc.tanh(ooc.DiskArray.from_numpy(A))
        _, pull = jax.vjp(lambda w: T @ w, w)
        T[:100] = 5.0
        ct = np.linspace(-1, 1, N).astype(np.float32)
        (got,) = pull(ooc.DiskArray.from_numpy(ct))
    np.testing.assert_allclose(got, np.tanh(A).T @ ct, rtol=1e-4, atol=1e-4)
