"""gradpipe calls a real ``tesseract-runtime serve`` (tesseract-core's own runtime, in
its own virtual environment) as a remote component under ``jax.grad``, ``jax.jit``,
``jax.jvp`` and ``jax.vmap``, and gets what JAX computes in process."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from served_components import forward
from tesseract_peers import peer_runtime

from gradpipe.serve import RemoteError, TesseractRemote, connect

X = jnp.linspace(-1.0, 1.0, 6, dtype=jnp.float32)
W = jnp.float32(1.5)
A = jnp.full(6, 0.3, jnp.float32)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return tmp_path_factory.mktemp("tesseract-runtime")


@pytest.fixture(scope="module")
def url(files):
    with peer_runtime(files) as runtime_url:
        yield runtime_url


@pytest.fixture(scope="module")
def remote(url):
    remote = connect(url)
    yield remote
    remote.close()


def remote_loss(remote):
    def loss(x, w, a):
        out = remote({"x": x, "w": w, "p": {"a": a}, "n": 2})
        return jnp.sum(out["y"] ** 2) + out["s"]

    return loss


def local_loss(x, w, a):
    out = forward({"x": x, "w": w, "p": {"a": a}, "n": 2})
    return jnp.sum(out["y"] ** 2) + out["s"]


def close(got, want):
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5, atol=1e-6)


def test_connect_detects_the_protocol(remote):
    assert isinstance(remote, TesseractRemote)
    assert remote.info["differentiable_inputs"] == ["p.a", "w", "x"]


def test_grad_equals_in_process(remote):
    got = jax.grad(remote_loss(remote), argnums=(0, 1, 2))(X, W, A)
    want = jax.grad(local_loss, argnums=(0, 1, 2))(X, W, A)
    for g, w in zip(got, want):
        close(g, w)


def test_jit_value_and_grad_is_one_apply_and_one_vjp(remote):
    step = jax.jit(jax.value_and_grad(remote_loss(remote)))
    step(X, W, A)  # compiles; asks /abstract_eval once
    before = remote.client.requests
    value, grad = step(X + 1, W, A)
    assert remote.client.requests - before == 2
    want_value, want_grad = jax.value_and_grad(local_loss)(X + 1, W, A)
    close(value, want_value)
    close(grad, want_grad)


def test_jvp_equals_in_process(remote):
    f = lambda x: remote({"x": x, "w": W, "p": {"a": A}, "n": 2})["y"]
    f_local = lambda x: forward({"x": x, "w": W, "p": {"a": A}, "n": 2})["y"]
    primal, tangent = jax.jvp(f, (X,), (jnp.ones(6, jnp.float32),))
    want_primal, want_tangent = jax.jvp(f_local, (X,), (jnp.ones(6, jnp.float32),))
    close(primal, want_primal)
    close(tangent, want_tangent)


def test_vmap_of_the_function_and_of_its_gradient(remote):
    xs = jnp.stack([X, 2 * X, 3 * X])
    f = lambda x: remote({"x": x, "w": W, "p": {"a": A}, "n": 1})["y"]
    f_local = lambda x: forward({"x": x, "w": W, "p": {"a": A}, "n": 1})["y"]
    close(jax.vmap(f)(xs), jax.vmap(f_local)(xs))
    grad = jax.vmap(jax.grad(lambda x: jnp.sum(f(x) ** 2)))
    close(grad(xs), jax.vmap(jax.grad(lambda x: jnp.sum(f_local(x) ** 2)))(xs))


@pytest.mark.parametrize("jacobian", [jax.jacrev, jax.jacfwd])
def test_a_full_jacobian_is_one_jacobian_request(remote, jacobian):
    f = lambda x: remote({"x": x, "w": W, "p": {"a": A}, "n": 3})["y"]
    f_local = lambda x: forward({"x": x, "w": W, "p": {"a": A}, "n": 3})["y"]
    jax.eval_shape(f, X)  # asks /abstract_eval
    before = remote.client.requests
    close(jacobian(f)(X), jacobian(f_local)(X))
    assert remote.client.requests - before == 2  # /apply, then /jacobian instead of 6 products


def test_without_the_jacobian_each_product_is_a_request(url):
    remote = TesseractRemote(url, jacobian="never")
    f = lambda x: remote({"x": x, "w": W, "p": {"a": A}, "n": 3})["y"]
    f_local = lambda x: forward({"x": x, "w": W, "p": {"a": A}, "n": 3})["y"]
    jax.eval_shape(f, X)
    before = remote.client.requests
    close(jax.jacrev(f)(X), jax.jacrev(f_local)(X))
    assert remote.client.requests - before == 1 + 6
    remote.close()


def test_file_references_give_the_same_gradient(url, files):
    remote = TesseractRemote(url, files=files)
    got = jax.grad(remote_loss(remote), argnums=(0, 1, 2))(X, W, A)
    want = jax.grad(local_loss, argnums=(0, 1, 2))(X, W, A)
    for g, w in zip(got, want):
        close(g, w)
    remote.close()


def test_bad_input_is_a_remote_error_naming_the_field(remote):
    with pytest.raises(RemoteError) as info:
        remote.apply({"x": np.ones(3, np.float32), "w": "a", "p": {"a": np.ones(3, np.float32)}})
    assert info.value.status == 422 and info.value.path == "inputs.w"
