"""The gradient of a loss computed in the pass that computes the loss.

A full sum or mean of a fused chain, differentiated with respect to in-memory (JAX)
parameters, reads its data once and writes nothing: each tile's share of the
gradient is computed with the tile's share of the loss, and the backward pass runs
no pass at all (`gradpipe.ooc.execution._one_pass`). Where that does not hold (a
chain also used outside the loss, data differentiated), the ordinary passes run;
either way the values and gradients are jax.numpy's. Random losses are the judge.
"""

from __future__ import annotations

import os
import warnings

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from gradpipe import ooc
from gradpipe.ooc.execution import _one_pass, _tile_pieces, _tile_program

N, K = 600, 8
BUDGET = 32 * 2**10  # several tiles per pass


@pytest.fixture(params=["x64-off", "x64-on"])
def x64(request):
    with jax.enable_x64(request.param == "x64-on"), warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        yield request.param == "x64-on"


@pytest.fixture(params=["eager", "jit"])
def jit(request):
    return jax.jit if request.param == "jit" else (lambda f: f)


#: The device of the tests that compute a loss's pass on a device: JAX's CPU here,
#: the accelerator under `make test-device` (GRADPIPE_TEST_DEVICE=tpu).
TEST_DEVICE = os.environ.get("GRADPIPE_TEST_DEVICE", "cpu")


@pytest.fixture(params=["host", "device"])
def where(request, monkeypatch):
    """Where the loss's pass computes: the host, or a device (`MemoryBudget(device=)`),
    as jax.numpy computes there, in pieces of at most 2 KiB read (`DEVICE_PIECE_BYTES`:
    a tile's pieces are each waited for in turn, each releasing every mapped block it
    read: `PIECE_RELEASE_BYTES`); on either, pieces of at least 64 elements
    (`MIN_PIECE_ELEMENTS`), so that these small tiles go in several."""
    monkeypatch.setattr(_one_pass, "DEVICE_PIECE_BYTES", 2048)
    monkeypatch.setattr(_tile_program, "PIECE_RELEASE_BYTES", 0)
    monkeypatch.setattr(_tile_pieces, "MIN_PIECE_ELEMENTS", 64)
    return "host" if request.param == "host" else TEST_DEVICE


def _budget(where):
    return ooc.MemoryBudget(BUDGET, device=where)


def _on_device(plan, where, nbytes, jitted=False):
    """The loss's pass ran where it was asked, sending what it read of the data to
    a device once (a step that slices it sends less); under jax.jit an accelerator
    is busy running the program whose callback runs the pass: the host computes it."""
    (stage,) = plan.stages
    if where == "host":
        assert stage.runs_on == "host"
    elif jitted and jax.devices(where)[0].platform != "cpu":
        assert stage.runs_on == "host"
        assert any("under jax.jit" in n for n in stage.notes), stage
    else:
        assert stage.runs_on != "host" and 0 < stage.to_device <= nbytes + 2**20, stage


def _data(seed=0):
    rng = np.random.default_rng(seed)
    return (
        rng.standard_normal((N, K)).astype(np.float32),
        rng.standard_normal((N, K)).astype(np.float32),
    )


def _close(got, want, rtol=3e-5, atol=2e-6):
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        assert (jnp.shape(g), jnp.asarray(g).dtype) == (jnp.shape(w), jnp.asarray(w).dtype)
        r, a = rtol, atol
        if jax.default_backend() == "tpu":  # exp, tanh there keep four or five digits
            # (`make test-device` asks for 'highest' products): an entry that cancels
            # keeps them of the gradient's largest entries, not its own
            scale = float(np.max(np.abs(np.asarray(w)), initial=1.0))
            r, a = max(rtol, 5e-3), max(atol, 5e-4, 5e-5 * scale)
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=r, atol=a)


def _loss(xp, X, y):
    def loss(p):
        t = xp.tanh(X * p["w"] + p["b"])
        return xp.mean(xp.square(t - y) + 0.1 * t * p["w"])

    return loss


def _params():
    return {"w": jnp.linspace(0.1, 1.0, K, dtype=jnp.float32), "b": jnp.float32(0.3)}


def _passes(plan):
    return [(s.name, s.phase) for s in plan.stages]


def _explained(loss, A, jit, p=None):
    """``loss(xp, X)``'s value and gradient with respect to the parameters: the plan
    of the step on ``A`` stored (``jit`` applied), and jax.numpy's answer."""
    p = _params() if p is None else p
    want = jax.value_and_grad(loss(jnp, jnp.asarray(A)))(p)
    with ooc.MemoryBudget(BUDGET):
        X = ooc.DiskArray.from_numpy(A)
        plan = ooc.explain(jit(jax.value_and_grad(loss(ooc, X))), p)
    return plan, want


def test_a_loss_and_its_parameter_gradients_take_one_read_and_write_nothing(x64, jit):
    A, Y = _data()
    want = jax.value_and_grad(_loss(jnp, jnp.asarray(A), jnp.asarray(Y)))(_params())
    with ooc.MemoryBudget(BUDGET):
        X, y = ooc.DiskArray.from_numpy(A), ooc.DiskArray.from_numpy(Y)
        plan = ooc.explain(jit(jax.value_and_grad(_loss(ooc, X, y))), _params())
    _close(plan.result, want)
    assert _passes(plan) == [("mean", "value and gradient")]
    (stage,) = plan.stages
    assert stage.tiles > 1
    assert stage.io.bytes_read == A.nbytes + Y.nbytes
    assert plan.io.bytes_written == 0
    assert any("gradient of" in s for s in stage.summed_in_memory)


def test_an_optax_step_and_equinox_filters_share_the_pass():
    A, Y = _data(1)
    opt = optax.adam(1e-2)
    with ooc.MemoryBudget(BUDGET):
        X, y = ooc.DiskArray.from_numpy(A), ooc.DiskArray.from_numpy(Y)

        @eqx.filter_jit
        def step(p, state, X, y):
            value, g = eqx.filter_value_and_grad(_loss(ooc, X, y))(p)
            updates, state = opt.update(g, state, p)
            return optax.apply_updates(p, updates), state, value

        p = _params()
        state = opt.init(p)
        plan = ooc.explain(step, p, state, X, y)
        p1, _, value = plan.result
    ref = _loss(jnp, jnp.asarray(A), jnp.asarray(Y))
    want_value, want_g = jax.value_and_grad(ref)(_params())
    want_p, _ = opt.update(want_g, opt.init(_params()), _params())
    _close(value, want_value)
    _close(p1, optax.apply_updates(_params(), want_p), rtol=1e-5, atol=1e-6)
    assert _passes(plan) == [("mean", "value and gradient")]


@pytest.mark.parametrize(
    "case",
    ["a chain also used outside the loss", "two reductions of one chain", "data differentiated"],
)
def test_where_one_pass_does_not_hold_the_ordinary_passes_give_the_same_gradient(case, jit):
    A, Y = _data(2)

    def program(xp, X, y):
        def loss(p, X):
            t = xp.tanh(X * p["w"] + p["b"])
            if case == "a chain also used outside the loss":
                return xp.mean(xp.square(t - y)) + xp.sum(t[:5] * p["w"])
            if case == "two reductions of one chain":
                return xp.mean(t) + 2.0 * xp.sum(t)
            return xp.sum(xp.square(t - y))

        return loss

    argnums = (0, 1) if case == "data differentiated" else 0
    want = jax.value_and_grad(program(jnp, None, jnp.asarray(Y)), argnums=argnums)(
        _params(), jnp.asarray(A)
    )
    with ooc.MemoryBudget(BUDGET):
        X, y = ooc.DiskArray.from_numpy(A), ooc.DiskArray.from_numpy(Y)
        got = jit(jax.value_and_grad(program(ooc, None, y), argnums=argnums))(_params(), X)
        got = jax.tree.map(lambda v: v.to_numpy() if isinstance(v, ooc.DiskArray) else v, got)
    _close(got, want, rtol=1e-4, atol=1e-5)


# ---------------------------------------------------------------- random losses

UNARY = ["tanh", "exp", "sin", "square", "negative", "abs"]
BINARY = ["add", "subtract", "multiply", "maximum"]


def _random_loss(rng):
    """A random elementwise graph over X, y, their rows' products with w and
    parameters w (K,), v (K,), s (), reduced by a sum or a mean: (xp -> loss(p)) and
    whether it reads each node once."""
    steps = []
    for _ in range(int(rng.integers(2, 6))):
        kind = rng.choice(["unary", "binary"])
        if kind == "unary":
            steps.append(("u", str(rng.choice(UNARY)), int(rng.integers(0, len(steps) + 3))))
        else:
            a, b = (int(rng.integers(0, len(steps) + 6)) for _ in range(2))
            steps.append(("b", str(rng.choice(BINARY)), a, b))
    reduce = str(rng.choice(["sum", "mean"]))

    def build(xp, X, y):
        def loss(p):
            # (a product of the rows with w: its gradient's product is batched on the host)
            rows = (X @ p["w"])[:, None] * y
            vals = [X, y, X * p["w"], p["v"] + y, p["s"] * X, p["w"], rows]
            for step in steps:
                if step[0] == "u":
                    x = vals[step[2] % len(vals)]
                    vals.append(getattr(xp, step[1])(xp.tanh(x) if step[1] == "exp" else x))
                else:
                    a, b = vals[step[2] % len(vals)], vals[step[3] % len(vals)]
                    vals.append(getattr(xp, step[1])(a, b))
            return getattr(xp, reduce)(vals[-1] * p["w"] + vals[2])

        return loss

    return build


#: `make fuzz` runs more (GRADPIPE_PROGRAMS_PER_SHARD) from a fresh GRADPIPE_FUZZ_SEED.
LOSSES = max(12, int(os.environ.get("GRADPIPE_PROGRAMS_PER_SHARD", "0")))
FIRST = int(os.environ.get("GRADPIPE_FUZZ_SEED", "100"))


@pytest.mark.parametrize("seed", range(LOSSES))
def test_random_losses_agree_with_jax_numpy_in_one_pass(seed, where):
    rng = np.random.default_rng(FIRST + seed)
    A, Y = _data(seed)
    build = _random_loss(rng)
    p = {
        "w": jnp.asarray(rng.uniform(0.5, 1.5, K), jnp.float32),
        "v": jnp.asarray(rng.standard_normal(K), jnp.float32),
        "s": jnp.float32(rng.uniform(0.5, 1.5)),
    }
    want = jax.value_and_grad(build(jnp, jnp.asarray(A), jnp.asarray(Y)))(p)
    with _budget(where):
        X, y = ooc.DiskArray.from_numpy(A), ooc.DiskArray.from_numpy(Y)
        fn = jax.value_and_grad(build(ooc, X, y))
        plan = ooc.explain(jax.jit(fn) if seed % 2 else fn, p)
    _close(plan.result, want, rtol=2e-4, atol=2e-4)
    # the loss's own pass is its only one: the data read once, nothing written
    assert [s.phase for s in plan.stages] == ["value and gradient"], plan
    assert plan.io.bytes_written == 0
    _on_device(plan, where, plan.io.bytes_read, jitted=seed % 2)


# ---------------------------------------------------------------- training losses

H, C = 6, 4  # hidden units, classes


def _net_params(seed=3):
    rng = np.random.default_rng(seed)
    return {
        "W1": jnp.asarray(rng.standard_normal((K, H)) / np.sqrt(K), jnp.float32),
        "b1": jnp.asarray(rng.standard_normal(H) * 0.1, jnp.float32),
        "W2": jnp.asarray(rng.standard_normal((H, C)) / np.sqrt(H), jnp.float32),
        "b2": jnp.zeros(C, jnp.float32),
        "s": jnp.float32(0.7),
    }


def _softmax_xent(xp, z, hot, stop):
    m = xp.max(z, axis=1, keepdims=True)
    m = jax.lax.stop_gradient(m) if stop else m
    lse = xp.log(xp.sum(xp.exp(z - m), axis=1)) + m[:, 0]
    return lse - xp.sum(xp.where(hot, z, 0.0), axis=1)


def _training_loss(name, xp, X, y):
    """The losses of a training step whose every tile's gradient needs only the tile
    and the loss's cotangent: one pass by the rule (`_one_pass`)."""

    def loss(p):
        h = xp.tanh(X @ p["W1"] + p["b1"])
        z = h @ p["W2"] + p["b2"]
        hot = y[:, :C] > 0.5  # data only: no gradient, no second pass
        if name == "least squares":
            return xp.mean(xp.square(X @ p["W1"][:, 0] + p["s"] - y[:, 0]))
        if name == "mlp, softmax cross-entropy":
            return xp.mean(_softmax_xent(xp, z, hot, stop=True))
        if name == "mlp, cross-entropy, max differentiated":
            return xp.mean(_softmax_xent(xp, z, hot, stop=False))
        if name == "relu mlp, squared error":
            return xp.sum(xp.square(xp.maximum(X @ p["W1"], 0.0) @ p["W2"] - y[:, :C]))
        if name == "row maxima, ties shared":  # X's columns 0 and 1 are equal
            scale = p["s"] * jnp.ones(3, jnp.float32)  # a parameter array (`_row_reduction`)
            return xp.mean(xp.max(X[:, :3] * scale, axis=1) + xp.min(z, axis=1))
        if name == "transposed and reshaped":
            t = xp.reshape(xp.transpose(X @ p["W1"]), (H, N, 1))
            return xp.sum(xp.sin(t[:, ::2, 0]) * p["s"])
        raise AssertionError(name)

    return loss


TRAINING = [
    "least squares",
    "mlp, softmax cross-entropy",
    "mlp, cross-entropy, max differentiated",
    "relu mlp, squared error",
    "row maxima, ties shared",
    "transposed and reshaped",
]


@pytest.mark.parametrize("name", TRAINING)
def test_a_training_loss_reads_its_data_once_for_its_value_and_every_gradient(name, jit, where):
    A, Y = _data(4)
    A[:, 1] = A[:, 0]
    want = jax.value_and_grad(_training_loss(name, jnp, jnp.asarray(A), jnp.asarray(Y)))(
        _net_params()
    )
    with _budget(where):
        X, y = ooc.DiskArray.from_numpy(A), ooc.DiskArray.from_numpy(Y)
        fn = jit(jax.value_and_grad(_training_loss(name, ooc, X, y)))
        jax.block_until_ready(fn(_net_params()))  # (compiled: the next call is the step)
        before = ooc.io_stats()
        got = jax.block_until_ready(fn(_net_params()))
        io = ooc.io_stats() - before
        plan = ooc.explain(jax.value_and_grad(_training_loss(name, ooc, X, y)), _net_params())
    _close(got, want, rtol=1e-4, atol=1e-5)
    assert [s.phase for s in plan.stages] == ["value and gradient"], plan
    assert plan.stages[0].tiles > 1
    assert io.bytes_read <= A.nbytes + Y.nbytes and io.bytes_written == 0
    _on_device(plan, where, plan.io.bytes_read)


@pytest.mark.parametrize("statistic", ["mean", "max"])
def test_a_normalisation_by_a_global_statistic_takes_a_second_pass_and_no_more(statistic, jit):
    """``tanh(X p - mean(X p))`` or ``exp(X p - max(X p))``: the statistic is needed
    inside a nonlinearity, so the loss cannot be summed before it is known. Each of
    the two reductions computes its own gradient in its pass: the data read twice,
    nothing written."""
    A, _ = _data(5)

    def loss(xp, X):
        def f(p):
            y = X * p["w"]
            if statistic == "max":
                return xp.sum(xp.exp(y - xp.max(y)) * p["b"])
            return xp.mean(xp.tanh(y - xp.mean(y)) * p["b"])

        return f

    plan, want = _explained(loss, A, jit)
    _close(plan.result, want, rtol=1e-4, atol=1e-6)
    assert [s.phase for s in plan.stages] == ["value and gradient"] * 2
    assert plan.io.bytes_read == 2 * A.nbytes and plan.io.bytes_written == 0
    # explain says which global value forced the second pass
    first, second = plan.stages
    # (under jax.jit on an accelerator, a note says the host computed it)
    assert first.value is not None and not any("the value pass" in n for n in first.notes)
    assert any(f"the value pass 1 ({statistic}) computed" in n for n in second.notes), plan


def test_a_stopped_gradient_stops_it_in_the_pass_too(jit):
    """``y * stop_gradient(y)``: the gradient is ``X y``, not ``2 X y``. The stop is
    a step of the chain, so the pass's own program stops it and the backward sends
    no cotangent through it."""
    A, _ = _data(6)

    def loss(xp, X):
        def f(p):
            y = X * p["w"] + p["b"]
            return xp.sum(y * jax.lax.stop_gradient(y) + jax.lax.stop_gradient(xp.exp(y)))

        return f

    plan, want = _explained(loss, A, jit)
    _close(plan.result, want, rtol=1e-4, atol=1e-4)
    assert [s.phase for s in plan.stages] == ["value and gradient"]
    assert plan.io.bytes_read == A.nbytes


def _random_training_loss(rng):
    """A random network over X's rows: products with parameter matrices, elementwise
    steps, a reduction over each row (sum, mean, max, min, a logsumexp with its max
    stopped or not), then a sum or mean over the rows. By the rule, one pass."""
    layers = [(str(rng.choice(["tanh", "sin", "relu", "none"])), bool(rng.integers(2)))]
    if rng.integers(2):
        layers.append((str(rng.choice(["tanh", "exp", "none"])), bool(rng.integers(2))))
    row = str(rng.choice(["sum", "mean", "max", "min", "logsumexp", "logsumexp-stopped"]))
    keep = bool(rng.integers(2))
    reduce = str(rng.choice(["sum", "mean"]))

    def build(xp, X, y):
        def loss(p):
            h, width = X, K
            for i, (act, bias) in enumerate(layers):
                h = h @ p[f"W{i}"][:width] + (p[f"b{i}"] if bias else 0.0)
                width = H
                if act == "relu":
                    h = xp.maximum(h, 0.0)
                elif act == "exp":
                    h = xp.exp(xp.tanh(h))
                elif act != "none":
                    h = getattr(xp, act)(h)
            h = h * y[:, :1]  # data in the chain too
            if row.startswith("logsumexp"):
                m = xp.max(h, axis=1, keepdims=True)
                m = jax.lax.stop_gradient(m) if row.endswith("stopped") else m
                r = xp.log(xp.sum(xp.exp(h - m), axis=1, keepdims=keep)) + (m if keep else m[:, 0])
            else:
                r = getattr(xp, row)(h, axis=1, keepdims=keep)
            return getattr(xp, reduce)(xp.square(r - p["s"]))

        return loss

    return build


@pytest.mark.parametrize("seed", range(LOSSES))
def test_random_training_losses_agree_with_jax_numpy_in_one_pass(seed, where):
    rng = np.random.default_rng(FIRST + 1000 + seed)
    A, Y = _data(seed)
    build = _random_training_loss(rng)
    p = {
        "W0": jnp.asarray(rng.standard_normal((K, H)) / np.sqrt(K), jnp.float32),
        "b0": jnp.asarray(rng.standard_normal(H) * 0.1, jnp.float32),
        "W1": jnp.asarray(rng.standard_normal((H, H)) / np.sqrt(H), jnp.float32),
        "b1": jnp.asarray(rng.standard_normal(H) * 0.1, jnp.float32),
        "s": jnp.float32(rng.uniform(-0.5, 0.5)),
    }
    want = jax.value_and_grad(build(jnp, jnp.asarray(A), jnp.asarray(Y)))(p)
    with _budget(where):
        X, y = ooc.DiskArray.from_numpy(A), ooc.DiskArray.from_numpy(Y)
        fn = jax.value_and_grad(build(ooc, X, y))
        plan = ooc.explain(jax.jit(fn) if seed % 2 else fn, p)
    _close(plan.result, want, rtol=2e-4, atol=2e-5)
    assert [s.phase for s in plan.stages] == ["value and gradient"], plan
    assert plan.io.bytes_read <= A.nbytes + Y.nbytes and plan.io.bytes_written == 0
    _on_device(plan, where, plan.io.bytes_read, jitted=seed % 2)


@pytest.mark.parametrize("kind", ["max", "min"])
def test_a_global_extremum_shares_its_gradient_among_ties_across_tiles_in_one_pass(kind, jit):
    """The extremum of a chain over all its elements computes its gradient in its
    pass: each tile's extremum, its ties and their gradient, kept for the best
    tile and added for tiles that tie with it, as jax.numpy shares it. (Not with a
    NaN: XLA's maximum on the CPU drops one or keeps it depending on where it lies,
    jnp.max of 600 x 8 values with one NaN gave 9.38; NumPy's, and gradpipe's, is
    NaN.)"""
    A, _ = _data(7)
    A[[3, 300, 590], 2] = 9.0  # three tied maxima, in three tiles
    A[[5, 450], 4] = -9.0  # two tied minima
    reduce = "min" if kind == "min" else "max"

    def loss(xp, X):
        return lambda p: getattr(xp, reduce)(X * p["w"] + p["b"] * X[:, :1])

    p = {"w": jnp.ones(K, jnp.float32).at[1].set(0.5), "b": jnp.float32(0.25)}
    plan, want = _explained(loss, A, jit, p)
    _close(plan.result, want, rtol=1e-5, atol=1e-6)
    assert [s.phase for s in plan.stages] == ["value and gradient"]
    assert plan.stages[0].tiles > 1 and plan.io.bytes_read == A.nbytes


# ---------------------------------------------------------------- the data's gradient


def test_the_gradient_of_the_data_is_written_by_the_losss_pass(x64, jit):
    """``jax.grad`` with respect to a stored array: each tile's gradient is written
    as the pass computes it (for the loss's cotangent 1, scaled when read if it is
    not): the data read once, its gradient written once, and no other pass."""
    A, _ = _data(8)

    def loss(xp):
        return lambda X, p: 2.0 * xp.mean(xp.exp(xp.tanh(X) * 0.5 + p["b"]) - X * X * p["w"])

    want = jax.value_and_grad(loss(jnp), argnums=(0, 1))(jnp.asarray(A), _params())
    with ooc.MemoryBudget(BUDGET):
        X = ooc.DiskArray.from_numpy(A)
        fn = jit(jax.value_and_grad(loss(ooc), argnums=(0, 1)))
        plan = ooc.explain(lambda X, p: ooc.persist(fn(X, p)[1][0]), X, _params())
        value, (gX, gp) = fn(X, _params())
        got_gX = gX.to_numpy(force=True)
    assert [s.phase for s in plan.stages] == ["value and gradient"], plan
    assert plan.io.bytes_read == A.nbytes and plan.io.bytes_written == A.nbytes
    _close(value, want[0], rtol=1e-5)
    _close(got_gX, want[1][0], rtol=1e-4, atol=1e-7)
    _close(gp, want[1][1], rtol=1e-4, atol=1e-6)


def test_a_stored_gradient_leaves_the_disk_with_its_last_reference():
    """A training loop drops each step's gradient of the data: its file goes with
    the last reference, not at some later collection of reference cycles (each
    step's would pile up meanwhile, gigabytes of them on a RAM disk)."""
    import gc

    A, _ = _data(8)
    with ooc.MemoryBudget(BUDGET):
        X = ooc.DiskArray.from_numpy(A)
        grad = jax.value_and_grad(lambda X: ooc.mean(ooc.exp(ooc.tanh(X)) - X * X))
        before = set(ooc.get_scratch_dir().rglob("*"))
        gc.disable()
        try:
            value, g = grad(X)
            g = g.persist()
            made = set(ooc.get_scratch_dir().rglob("*")) - before
            assert any(f.stat().st_size >= A.nbytes for f in made if f.is_file()), made
            del value, g
            left = [f for f in made if f.exists() and f.is_file()]
        finally:
            gc.enable()
    assert left == []


def test_each_stored_gradient_of_one_pass_leaves_with_its_own_last_reference():
    """One pass writes the gradients of two stored arrays: dropping one of them
    removes its file while the other is kept (the pass's record holds both, and a
    computed gradient no longer holds the record)."""
    import gc

    A, B = _data(8)
    with ooc.MemoryBudget(BUDGET):
        X, Y = ooc.DiskArray.from_numpy(A), ooc.DiskArray.from_numpy(B)
        grad = jax.grad(lambda X, Y: ooc.mean(ooc.tanh(X) * Y), argnums=(0, 1))
        before = set(ooc.get_scratch_dir().rglob("*"))
        gc.disable()
        try:
            gx, gy = (g.persist() for g in grad(X, Y))
            made = {f for f in set(ooc.get_scratch_dir().rglob("*")) - before if f.is_file()}
            assert len([f for f in made if f.stat().st_size >= A.nbytes]) == 2, made
            want_gx = np.asarray(gx.to_numpy(force=True))
            del gy
            left = [f for f in made if f.exists()]
            got_gx = gx.to_numpy(force=True)
        finally:
            gc.enable()
    assert len([f for f in left if f.stat().st_size >= A.nbytes]) == 1, left
    np.testing.assert_array_equal(got_gx, want_gx)


@pytest.mark.parametrize("seed", range(LOSSES))
def test_random_losses_differentiated_in_their_data_take_one_pass(seed, where):
    rng = np.random.default_rng(FIRST + 2000 + seed)
    A, Y = _data(seed)
    build = _random_loss(rng)
    p = {
        "w": jnp.asarray(rng.uniform(0.5, 1.5, K), jnp.float32),
        "v": jnp.asarray(rng.standard_normal(K), jnp.float32),
        "s": jnp.float32(rng.uniform(0.5, 1.5)),
    }

    def loss(xp, y):
        return lambda X, p: build(xp, X, y)(p)

    want = jax.value_and_grad(loss(jnp, jnp.asarray(Y)), argnums=(0, 1))(jnp.asarray(A), p)
    with _budget(where):
        X, y = ooc.DiskArray.from_numpy(A), ooc.DiskArray.from_numpy(Y)
        fn = jax.value_and_grad(loss(ooc, y), argnums=(0, 1))
        fn = jax.jit(fn) if seed % 2 else fn
        plan = ooc.explain(lambda X, p: ooc.persist(fn(X, p)[1][0]), X, p)
        value, (gX, gp) = fn(X, p)
        got_gX = gX.to_numpy(force=True)
    _close((value, got_gX, gp), (want[0], *want[1]), rtol=2e-4, atol=2e-4)
    assert [s.phase for s in plan.stages] == ["value and gradient"], plan
    assert plan.io.bytes_written == A.nbytes
    _on_device(plan, where, plan.io.bytes_read, jitted=seed % 2)
