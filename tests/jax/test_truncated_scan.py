"""truncated_scan: lax.scan's values, the carry's gradient kept for the last k steps."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gradpipe.jax import truncated_scan

HOURS = 24
Q = 1.0 + 0.5 * jnp.sin(2 * jnp.pi * jnp.arange(HOURS) / HOURS)


def refill(c, q_t):
    c = 0.9 * c + q_t
    return c, 2.0 * c


def last_column(q, k):
    return truncated_scan(refill, 0.0, q, k=k)[0]


@pytest.mark.parametrize("k", [1, 3, 23, 24, 100])
def test_forward_values_are_those_of_lax_scan(k):
    carry, ys = truncated_scan(refill, 0.0, Q, k=k)
    full_carry, full_ys = jax.lax.scan(refill, 0.0, Q)
    np.testing.assert_array_equal(carry, full_carry)
    np.testing.assert_array_equal(ys, full_ys)


def test_k3_keeps_exactly_three_gradients(x64):
    grad = jax.grad(last_column)(jnp.asarray(Q, jnp.float64), 3)
    assert int(jnp.count_nonzero(grad)) == 3
    np.testing.assert_allclose(grad[-3:], [0.81, 0.9, 1.0], rtol=1e-12)


def test_k24_is_the_full_gradient(x64):
    q = jnp.asarray(Q, jnp.float64)
    grad = jax.grad(last_column)(q, 24)
    np.testing.assert_allclose(grad[0], 0.9**23, rtol=1e-12)
    assert grad[0] == pytest.approx(0.0886, abs=5e-5)
    full = jax.grad(lambda q: jax.lax.scan(refill, 0.0, q)[0])(q)
    np.testing.assert_allclose(grad, full, rtol=1e-12)


def test_pytree_carry_and_inputs_under_jit_and_vmap():
    def step(carry, x):
        c, n = carry
        return (0.9 * c + x["q"], n + 1), x["q"] * c

    xs = {"q": Q}
    f = jax.jit(lambda xs: truncated_scan(step, (0.0, 0), xs, k=5))
    (c, n), ys = f(xs)
    (c_ref, n_ref), ys_ref = jax.lax.scan(step, (0.0, 0), xs)
    assert int(n) == int(n_ref) == HOURS
    np.testing.assert_allclose(c, c_ref)
    np.testing.assert_allclose(ys, ys_ref)
    batched = jax.vmap(lambda q: last_column(q, 4))(jnp.stack([Q, 2 * Q]))
    np.testing.assert_allclose(batched[1], 2 * batched[0], rtol=1e-6)


def test_bad_k_and_missing_length():
    with pytest.raises(ValueError, match="k must be at least 1, got k=0"):
        truncated_scan(refill, 0.0, Q, k=0)
    with pytest.raises(TypeError, match="got a bool"):
        truncated_scan(refill, 0.0, Q, k=True)
    with pytest.raises(TypeError, match="must be an int"):
        truncated_scan(refill, 0.0, Q, k=2.5)
    with pytest.raises(ValueError, match="length=T"):
        truncated_scan(lambda c, _: (c + 1, c), 0, None, k=2)
    carry, _ = truncated_scan(lambda c, _: (c + 1, c), 0, None, k=2, length=7)
    assert int(carry) == 7
