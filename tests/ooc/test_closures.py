"""Closed-over DiskArrays under jit and grad: temporaries live as long as the program."""

import gc
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gradpipe import ooc


@pytest.fixture
def A(rng):
    return rng.standard_normal((9, 4)).astype(np.float32)


def _loss_ref(a, w):
    return jnp.sum((a - 1.0) @ w)


@pytest.mark.parametrize("transform", ["eager", "jit"])
def test_loss_deriving_an_array_from_a_closed_over_disk_array(A, transform):
    """The docs' own style: data closed over, ``ooc.sum((X - 1.0) @ w)``."""
    X = ooc.DiskArray.from_numpy(A)
    W = np.linspace(-1, 1, 8, dtype=np.float32).reshape(4, 2)
    w = ooc.DiskArray.from_numpy(W)

    def loss(w):
        return ooc.sum((X - 1.0) @ w)

    wrap = jax.jit if transform == "jit" else (lambda f: f)
    want_v, want_g = jax.value_and_grad(_loss_ref, argnums=1)(A, W)
    for _ in range(3):  # the first call and later ones
        np.testing.assert_allclose(float(wrap(loss)(w)), want_v, rtol=1e-5)
        g = wrap(jax.grad(loss))(w)
        np.testing.assert_allclose(g.to_numpy(), want_g, rtol=1e-5)
        v, g = wrap(jax.value_and_grad(loss))(w)
        np.testing.assert_allclose(float(v), want_v, rtol=1e-5)
        np.testing.assert_allclose(g.to_numpy(), want_g, rtol=1e-5)


def test_several_temporaries_and_in_memory_parameters(A):
    X = ooc.DiskArray.from_numpy(A)
    f = jax.jit(jax.value_and_grad(lambda s: ooc.sum(ooc.square((X - 1.0) * s + 2.0) * (X * s))))
    ref = jax.value_and_grad(lambda s: jnp.sum(jnp.square((A - 1.0) * s + 2.0) * (A * s)))
    for s in (0.5, 1.5, -2.0):
        v, g = f(s)
        want_v, want_g = ref(s)
        np.testing.assert_allclose(float(v), want_v, rtol=1e-4)
        np.testing.assert_allclose(float(g), want_g, rtol=1e-4)


def test_compiled_program_sees_updates_of_the_closed_over_array(A, tmp_path):
    """An operation on closed-over data runs when the program runs, not once at trace time."""
    ooc.DiskArray.from_numpy(A, path=tmp_path / "x.gpa")
    X = ooc.DiskArray.open(tmp_path / "x.gpa", writable=True)
    f = jax.jit(lambda s: ooc.sum((X - 1.0) * s))
    np.testing.assert_allclose(float(f(1.0)), np.sum(A - 1.0), rtol=1e-5)
    X.update_(3.0)
    np.testing.assert_allclose(float(f(1.0)), 2.0 * A.size, rtol=1e-5)


def test_compiled_program_keeps_closed_over_data_alive(A):
    def make():
        X = ooc.DiskArray.from_numpy(A)
        f = jax.jit(lambda s: ooc.sum((X - 1.0) * s))
        return f, float(f(2.0))

    f, want = make()  # nothing but the compiled program refers to X now
    gc.collect()
    np.testing.assert_allclose(float(f(2.0)), want, rtol=1e-6)


def test_results_outlive_the_jitted_function(A):
    X = ooc.DiskArray.from_numpy(A)
    f = jax.jit(lambda s: (X * s, X - s, ooc.sum(X)))
    a, b, _ = f(2.0)
    del f
    gc.collect()
    jax.clear_caches()
    gc.collect()
    np.testing.assert_allclose(a.to_numpy(), A * 2.0)
    np.testing.assert_allclose(b.to_numpy(), A - 2.0)
    g = jax.jit(lambda: X + 1.0)  # no argument at all
    np.testing.assert_allclose(g().to_numpy(), A + 1.0)
    np.testing.assert_allclose(g().to_numpy(), A + 1.0)


def test_repeated_calls_without_disk_array_arguments_do_not_pile_up_files(A):
    X = ooc.DiskArray.from_numpy(A)
    f = jax.jit(lambda s: ooc.sum(((X - 1.0) * s + 2.0) * s))
    scratch = ooc.get_scratch_dir()
    # an earlier test's files still held by reference cycles would otherwise go
    # whenever the cyclic collector runs, maybe between two counts
    gc.collect()
    counts = []
    for _ in range(6):
        f(1.0)
        counts.append(len(os.listdir(scratch)))
    assert counts[-1] == counts[1], counts


@pytest.mark.parametrize("loop", ["scan", "fori_loop"])
def test_disk_array_carried_through_an_eager_loop(A, loop):
    X = ooc.DiskArray.from_numpy(A)
    if loop == "scan":
        out = jax.lax.scan(lambda c, _: (c * 2.0 + X, None), X, None, length=3)[0]
    else:
        out = jax.lax.fori_loop(0, 3, lambda i, c: c * 2.0 + X, X)
    np.testing.assert_allclose(out.to_numpy(), A * 15.0, rtol=1e-5)


def test_nested_jit_over_closed_over_data(A):
    X = ooc.DiskArray.from_numpy(A)
    inner = jax.jit(lambda s: (X - 1.0) * s)
    f = jax.jit(lambda s: ooc.sum(inner(s)) + ooc.sum(inner(s) * X))
    for _ in range(2):
        want = np.sum((A - 1.0) * 2.0) + np.sum((A - 1.0) * 2.0 * A)
        np.testing.assert_allclose(float(f(2.0)), want, rtol=1e-4)
