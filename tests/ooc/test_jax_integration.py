"""DiskArrays under jax.jit and jax.grad: typed values, summed cotangents, refusals."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.ad_checkpoint import checkpoint_name
from jax.experimental import io_callback
from rounding import assert_within, gamma, product_reference

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
    # to rounding: each BLAS (and thread count, and CPU kernel) sums in its own
    # order, and a relative tolerance alone bounds nothing for an entry near 0
    want, bound = product_reference(A, A.T)
    assert_within(c.to_numpy(), want, bound, "a @ a.T")
    # 91 terms summed in two orders (tiles here, NumPy's pairwise there)
    assert_within(s, A.sum(), 2 * gamma(A.size) * np.abs(A).sum(dtype=np.float64), "sum")


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
    t = np.tanh(A)  # the same terms: the same NumPy kernel
    assert_within(v, t.sum(), 2 * gamma(t.size) * np.abs(t).sum(dtype=np.float64), "sum")
    np.testing.assert_allclose(g.to_numpy(), 1 - np.tanh(A) ** 2, rtol=1e-5)


def test_equal_shape_and_dtype_share_one_compilation(A):
    traces = []

    @jax.jit
    def f(a):
        traces.append(a.shape)
        return ooc.sum(a @ a.T)

    a, b = disk(A), disk(2 * A)
    # each entry of the product within its bound, then 169 entries summed
    for x, got in ((A, f(a)), (2 * A, f(b))):
        want, bound = product_reference(x, x.T)
        n, size = want.size, np.sum(np.abs(want) + bound)
        bound = np.sum(bound) + (gamma(n) + gamma(n, np.float64)) * size
        assert_within(got, np.sum(want), bound, "sum of a @ a.T")
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
    assert touching == ["arrays/_hijax.py"]


# ---------------------------------------------------------------- JAX's own functions

MODES = {
    "eager": lambda f, argnums: f,
    "jit": lambda f, argnums: jax.jit(f),
    "grad": lambda f, argnums: jax.grad(f, argnums=argnums),
    "jit(grad)": lambda f, argnums: jax.jit(jax.grad(f, argnums=argnums)),
}


def _as_numpy(out):
    return out.to_numpy() if isinstance(out, ooc.DiskArray) else np.asarray(out)


IDENTITIES = {
    "stop_gradient": jax.lax.stop_gradient,
    "optimization_barrier": jax.lax.optimization_barrier,
    "optimization_barrier beside a JAX value": lambda x: jax.lax.optimization_barrier(
        (x, jnp.float32(2.0))
    )[0],
    "checkpoint_name": lambda x: checkpoint_name(x, "h"),
}


@pytest.mark.parametrize("identity", list(IDENTITIES))
def test_identities_of_jax_keep_the_value_and_gradient_of_jax_numpy(A, identity):
    """stop_gradient's gradient is zero, the others' the identity's (as in memory)."""
    f = IDENTITIES[identity]

    def loss(x):
        return (f(x * 1.5) * x).sum()

    for mode, wrap in MODES.items():
        run = wrap(loss, 0)
        np.testing.assert_allclose(
            _as_numpy(run(disk(A))), np.asarray(run(jnp.asarray(A))), rtol=1e-5, err_msg=mode
        )
    assert isinstance(f(disk(A)), ooc.DiskArray)
    assert isinstance(jax.jit(f)(disk(A)), ooc.DiskArray)


@pytest.mark.parametrize("mode", list(MODES))
def test_callbacks_receive_the_disk_array_itself(A, mode):
    """jax.debug.callback, jax.pure_callback and io_callback get a concrete DiskArray
    (an argument, or one made inside the traced function); in memory, a NumPy array."""
    seen = []
    total = jax.ShapeDtypeStruct((), np.float32)

    def program(x, s):
        jax.debug.callback(lambda a, b: seen.append((a, np.asarray(b))), x, x * 3.0)
        t = jax.pure_callback(lambda a: np.asarray(a).sum(dtype=np.float32), total, x)
        doubled = io_callback(
            lambda a: np.asarray(a) * 2, jax.ShapeDtypeStruct(x.shape, x.dtype), x
        )
        return s * t + (doubled * s).sum()

    run = MODES[mode](program, 1)
    out, want = run(disk(A), 2.0), run(jnp.asarray(A), 2.0)
    np.testing.assert_allclose(np.asarray(out), np.asarray(want), rtol=1e-5)
    assert len(seen) == 2  # the DiskArray run, then the in-memory one
    (x, tripled), (a, _) = seen
    assert isinstance(x, ooc.DiskArray) and not isinstance(a, ooc.DiskArray)
    np.testing.assert_array_equal(x.to_numpy(), A)
    np.testing.assert_allclose(tripled, A * 3.0, rtol=1e-6)


@pytest.mark.parametrize("mode", list(MODES))
def test_debug_print_shows_a_disk_array_as_print_does(A, mode, capsys):
    X = disk(A)

    def program(x, s):
        jax.debug.print("x={} s={s}", x, s=s)
        return (x * s).sum()

    MODES[mode](program, 1)(X, 2.0)
    assert capsys.readouterr().out == f"x={X!r} s=2.0\n"


@pytest.mark.parametrize("jit", [False, True])
def test_divmod_gives_floor_division_and_remainder_with_jax_numpy_gradients(A, jit):
    A = A * 4.0
    wrap = jax.jit if jit else (lambda f: f)
    quotients = {
        "divmod(x, s)": lambda x, s: divmod(x, s),
        "divmod(s, x)": lambda x, s: divmod(s, x),
        "divmod(x, 2.5)": lambda x, s: divmod(x, 2.5),
        "divmod(2.5, x)": lambda x, s: divmod(2.5, x),
        "divmod(np.float32(2.5), x)": lambda x, s: divmod(np.float32(2.5), x),
        "divmod(x, jnp.float32(2.5))": lambda x, s: divmod(x, jnp.float32(2.5)),
    }
    for case, f in quotients.items():
        q, r = wrap(f)(disk(A), jnp.float32(2.5))
        qa, ra = f(jnp.asarray(A), jnp.float32(2.5))
        assert isinstance(q, ooc.DiskArray) and isinstance(r, ooc.DiskArray), case
        np.testing.assert_allclose(q.to_numpy(), qa, rtol=1e-6, err_msg=case)
        np.testing.assert_allclose(r.to_numpy(), ra, rtol=1e-5, atol=1e-5, err_msg=case)

        def loss(x, s, f=f):
            q, r = f(x, s)
            return (q * x + r * r).sum()

        grad = wrap(jax.grad(loss, argnums=(0, 1)))
        (gx, gs), (gxa, gsa) = grad(disk(A), jnp.float32(2.5)), grad(jnp.asarray(A), 2.5)
        np.testing.assert_allclose(gx.to_numpy(), gxa, rtol=1e-5, atol=1e-5, err_msg=case)
        np.testing.assert_allclose(gs, gsa, rtol=1e-4, err_msg=case)


def test_block_until_ready_returns_the_array(A):
    X = disk(A)
    assert X.block_until_ready() is X
    assert jax.block_until_ready({"x": X})["x"] is X
