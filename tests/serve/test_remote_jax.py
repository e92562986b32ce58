"""A RemoteComponent inside JAX: jit, grad, jvp, vmap and pipelines equal local results."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from served_components import forward

from gradpipe import Lambda

RNG = np.random.default_rng(1)
X = jnp.asarray(RNG.normal(size=6).astype(np.float32))
A = jnp.asarray(RNG.normal(size=6).astype(np.float32))
W = jnp.float32(0.9)


def loss(f, x, w, a):
    out = f({"x": x, "w": w, "p": {"a": a}, "n": 2})
    return jnp.sum(out["y"] ** 2) + out["s"]


def close(a, b):
    for u, v in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        np.testing.assert_allclose(np.asarray(u), np.asarray(v), rtol=2e-5, atol=1e-5)


def requests_delta(remote, action):
    """The requests ``action`` made. JAX dispatches asynchronously: its callbacks may
    still be running when a call returns, so every result is waited for on both sides."""
    before = remote.stats()["requests"]
    result = jax.block_until_ready(action())
    after = remote.stats()["requests"]
    delta = {k: after.get(k, 0) - before.get(k, 0) for k in after}
    return result, {k: v for k, v in delta.items() if v}


def test_call_and_jit(remote):
    inputs = {"x": X, "w": W, "p": {"a": A}, "n": 2}
    close(remote(inputs), forward(inputs))
    jitted = jax.jit(lambda x: remote({"x": x, "w": W, "p": {"a": A}, "n": 2}))
    close(jitted(X), forward({"x": X, "w": W, "p": {"a": A}, "n": 2}))
    assert jitted(X)["k"].dtype == jnp.int32


@pytest.mark.parametrize("wrap", [lambda f: f, jax.jit], ids=["eager", "jit"])
def test_grad(remote, wrap):
    grad = wrap(jax.grad(lambda x, w, a: loss(remote, x, w, a), argnums=(0, 1, 2)))
    want = jax.grad(lambda x, w, a: loss(forward, x, w, a), argnums=(0, 1, 2))(X, W, A)
    close(grad(X, W, A), want)


def test_value_and_grad_makes_exactly_two_requests(remote):
    vg = jax.value_and_grad(lambda x: loss(remote, x, W, A))
    jax.block_until_ready(vg(X))  # the first call also asks /abstract_eval once
    (value, grad), delta = requests_delta(remote, lambda: vg(X + 1))
    assert delta == {"apply": 1, "vjp": 1}
    want_value, want_grad = jax.value_and_grad(lambda x: loss(forward, x, W, A))(X + 1)
    close((value, grad), (want_value, want_grad))


def test_grad_bytes_are_input_plus_cotangent(remote):
    x = jnp.asarray(RNG.normal(size=100_000).astype(np.float32))
    a = jnp.zeros_like(x)
    vg = jax.value_and_grad(lambda x: loss(remote, x, W, a))
    jax.block_until_ready(vg(x))  # (JAX dispatches asynchronously)
    before = remote.client.bytes_sent
    jax.block_until_ready(vg(x * 2))
    sent = remote.client.bytes_sent - before
    payload = x.nbytes * 2 + a.nbytes  # forward: x and a; backward: the cotangent of y
    assert sent <= 1.1 * payload


def test_jvp(remote):
    tangents = (jnp.ones(6), jnp.float32(0.5), jnp.linspace(0, 1, 6))
    got = jax.jvp(lambda x, w, a: loss(remote, x, w, a), (X, W, A), tangents)
    want = jax.jvp(lambda x, w, a: loss(forward, x, w, a), (X, W, A), tangents)
    close(got, want)


def test_jit_of_jvp(remote):
    f = jax.jit(lambda x, t: jax.jvp(lambda x: loss(remote, x, W, A), (x,), (t,)))
    want = jax.jvp(lambda x: loss(forward, x, W, A), (X,), (X,))
    close(f(X, X), want)


def test_vmap_is_one_batched_request(remote):
    xs = jnp.asarray(RNG.normal(size=(4, 6)).astype(np.float32))
    f = jax.vmap(lambda x: remote({"x": x, "w": W, "p": {"a": A}, "n": 2})["y"])
    f(xs)  # the output shapes of these inputs are asked once (abstract_eval), then kept
    got, delta = requests_delta(remote, lambda: f(xs))
    want = jax.vmap(lambda x: forward({"x": x, "w": W, "p": {"a": A}, "n": 2})["y"])(xs)
    close(got, want)
    assert delta == {"apply": 1}


def test_nested_vmap_of_two_arguments(remote):
    xs = jnp.asarray(RNG.normal(size=(2, 3, 6)).astype(np.float32))
    ws = jnp.asarray([0.5, 1.5], jnp.float32)

    def f(g):
        inner = jax.vmap(
            lambda x, w: g({"x": x, "w": w, "p": {"a": A}, "n": 1})["s"], in_axes=(0, None)
        )
        return jax.vmap(inner, in_axes=(0, 0))(xs, ws)

    close(f(remote), f(forward))


def test_as_an_operator_in_a_pipeline(remote):
    pipeline = (
        Lambda(lambda x: {"x": x, "w": W, "p": {"a": A}, "n": 1})
        | remote
        | Lambda(lambda out: jnp.sum(out["y"]))
    )
    local = (
        Lambda(lambda x: {"x": x, "w": W, "p": {"a": A}, "n": 1})
        | Lambda(forward)
        | Lambda(lambda out: jnp.sum(out["y"]))
    )
    close(jax.grad(pipeline)(X), jax.grad(local)(X))
    rebuilt = type(remote).from_state(remote.state)
    assert rebuilt.url == remote.url and "token" not in remote.state["config"]
    rebuilt.close()


def test_abstract_eval_is_cached(remote):
    abstract = {"x": {"shape": [9], "dtype": "float32"}, "w": {"shape": [], "dtype": "float32"},
                "p": {"a": {"shape": [9], "dtype": "float32"}}}  # fmt: skip
    remote.abstract_eval(abstract)
    _, delta = requests_delta(remote, lambda: remote.abstract_eval(abstract))
    assert delta == {}


def test_unknown_handle_falls_back_to_inputs(remote, local):
    inputs = {"x": np.asarray(X), "w": np.float32(W), "p": {"a": np.asarray(A)}}
    cot = {"y": np.ones(6, np.float32)}
    got, delta = requests_delta(
        remote, lambda: remote.vjp(inputs, ["x"], ["y"], cot, handle="0" * 32)
    )
    close(got["x"], local.vjp(inputs, ["x"], ["y"], cot)["x"])
    assert delta == {"vjp:410": 1, "vjp": 1}


def test_vmap_of_grad_and_grad_of_vmap(remote):
    xs = jnp.asarray(RNG.normal(size=(3, 6)).astype(np.float32))

    def per_element(f):
        return jax.vmap(jax.grad(lambda x: loss(f, x, W, A)))(xs)

    def batched(f):
        return jax.grad(lambda xs: jax.vmap(lambda x: loss(f, x, W, A))(xs).sum())(xs)

    close(per_element(remote), per_element(forward))
    close(batched(remote), batched(forward))
