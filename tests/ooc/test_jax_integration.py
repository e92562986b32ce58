"""DiskArrays under jax.jit and jax.grad: typed values, summed cotangents, refusals."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gradpipe import ooc


def disk(x):
    return ooc.DiskArray.from_numpy(np.asarray(x, np.float32))


@pytest.fixture
def A(rng):
    return rng.standard_normal((13, 7)).astype(np.float32)


def test_jit_returns_disk_arrays_and_scalars(A):
    f = jax.jit(lambda a: (a @ a.T, ooc.sum(a)))
    c, s = f(disk(A))
    assert isinstance(c, ooc.DiskArray) and c.shape == (13, 13)
    np.testing.assert_allclose(c.to_numpy(), A @ A.T, rtol=1e-5)
    np.testing.assert_allclose(float(s), A.sum(), rtol=1e-5)


def test_grad_returns_disk_arrays_eager_and_jitted(A, rng):
    W = rng.standard_normal((7, 3)).astype(np.float32)
    f = lambda a, w: ooc.mean(ooc.square(a @ w - 1.0))
    ref = jax.grad(lambda a, w: jnp.mean((a @ w - 1.0) ** 2), argnums=(0, 1))(A, W)
    for g in (jax.grad(f, argnums=(0, 1)), jax.jit(jax.grad(f, argnums=(0, 1)))):
        ga, gw = g(disk(A), disk(W))
        assert isinstance(ga, ooc.DiskArray) and isinstance(gw, ooc.DiskArray)
        np.testing.assert_allclose(ga.to_numpy(), ref[0], rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(gw.to_numpy(), ref[1], rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("jit", [False, True])
def test_one_array_used_twice_gets_its_cotangents_summed(A, jit):
    """The case a float-marker custom_vjp gets wrong: a appears in several places."""

    def f(a):
        return ooc.sum(a @ a.T) + ooc.sum(a * a) + ooc.sum(ooc.transpose(a)) * 2.0

    def ref(a):
        return jnp.sum(a @ a.T) + jnp.sum(a * a) + jnp.sum(a.T) * 2.0

    g = (jax.jit(jax.grad(f)) if jit else jax.grad(f))(disk(A))
    np.testing.assert_allclose(g.to_numpy(), jax.grad(ref)(A), rtol=1e-4, atol=1e-5)


def test_value_and_grad_under_jit(A):
    v, g = jax.jit(jax.value_and_grad(lambda a: ooc.sum(ooc.tanh(a))))(disk(A))
    np.testing.assert_allclose(float(v), np.tanh(A).sum(), rtol=1e-5)
    np.testing.assert_allclose(g.to_numpy(), 1 - np.tanh(A) ** 2, rtol=1e-5)


def test_equal_shape_and_dtype_share_one_compilation(A):
    traces = []

    @jax.jit
    def f(a):
        traces.append(a.shape)
        return ooc.sum(a @ a.T)

    a, b = disk(A), disk(2 * A)
    np.testing.assert_allclose(float(f(a)), np.sum(A @ A.T), rtol=1e-5)
    np.testing.assert_allclose(float(f(b)), np.sum(4 * A @ A.T), rtol=1e-5)
    assert traces == [(13, 7)]
    f(disk(A[:5]))
    assert traces == [(13, 7), (5, 7)]


def test_traced_operators_and_methods(A):
    out = jax.jit(lambda a: (-(a * 2.0) + 1.0) / 2.0 - a[2:5].sum() + a.T.max())(disk(A))
    want = (-(A * 2.0) + 1.0) / 2.0 - A[2:5].sum() + A.T.max()
    np.testing.assert_allclose(out.to_numpy(), want, rtol=1e-5)


def test_vmap_is_refused_clearly(A):
    a = disk(A)
    with pytest.raises(TypeError, match=r"does not support jax\.vmap"):
        jax.vmap(lambda s: ooc.sum(a * s))(jnp.arange(3.0))
    with pytest.raises(TypeError, match=r"does not support jax\.vmap"):
        jax.vmap(lambda x: ooc.sum(x))(a)


def test_second_order_is_refused_clearly(A):
    a = disk(A)
    with pytest.raises(TypeError, match="second-order"):
        jax.grad(lambda s: jax.grad(lambda s: ooc.sum(a * s * s))(s))(1.0)
    w = disk(np.ones((7, 1)))
    inner = lambda w: ooc.sum(ooc.square(a @ w))
    with pytest.raises(TypeError, match="second-order"):
        jax.grad(lambda w: ooc.sum(jax.grad(inner)(w)))(w)


def test_forward_mode_is_refused_clearly(A):
    with pytest.raises(TypeError, match="reverse mode"):
        jax.jvp(lambda s: ooc.sum(disk(A) * s), (1.0,), (1.0,))


def test_traced_disk_array_cannot_be_read(A):
    with pytest.raises(TypeError, match="being traced"):
        jax.jit(lambda a: a.to_numpy())(disk(A))


def test_update_in_place_eager_and_jitted(A):
    w = disk(np.zeros((13, 7)))
    out = w.update_(disk(A))
    assert out.path == w.path
    np.testing.assert_array_equal(w.to_numpy(), A)
    w2 = jax.jit(lambda w: ooc.update_(w, w * 2.0))(w)
    assert w2.path == w.path
    np.testing.assert_allclose(w.to_numpy(), 2 * A)
    with pytest.raises(ValueError, match="shape"):
        ooc.update_(w, disk(A[:3]))


def test_update_of_a_read_only_file_is_refused(A, tmp_path):
    disk(A).save(tmp_path / "a.gpa")
    ro = ooc.DiskArray.open(tmp_path / "a.gpa")
    with pytest.raises(TypeError, match="read-only"):
        ro.update_(0.0)
    rw = ooc.DiskArray.open(tmp_path / "a.gpa", writable=True)
    rw.update_(1.0)
    np.testing.assert_array_equal(
        ooc.DiskArray.open(tmp_path / "a.gpa").to_numpy(), np.ones_like(A)
    )


def test_every_hijax_touch_is_in_the_compatibility_module():
    import pathlib

    import gradpipe.ooc

    root = pathlib.Path(gradpipe.ooc.__file__).parent
    touching = sorted(
        str(p.relative_to(root))
        for p in root.rglob("*.py")
        if "jax.experimental import hijax" in p.read_text() or "_src.hijax" in p.read_text()
    )
    assert touching == ["_hijax.py"]
