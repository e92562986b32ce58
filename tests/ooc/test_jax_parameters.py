"""JAX-array parameters on out-of-core data: the programs JAX users write.

Parameters are ordinary JAX arrays (what optax and equinox hold); only the data
is a DiskArray. Each journey runs the same program on ``jax.numpy`` arrays in
memory and compares values and gradients, eagerly and under ``jax.jit``, with x64
off (JAX's default) and on. Parameters are resident operands: held in memory,
passed to every tile, their gradients summed over tiles in memory and returned
as JAX arrays of their own shape and dtype; nothing is written for them.
"""

from __future__ import annotations

import warnings

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from gradpipe import ooc

N, K, H = 300, 12, 7
BUDGET = 16 * 2**10  # several tiles per pass at these sizes


@pytest.fixture(params=["x64-off", "x64-on"])
def x64(request):
    with jax.enable_x64(request.param == "x64-on"), warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # the once-per-process rounding note
        yield request.param == "x64-on"


@pytest.fixture(params=["eager", "jit"])
def jit(request):
    return (lambda f: jax.jit(f)) if request.param == "jit" else (lambda f: f)


def _data(seed=0, dtype=np.float32):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((N, K)).astype(dtype)
    w_true = rng.standard_normal(K).astype(dtype)
    y = (X @ w_true + 0.5 + 0.1 * rng.standard_normal(N)).astype(dtype)
    return X, y


def _close(got, want, rtol=2e-5, atol=1e-6):
    got_leaves, want_leaves = jax.tree.leaves(got), jax.tree.leaves(want)
    assert len(got_leaves) == len(want_leaves)
    for g, w in zip(got_leaves, want_leaves):
        assert isinstance(g, jax.Array), type(g)
        assert (g.shape, g.dtype) == (w.shape, w.dtype)
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=rtol, atol=atol)


def _least_squares(xp, X, y):
    return lambda w, b: xp.mean(xp.square(X @ w + b - y))


def test_least_squares_gradient_matches_jax_numpy(x64, jit):
    X, y = _data()
    w, b = jnp.linspace(-1.0, 1.0, K, dtype=jnp.float32), jnp.float32(0.25)
    with ooc.MemoryBudget(BUDGET):
        Xd, yd = ooc.DiskArray.from_numpy(X), ooc.DiskArray.from_numpy(y)
        got = jit(jax.value_and_grad(_least_squares(ooc, Xd, yd), argnums=(0, 1)))(w, b)
    want = jax.value_and_grad(_least_squares(jnp, X, y), argnums=(0, 1))(w, b)
    _close(got, want)


def test_numpy_parameters_are_computed_at_once_outside_a_trace(x64, monkeypatch):
    """Parameters handed to an eager ``jax.value_and_grad`` as NumPy arrays (initial
    weights drawn with NumPy, read from a file) give what JAX arrays give, and each
    operation runs at once on its values: none is staged into a callback program
    compiled anew at every call (which made such a step 7x slower on the CPU, 23x
    on a TPU)."""
    from gradpipe.ooc.arrays import _host

    def staged(*args, **kwargs):
        raise AssertionError("an eager operation on NumPy parameters was staged")

    X, y = _data()
    w, b = np.linspace(-1.0, 1.0, K).astype(np.float32), np.float32(0.25)
    with ooc.MemoryBudget(BUDGET):
        Xd, yd = ooc.DiskArray.from_numpy(X), ooc.DiskArray.from_numpy(y)
        monkeypatch.setattr(_host, "io_callback", staged)
        got = jax.value_and_grad(_least_squares(ooc, Xd, yd), argnums=(0, 1))(w, b)
    want = jax.value_and_grad(_least_squares(jnp, X, y), argnums=(0, 1))(w, b)
    _close(got, want)


def test_numpy_parameters_changed_in_place_after_vjp_are_not_seen():
    """``jax.vjp`` of a function of NumPy parameters returns a DiskArray computed on
    read and a backward function: changing the parameters in place afterwards (an
    optimizer's ``w -= lr * g``) changes neither, as with JAX's own arrays."""
    X, _ = _data()
    ct = np.random.default_rng(3).standard_normal(N).astype(np.float32)
    w = np.linspace(-1.0, 1.0, K).astype(np.float32)
    want, want_vjp = jax.vjp(lambda w: jnp.tanh(X @ w), jnp.asarray(w))
    (want_grad,) = want_vjp(jnp.asarray(ct))
    with ooc.MemoryBudget(BUDGET):
        Xd, ctd = ooc.DiskArray.from_numpy(X), ooc.DiskArray.from_numpy(ct)
        value, vjp = jax.vjp(lambda w: ooc.tanh(Xd @ w), w)
        w *= 3.0
        (grad,) = vjp(ctd)
        np.testing.assert_allclose(value.to_numpy(), np.asarray(want), rtol=2e-5, atol=1e-6)
    _close(grad, want_grad)


def test_parameter_gradients_write_nothing_to_disk():
    """The gradient of a few-KiB parameter over disk data is summed in memory: the
    pass writes only the product ``X @ w`` (N values), never a gradient file, and
    reads X twice (the forward, and one pass for the gradient)."""
    X, y = _data()
    w, b = jnp.ones(K, jnp.float32), jnp.float32(0.0)
    with ooc.MemoryBudget(BUDGET):
        Xd, yd = ooc.DiskArray.from_numpy(X), ooc.DiskArray.from_numpy(y)
        step = jax.jit(jax.grad(_least_squares(ooc, Xd, yd), argnums=(0, 1)))
        step(w, b)  # compiled
        before = ooc.io_stats()
        step(w, b)
        io = ooc.io_stats() - before
    assert io.bytes_written <= N * 4, io  # the product X @ w; no gradient
    assert io.bytes_read <= 2 * X.nbytes + 8 * N * 4, io  # X twice; y and X @ w a few times


def test_jit_compiles_once_whatever_the_parameter_values():
    X, y = _data()
    traces = []

    def loss(w, b):
        traces.append(1)
        return _least_squares(ooc, Xd, yd)(w, b)

    with ooc.MemoryBudget(BUDGET):
        Xd, yd = ooc.DiskArray.from_numpy(X), ooc.DiskArray.from_numpy(y)
        grad = jax.jit(jax.grad(loss, argnums=(0, 1)))
        for seed in range(3):
            w = jax.random.normal(jax.random.key(seed), (K,))
            got = grad(w, jnp.float32(seed))
            want = jax.grad(_least_squares(jnp, X, y), argnums=(0, 1))(w, jnp.float32(seed))
            _close(got, want)
    assert len(traces) == 1


def test_optax_adam_converges_as_in_memory(x64):
    X, y = _data(1)
    params = {"w": jnp.zeros(K, jnp.float32), "b": jnp.zeros((), jnp.float32)}
    opt = optax.adam(0.05)

    def make_step(loss):
        @jax.jit
        def step(params, state):
            value, grads = jax.value_and_grad(lambda p: loss(p["w"], p["b"]))(params)
            updates, state = opt.update(grads, state, params)
            return optax.apply_updates(params, updates), state, value

        return step

    def train(loss):
        p, state, curve = params, opt.init(params), []
        step = make_step(loss)
        for _ in range(60):
            p, state, value = step(p, state)
            curve.append(float(value))
        return p, curve

    with ooc.MemoryBudget(BUDGET):
        Xd, yd = ooc.DiskArray.from_numpy(X), ooc.DiskArray.from_numpy(y)
        got, got_curve = train(_least_squares(ooc, Xd, yd))
    want, want_curve = train(_least_squares(jnp, X, y))
    assert got_curve[-1] < 0.2 * got_curve[0]
    np.testing.assert_allclose(got_curve, want_curve, rtol=1e-3)
    _close(got, want, rtol=1e-3, atol=1e-4)


def _logistic(xp, X, labels):
    def loss(s, b):
        z = xp.sum(X * s, axis=1) + b
        return xp.mean(xp.log1p(xp.exp(-z)) + (1 - labels) * z)

    return loss


def test_logistic_regression_with_feature_scales(x64, jit):
    X, y = _data(2)
    labels = (y > np.median(y)).astype(np.float32)
    s, b = jnp.full(K, 0.3, jnp.float32), jnp.float32(-0.1)
    with ooc.MemoryBudget(BUDGET):
        Xd, ld = ooc.DiskArray.from_numpy(X), ooc.DiskArray.from_numpy(labels)
        got = jit(jax.value_and_grad(_logistic(ooc, Xd, ld), argnums=(0, 1)))(s, b)
    want = jax.value_and_grad(_logistic(jnp, X, labels), argnums=(0, 1))(s, b)
    _close(got, want)


class TwoLayer(eqx.Module):
    first: eqx.nn.Linear
    second: eqx.nn.Linear

    def __init__(self, key):
        k1, k2 = jax.random.split(key)
        self.first = eqx.nn.Linear(K, H, key=k1)
        self.second = eqx.nn.Linear(H, 1, key=k2)

    def __call__(self, rows, xp):
        """The network on a batch of rows (an (n, K) array of any kind)."""
        hidden = xp.tanh(rows @ self.first.weight.T + self.first.bias)
        return (hidden @ self.second.weight.T + self.second.bias)[:, 0]


def _network_loss(model, X, y):
    xp = jnp if isinstance(X, np.ndarray) else ooc
    return xp.mean(xp.square(model(X, xp) - y))


def test_equinox_two_layer_network_on_disk_rows(x64):
    """eqx.filter_grad differentiates the model's JAX arrays only (the data, passed
    after it, is not differentiated)."""
    X, y = _data(3)
    model = TwoLayer(jax.random.key(0))
    with ooc.MemoryBudget(BUDGET):
        Xd, yd = ooc.DiskArray.from_numpy(X), ooc.DiskArray.from_numpy(y)
        got = eqx.filter_jit(eqx.filter_value_and_grad(_network_loss))(model, Xd, yd)
        eager = eqx.filter_grad(_network_loss)(model, Xd, yd)
    want = eqx.filter_value_and_grad(_network_loss)(model, X, y)
    _close(got, want, rtol=1e-4, atol=1e-6)
    _close(eager, want[1], rtol=1e-4, atol=1e-6)


def test_float64_data_with_x64_off():
    """NumPy's default dtype on disk, JAX's default configuration: the 0-d results
    are float32 JAX values (as jnp.asarray makes them), warned about once; the
    gradient of a float32 parameter is float32."""
    X, y = _data(4, np.float64)
    w = jnp.full(K, 0.1, jnp.float32)
    with jax.enable_x64(False), warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        with ooc.MemoryBudget(BUDGET):
            Xd, yd = ooc.DiskArray.from_numpy(X), ooc.DiskArray.from_numpy(y)
            total, mean = ooc.sum(Xd), ooc.mean(Xd)
            value, grad = jax.jit(jax.value_and_grad(lambda w: ooc.mean(ooc.square(Xd @ w - yd))))(
                w
            )
    assert total.dtype == mean.dtype == value.dtype == jnp.float32
    np.testing.assert_allclose(float(total), X.sum(), rtol=1e-6)
    np.testing.assert_allclose(float(mean), X.mean(), rtol=1e-6)
    r = X @ np.asarray(w, np.float64) - y
    assert grad.dtype == jnp.float32 and grad.shape == (K,)
    np.testing.assert_allclose(float(value), np.mean(r * r), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(grad), 2 * X.T @ r / N, rtol=1e-5, atol=1e-6)


def _fan_out(xp, X, y):
    def loss(w, b):
        pred = X @ w + b
        out = xp.mean(xp.square(pred - y)) + xp.mean(X * w) * b  # w and b used twice
        return out + jnp.sum(w * w) + jnp.sin(b)  # and in memory outside ooc

    return loss


def test_parameters_used_twice_and_in_memory(x64, jit):
    X, y = _data(5)
    w, b = jnp.linspace(0.5, -0.5, K, dtype=jnp.float32), jnp.float32(0.7)
    with ooc.MemoryBudget(BUDGET):
        Xd, yd = ooc.DiskArray.from_numpy(X), ooc.DiskArray.from_numpy(y)
        got = jit(jax.value_and_grad(_fan_out(ooc, Xd, yd), argnums=(0, 1)))(w, b)
    want = jax.value_and_grad(_fan_out(jnp, X, y), argnums=(0, 1))(w, b)
    _close(got, want)


def test_pytree_of_disk_and_jax_leaves_with_aux(jit):
    """A pytree holding the data (DiskArray) and parameters (JAX) differentiates in
    every leaf; has_aux returns the auxiliary value untouched."""
    X, y = _data(6)
    w = jnp.full(K, 0.2, jnp.float32)

    def loss(xp, tree):
        r = tree["X"] @ tree["w"] - tree["y"]
        return xp.mean(r * r), {"max": xp.max(r)}

    with ooc.MemoryBudget(BUDGET):
        tree = {"X": ooc.DiskArray.from_numpy(X), "w": w, "y": ooc.DiskArray.from_numpy(y)}
        (value, aux), grads = jit(jax.value_and_grad(lambda t: loss(ooc, t), has_aux=True))(tree)
        got_X, got_y = grads["X"].to_numpy(), grads["y"].to_numpy()
    mem = {"X": X, "w": w, "y": y}
    (want_value, want_aux), want = jax.value_and_grad(lambda t: loss(jnp, t), has_aux=True)(mem)
    _close((value, aux, grads["w"]), (want_value, want_aux, want["w"]))
    np.testing.assert_allclose(got_X, want["X"], rtol=2e-5, atol=1e-7)
    np.testing.assert_allclose(got_y, want["y"], rtol=2e-5, atol=1e-7)


@pytest.mark.parametrize(
    "program",
    [
        lambda xp, X, p: xp.where(X > 0, X * p, p),  # where, broadcast (K,)
        lambda xp, X, p: xp.concat([X, X * p], axis=0),  # concatenation
        lambda xp, X, p: xp.stack([X, X + p]),
        lambda xp, X, p: xp.tensordot(X, p, axes=1)[:, None] * X,
        lambda xp, X, p: xp.vecdot(X, p)[:, None] + X,
        lambda xp, X, p: p[None, :] @ X.T,  # the parameter on the left of a product
        lambda xp, X, p: xp.maximum(X, p) - xp.minimum(p, X),
    ],
    ids=["where", "concat", "stack", "tensordot", "vecdot", "matmul-left", "max-min"],
)
def test_parameter_in_namespace_functions(program, jit):
    X, _ = _data(7)
    p = jnp.linspace(-0.3, 0.9, K, dtype=jnp.float32)

    def loss(xp, X):
        return lambda p: xp.sum(xp.tanh(program(xp, X, p)))

    with jax.enable_x64(True), ooc.MemoryBudget(BUDGET):
        got = jit(jax.value_and_grad(loss(ooc, ooc.DiskArray.from_numpy(X))))(p)
        want = jax.value_and_grad(loss(jnp, X))(p)
    _close(got, want, rtol=1e-4, atol=1e-4)


def test_a_parameter_above_the_budget_is_refused_with_its_size():
    X, _ = _data()
    big = jnp.ones((64, 64, K), jnp.float32)  # 192 KiB against a 16 KiB budget
    with ooc.MemoryBudget(BUDGET):
        Xd = ooc.DiskArray.from_numpy(X)
        refusal = r"\(64, 64, 12\) take 192\.0 KiB.*50% of the memory budget \(16\.0 KiB\)"
        with pytest.raises(ValueError, match=refusal + ".*update_"):
            jax.jit(lambda X, p: ooc.sum(X[:64, None, :] * p))(Xd, big)


def test_vmap_over_disk_rows_is_refused_naming_the_alternative():
    X, _ = _data()
    w = jnp.ones(K, jnp.float32)
    with ooc.MemoryBudget(BUDGET):
        Xd = ooc.DiskArray.from_numpy(X)
        with pytest.raises(TypeError, match="vmap"):
            jax.vmap(lambda row: ooc.sum(row * w))(Xd)


@pytest.mark.parametrize(
    ("program", "axis"),
    [
        (lambda xp, X, i: xp.take(X, i, axis=0), 0),
        (lambda xp, X, i: X[i], 0),
        (lambda xp, X, i: X[:, i], 1),
        (lambda xp, X, i: xp.take_along_axis(X, jnp.broadcast_to(i[:, None], (6, K)), axis=0), 0),
    ],
    ids=["take", "getitem", "getitem-columns", "take_along_axis"],
)
def test_traced_index_arrays(program, axis, jit):
    """Indices computed in JAX (traced under jit) select rows or columns of disk data;
    one out of bounds raises, naming it."""
    X, _ = _data(8)
    i = jnp.asarray([5, 0, 11, 7, 5, 2], jnp.int32) * (1 if axis else 17)
    w = jnp.linspace(1.0, 2.0, K, dtype=jnp.float32)

    def loss(xp, X):
        return lambda i, w: xp.sum(xp.sin(program(xp, X, i)) * w[-1])

    with ooc.MemoryBudget(BUDGET):
        Xd = ooc.DiskArray.from_numpy(X)
        got = jit(jax.value_and_grad(loss(ooc, Xd), argnums=1))(i, w)
        with pytest.raises(IndexError, match="out of bounds"):  # (eagerly: under jit
            # the error comes in JAX's runtime error, whose log record keeps the files)
            loss(ooc, Xd)(i.at[0].set(X.shape[axis]), w)
    want = jax.value_and_grad(loss(jnp, X), argnums=1)(i, w)
    _close(got, want)


@pytest.mark.parametrize(
    "program",
    [
        lambda xp, X, w: xp.mean(X * w, axis=0) @ w,
        lambda xp, X, w: w @ xp.mean(X * w, axis=0),
        lambda xp, X, w: xp.vecdot(xp.mean(X * w, axis=0), w),
        lambda xp, X, w: xp.tensordot(xp.mean(X * w, axis=0), w, axes=1),
        lambda xp, X, w: xp.real(xp.vecdot(xp.mean(X * w, axis=0) * (1 + 2j), w * (1 - 1j))),
    ],
    ids=["matmul", "matmul-left", "vecdot", "tensordot", "complex-vecdot"],
)
def test_dot_of_disk_and_parameter_both_differentiated(program, jit):
    """A 0-d product of a DiskArray and an in-memory parameter, both depending on the
    parameter: one gradient is computed from no DiskArray at all."""
    X, _ = _data(9)
    w = jnp.linspace(-1.0, 1.0, K, dtype=jnp.float32)
    with jax.enable_x64(True), ooc.MemoryBudget(BUDGET):
        Xd = ooc.DiskArray.from_numpy(X)
        got = jit(jax.value_and_grad(lambda w: program(ooc, Xd, w)))(w)
        want = jax.value_and_grad(lambda w: program(jnp, X, w))(w)
    _close(got, want, rtol=1e-4, atol=1e-6)


def test_float64_numpy_operand_stays_float64_with_x64_off():
    """A concrete float64 NumPy array JAX would round to float32 is read from a
    scratch copy in its own dtype instead: NumPy's result, to the last bit."""
    X = np.ones((40, 6))
    scale = np.full(6, 1 + 1e-9)
    with jax.enable_x64(False), ooc.MemoryBudget(BUDGET):
        got = ooc.sum(ooc.DiskArray.from_numpy(X) * scale, axis=0)
        assert got.dtype == np.float64
        np.testing.assert_array_equal(got.to_numpy(), (X * scale).sum(axis=0))


def test_bfloat16_parameters_are_refused_not_zeroed():
    X, _ = _data()
    with ooc.MemoryBudget(BUDGET):
        Xd = ooc.DiskArray.from_numpy(X)
        with pytest.raises(TypeError, match=r"bfloat16 operands.*astype\(jnp\.float32\)"):
            jax.grad(lambda w: ooc.sum(Xd * w))(jnp.ones(K, jnp.bfloat16))


def test_explain_shows_parameters_held_in_memory_and_where_gradients_are_summed():
    X, y = _data()
    w, b = jnp.ones(K, jnp.float32), jnp.float32(0.5)
    with ooc.MemoryBudget(BUDGET):
        Xd, yd = ooc.DiskArray.from_numpy(X), ooc.DiskArray.from_numpy(y)
        step = jax.jit(jax.value_and_grad(_least_squares(ooc, Xd, yd), argnums=(0, 1)))
        plan = ooc.explain(step, w, b)
    text = str(plan)
    assert f"in memory m0: float32[{K}]" in text
    assert "sums the gradient of m0 in memory over its tiles" in text
    # one pass computes the loss and its gradient: X is read once, nothing written
    assert len(plan.stages) == 1
    assert plan.io.bytes_written == 0
    _close(plan.result, jax.value_and_grad(_least_squares(jnp, X, y), argnums=(0, 1))(w, b))
