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


def _data(seed=0):
    rng = np.random.default_rng(seed)
    return (
        rng.standard_normal((N, K)).astype(np.float32),
        rng.standard_normal((N, K)).astype(np.float32),
    )


def _close(got, want, rtol=3e-5, atol=2e-6):
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        assert (jnp.shape(g), jnp.asarray(g).dtype) == (jnp.shape(w), jnp.asarray(w).dtype)
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=rtol, atol=atol)


def _loss(xp, X, y):
    def loss(p):
        t = xp.tanh(X * p["w"] + p["b"])
        return xp.mean(xp.square(t - y) + 0.1 * t * p["w"])

    return loss


def _params():
    return {"w": jnp.linspace(0.1, 1.0, K, dtype=jnp.float32), "b": jnp.float32(0.3)}


def _passes(plan):
    return [(s.name, s.phase) for s in plan.stages]


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
    """A random elementwise graph over X, y and parameters w (K,), v (K,), s (),
    reduced by a sum or a mean: (xp -> loss(p)) and whether it reads each node once."""
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
            vals = [X, y, X * p["w"], p["v"] + y, p["s"] * X, p["w"]]
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
def test_random_losses_agree_with_jax_numpy_in_one_pass(seed):
    rng = np.random.default_rng(FIRST + seed)
    A, Y = _data(seed)
    build = _random_loss(rng)
    p = {
        "w": jnp.asarray(rng.uniform(0.5, 1.5, K), jnp.float32),
        "v": jnp.asarray(rng.standard_normal(K), jnp.float32),
        "s": jnp.float32(rng.uniform(0.5, 1.5)),
    }
    want = jax.value_and_grad(build(jnp, jnp.asarray(A), jnp.asarray(Y)))(p)
    with ooc.MemoryBudget(BUDGET):
        X, y = ooc.DiskArray.from_numpy(A), ooc.DiskArray.from_numpy(Y)
        fn = jax.value_and_grad(build(ooc, X, y))
        plan = ooc.explain(jax.jit(fn) if seed % 2 else fn, p)
    _close(plan.result, want, rtol=2e-4, atol=2e-4)
    # the loss's own pass is its only one: the data read once, nothing written
    assert [s.phase for s in plan.stages] == ["value and gradient"], plan
    assert plan.io.bytes_written == 0
