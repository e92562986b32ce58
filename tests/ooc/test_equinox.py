"""Equinox's filters see DiskArray weights: eqx.filter_grad differentiates them.

Without this, `eqx.is_inexact_array(disk_array)` is False, so `eqx.filter_grad`
returns None for DiskArray weights and an optax loop trains nothing, silently.
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax

from gradpipe import ooc


class Linear(eqx.Module):
    w: ooc.DiskArray
    b: jax.Array


def _data(rng):
    X = rng.standard_normal((60, 5)).astype(np.float32)
    W = rng.standard_normal((5, 1)).astype(np.float32)
    return X, W, X @ W + 0.5


def test_filters_count_disk_arrays_concrete_and_traced():
    f, i = ooc.DiskArray.zeros((3, 2)), ooc.DiskArray.zeros((3, 2), np.int32)
    assert eqx.is_array(f) and eqx.is_array(i) and eqx.is_array_like(f)
    assert eqx.is_inexact_array(f) and not eqx.is_inexact_array(i)
    seen = []

    def loss(w):
        seen.append((eqx.is_array(w), eqx.is_inexact_array(w)))
        return ooc.sum(w)

    jax.jit(jax.grad(loss))(f)
    assert seen == [(True, True)]
    diff, static = eqx.partition({"f": f, "i": i, "s": "x"}, eqx.is_inexact_array)
    assert diff["f"] is f and diff["i"] is None and static["i"] is i
    assert not eqx.is_array(np.float32) and not eqx.is_array("x")  # others unchanged


def test_filter_grad_matches_jax_in_memory(rng):
    X, _, Y = _data(rng)
    x, y = ooc.DiskArray.from_numpy(X), ooc.DiskArray.from_numpy(Y)
    w0 = rng.standard_normal((5, 1)).astype(np.float32)
    model = Linear(ooc.DiskArray.from_numpy(w0), jnp.float32(0.1))

    value, grads = eqx.filter_value_and_grad(lambda m: ooc.mean(ooc.square(x @ m.w + m.b - y)))(
        model
    )
    ref_value, (ref_w, ref_b) = jax.value_and_grad(
        lambda w, b: jnp.mean(jnp.square(X @ w + b - Y)), argnums=(0, 1)
    )(w0, jnp.float32(0.1))
    assert isinstance(grads.w, ooc.DiskArray), grads.w
    np.testing.assert_allclose(value, ref_value, rtol=1e-5)
    np.testing.assert_allclose(grads.w.to_numpy(), ref_w, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(grads.b, ref_b, rtol=1e-4)
    assert eqx.filter_grad(lambda m: ooc.sum(x @ m.w))(model).w is not None


def test_optax_training_step_trains_disk_array_weights(rng):
    X, W, Y = _data(rng)
    x, y = ooc.DiskArray.from_numpy(X), ooc.DiskArray.from_numpy(Y)
    model = Linear(ooc.DiskArray.zeros((5, 1)), jnp.float32(0.0))
    optimizer = optax.sgd(0.2)
    state = optimizer.init(eqx.filter(model, eqx.is_inexact_array))

    @eqx.filter_jit
    def step(model, state, x, y):  # DiskArrays are dynamic arguments of filter_jit
        loss, grads = eqx.filter_value_and_grad(lambda m: ooc.mean(ooc.square(x @ m.w + m.b - y)))(
            model
        )
        updates, state = optimizer.update(grads, state)
        return eqx.apply_updates(model, updates), state, loss

    first = None
    for _ in range(80):
        model, state, loss = step(model, state, x, y)
        first = loss if first is None else first
    assert isinstance(model.w, ooc.DiskArray)
    assert float(loss) < float(first) / 1000
    np.testing.assert_allclose(model.w.to_numpy(), W, atol=2e-2)
    np.testing.assert_allclose(model.b, 0.5, atol=2e-2)
