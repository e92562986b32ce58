"""Fused chains: elementwise and layout steps are computed when read, not written.

What a user relies on: a chain ending in a reduction reads its input once and
writes nothing; its values equal the unfused computation's bit for bit (the same
operations in the same order); its gradient equals JAX's and is computed in one
pass that writes only the gradient; the write-or-recompute rule writes a chain
used many times and keeps a cheap one fused; in-place writes never change what a
fused result says; and `explain` shows the passes with their I/O.
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from gradcases import GradCase, check
from rounding import assert_within, gamma

from gradpipe import ooc
from gradpipe.ooc.execution._driver import Driver
from gradpipe.ooc.planning._chain import is_chain


def _persist(xp, a):
    return xp.persist(a) if hasattr(xp, "persist") else a


def _chain(xp, x):
    return xp.exp(xp.tanh(x) * 0.5 + 0.1) - x * x


CASES = [
    GradCase("persist", lambda xp, a: _persist(xp, xp.sin(a)) * 2.0, ((37, 29),)),
    GradCase("persist", lambda xp, a: _chain(xp, _persist(xp, _chain(xp, a))), ((37, 29),)),
    GradCase("multiply", lambda xp, a: _chain(xp, a), ((37, 29),)),
    GradCase(
        "add",
        lambda xp, a, b: xp.tanh(a * 2.0 + b) * xp.exp(-a),
        ((37, 29), (29,)),
    ),
    GradCase(
        "transpose",
        lambda xp, a, b: xp.sin(xp.matrix_transpose(xp.cos(a)) * b),
        ((37, 29), (29, 37)),
    ),
    GradCase(
        "getitem", lambda xp, a: xp.sqrt(xp.abs(a[3:30, ::2]) + 1.0) * a[3:30, 1::2], ((37, 58),)
    ),
    GradCase(
        "astype",
        lambda xp, a: xp.astype(xp.astype(a * 3.0, xp.float32), a.dtype) + a,
        ((37, 29),),
    ),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("jit", [False, True])
def test_fused_gradients_equal_jax(case, dtype, jit):
    check(case, dtype, jit)


@pytest.fixture
def data(rng):
    return rng.standard_normal((96, 80)).astype(np.float32)


def _unfused(x):
    """The same chain with every step written to disk before the next reads it."""
    p = ooc.persist
    return p(p(p(p(ooc.exp(p(p(ooc.tanh(x)) * 0.5) + 0.1))) - p(x * x)))


@pytest.mark.parametrize("jit", [False, True])
def test_a_chain_ending_in_a_mean_reads_once_writes_nothing_and_equals_unfused(data, jit):
    with ooc.MemoryBudget(16384):
        x = ooc.DiskArray.from_numpy(data)
        fused = jax.jit(lambda x: ooc.mean(_chain(ooc, x))) if jit else None
        before = ooc.io_stats()
        value = fused(x) if jit else ooc.mean(_chain(ooc, x))
        io = ooc.io_stats() - before
        assert io.bytes_read == x.nbytes and io.bytes_written == 0
        # the sums' order follows the tiles, which a chain's larger working set shrinks
        np.testing.assert_allclose(float(value), float(ooc.mean(_unfused(x))), rtol=1e-6)
        elementwise = _chain(ooc, x)
        assert is_chain(elementwise._file)
        # reading a fused result in tiles gives the unfused bytes
        assert (
            elementwise.to_numpy(force=True).tobytes() == _unfused(x).to_numpy(force=True).tobytes()
        )
        np.testing.assert_allclose(elementwise.to_numpy(force=True), _chain(np, data), rtol=1e-6)


def test_value_and_grad_reads_once_and_writes_only_the_gradient(data):
    """The loss's pass writes the data's gradient as it goes (`_one_pass`)."""
    with ooc.MemoryBudget(16384):
        x = ooc.DiskArray.from_numpy(data)
        loss = jax.jit(jax.value_and_grad(lambda x: ooc.mean(_chain(ooc, x))))
        loss(x)  # compile
        before = ooc.io_stats()
        value, g = loss(x)
        g = ooc.persist(g)
        io = ooc.io_stats() - before
        assert io.bytes_read == x.nbytes
        assert io.bytes_written == x.nbytes
        want_v, want_g = jax.value_and_grad(lambda x: jnp.mean(_chain(jnp, x)))(data)
        np.testing.assert_allclose(float(value), float(want_v), rtol=1e-6)
        np.testing.assert_allclose(g.to_numpy(force=True), want_g, rtol=2e-5, atol=1e-9)


def test_a_broadcast_bias_gradient_is_summed_in_one_pass(rng):
    a, b = rng.standard_normal((64, 48)).astype(np.float32), rng.standard_normal(48)
    b = b.astype(np.float32)
    with ooc.MemoryBudget(16384):
        x, bias = ooc.DiskArray.from_numpy(a), ooc.DiskArray.from_numpy(b)
        ga, gb = jax.grad(lambda x, c: ooc.sum(ooc.tanh(x + c) * x), argnums=(0, 1))(x, bias)
        assert is_chain(ga._file) and not is_chain(gb._file)
        wa, wb = jax.grad(lambda x, c: jnp.sum(jnp.tanh(x + c) * x), argnums=(0, 1))(a, b)
        np.testing.assert_allclose(ga.to_numpy(force=True), wa, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(gb.to_numpy(force=True), wb, rtol=1e-4, atol=1e-5)


# ---------------------------------------------------------------- write or recompute


def test_a_cheap_chain_read_twice_stays_fused(data):
    with ooc.MemoryBudget(16384):
        x = ooc.DiskArray.from_numpy(data)
        y = ooc.tanh(x)
        before = ooc.io_stats()
        s, m = ooc.sum(y), ooc.max(y)
        io = ooc.io_stats() - before
        assert is_chain(y._file)
        assert io.bytes_written == 0 and io.bytes_read == 2 * x.nbytes
        np.testing.assert_allclose(float(s), np.tanh(data).sum(dtype=np.float64), rtol=1e-5)
        assert float(m) == np.tanh(data).max()


def test_a_costly_chain_read_again_is_written_once(rng):
    arrays = [rng.standard_normal((96, 80)).astype(np.float32) for _ in range(4)]
    with ooc.MemoryBudget(16384):
        a, b, c, d = (ooc.DiskArray.from_numpy(v) for v in arrays)
        y = ooc.exp(a) * b + ooc.sin(c) * d  # reads four arrays per element
        before = ooc.io_stats()
        plan = ooc.explain(ooc.sum, y)  # the sum, and the tiles it was summed in
        first = plan.result
        after_first = ooc.io_stats() - before
        assert after_first.bytes_written == 0  # one consumer: read through
        second, third = ooc.max(y), ooc.min(y)
        io = ooc.io_stats() - before
        assert not is_chain(y._file)  # written before the second consumer
        assert io.bytes_written == y.nbytes
        # four inputs read through by the first consumer and again to write the
        # chain's copy, which the other two read
        assert io.bytes_read == 2 * 4 * a.nbytes + 2 * y.nbytes
        # The same NumPy kernels give the same terms. In the float32 sum a term
        # goes through at most (tile size - 1) additions in its tile, in any order,
        # then (tiles - 1) as the tiles' partial sums are added in turn: the sum is
        # within gamma(tile size + tiles) sum |terms| of the exact one, and the
        # float64 reference within gamma(N, float64) sum |terms|. (A relative
        # tolerance bounds nothing for a sum of terms of both signs.)
        want = np.exp(arrays[0]) * arrays[1] + np.sin(arrays[2]) * arrays[3]
        (stage,) = plan.stages
        depth = math.prod(stage.tile) + stage.tiles
        total = np.sum(np.abs(want), dtype=np.float64)
        bound = (gamma(depth) + gamma(want.size, np.float64)) * total
        assert_within(first, want.sum(dtype=np.float64), bound, "sum of the chain")
        assert float(second) == want.max() and float(third) == want.min()


def test_a_consumer_reading_many_times_over_gets_a_written_copy(rng):
    a = rng.standard_normal((256, 256)).astype(np.float32)
    with ooc.MemoryBudget(65536):
        x = ooc.DiskArray.from_numpy(a)
        y = ooc.exp(x) * 2.0 + x
        out = y @ y  # a product reads each operand several times over
        assert not is_chain(y._file)
        want = (np.exp(a) * 2 + a) @ (np.exp(a) * 2 + a)
        np.testing.assert_allclose(out.to_numpy(force=True), want, rtol=2e-4)


def test_a_very_long_chain_is_cut_and_stays_correct(rng):
    a = rng.standard_normal((64, 64)).astype(np.float32)
    with ooc.MemoryBudget(16384):
        x = ooc.DiskArray.from_numpy(a)
        y, want = x, a
        for _ in range(120):
            y, want = ooc.sin(y) + 0.01, np.sin(want) + np.float32(0.01)
        assert y._file.depth <= ooc.planning._chain.MAX_DEPTH
        np.testing.assert_allclose(y.to_numpy(force=True), want, rtol=1e-5, atol=1e-6)


def test_a_chain_too_deep_for_its_budget_is_cut_so_its_pieces_stay_large(rng):
    """Under a 4 MiB budget a 48-step chain would run in pieces of ~700 bytes (its
    intermediates share the budget), where one Python call per step and piece costs
    more than the arithmetic; its inputs are written instead, forward and backward."""
    a = rng.standard_normal((256, 1024)).astype(np.float32)

    def long_chain(xp, x):
        y = x
        for _ in range(16):
            y = xp.sin(y) * 0.9 + 0.01 * x
        return y

    with ooc.MemoryBudget("4MiB"):
        x = ooc.DiskArray.from_numpy(a)
        y = long_chain(ooc, x)
        assert is_chain(y._file)
        assert y._file.stats().piece_bytes >= ooc.planning._chain.MIN_PIECE_BYTES
        np.testing.assert_allclose(y.to_numpy(force=True), long_chain(np, a), rtol=1e-5, atol=1e-6)
        g = jax.grad(lambda x: ooc.sum(long_chain(ooc, x)))(x)
        assert all(
            c.stats().piece_bytes >= ooc.planning._chain.MIN_PIECE_BYTES
            for c in [g._file]
            if is_chain(c)
        )
        want = jax.grad(lambda x: jnp.sum(long_chain(jnp, x)))(a)
        np.testing.assert_allclose(g.to_numpy(force=True), want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("budget", ["64KiB", "1MiB", "4MiB"])
def test_a_chains_bounds_decide_as_a_walk_of_its_graph_would(rng, budget):
    """Each chain keeps bounds on its depth and steps (so that most chains need no
    walk of their graph to know they are neither too deep nor too long): they are
    never below the walk's figures, with steps shared and chains below stored, and
    the decisions made from them are the walk's."""
    from gradpipe.ooc.planning._chain import deeper_than, too_deep

    a = rng.standard_normal((128, 96)).astype(np.float32)
    chains = []
    with ooc.MemoryBudget(budget):
        x = ooc.DiskArray.from_numpy(a)
        y = x
        for i in range(40):
            y = ooc.sin(y) * 0.9 + 0.01 * x if i % 3 else y * y + y  # (shared steps)
            if i == 20:
                y._file.store(Driver(ooc.MemoryBudget(budget), "test"))
            if is_chain(y._file):
                chains.append(y._file)
        assert len(chains) > 30
        for c in chains:
            stats = c.stats()
            assert c.bounds[0] >= stats.depth and c.bounds[1] >= len(stats.steps)
            want = c.budget_bytes >= ooc.planning._chain.CUT_BUDGET and (
                stats.piece_bytes < ooc.planning._chain.MIN_PIECE_BYTES
            )
            assert too_deep(c) == want
            for depth in (1, 5, stats.depth, stats.depth + 1, 48):
                assert deeper_than(c, depth) == (stats.depth >= depth)


def test_a_chains_leaves_are_found_again_once_a_chain_below_it_is_stored(rng):
    """The leaves a chain reads are kept between asks, until a chain is stored: the
    stored one is then a leaf of every chain above it, and what it read is not."""
    from gradpipe.ooc.planning._chain_graph import leaves

    a = rng.standard_normal((512, 256)).astype(np.float32)
    with ooc.MemoryBudget("64MiB"):
        x = ooc.DiskArray.from_numpy(a)
        below = x * 0.5 + 1.0
        top = below * 2.0 - 3.0
        assert is_chain(top._file) and is_chain(below._file)
        assert leaves(top._file) == [x._file] == leaves(top._file)
        below._file.store(Driver(ooc.MemoryBudget("64MiB"), "test"))
        assert leaves(top._file) == [below._file.stored]
        want = (a * np.float32(0.5) + 1) * 2 - 3
        np.testing.assert_allclose(top.to_numpy(force=True), want, rtol=1e-6)


# ---------------------------------------------------------------- writes in place


def test_update_of_an_input_does_not_change_a_fused_result(data):
    with ooc.MemoryBudget(16384):
        x = ooc.DiskArray.from_numpy(data)
        y = x * 2.0  # fused: reads x when read
        ooc.update_(x, x + 1.0)  # reads x too: written first, then x overwritten
        np.testing.assert_array_equal(x.to_numpy(force=True), data + 1)
        np.testing.assert_array_equal(y.to_numpy(force=True), data * 2)


def test_a_jitted_training_step_updates_weights_it_reads(rng):
    X = rng.standard_normal((128, 8)).astype(np.float32)
    w0 = rng.standard_normal((8, 1)).astype(np.float32)
    with ooc.MemoryBudget(16384):
        x, w = ooc.DiskArray.from_numpy(X), ooc.DiskArray.from_numpy(w0)

        def loss(w):
            return ooc.mean(ooc.tanh(x @ w)) + ooc.sum(w * w)

        step = jax.jit(lambda w: ooc.update_(w, w - 0.1 * jax.grad(loss)(w)))
        want = w0
        for _ in range(3):
            w = step(w)
            g = jax.grad(lambda w: jnp.mean(jnp.tanh(X @ w)) + jnp.sum(w * w))(want)
            want = want - 0.1 * g
        np.testing.assert_allclose(w.to_numpy(force=True), want, rtol=1e-5, atol=1e-6)


def test_setitem_on_a_fused_result_writes_it_and_leaves_inputs(data):
    with ooc.MemoryBudget(16384):
        x = ooc.DiskArray.from_numpy(data)
        y = x * 2.0
        z = y + 1.0  # reads y
        y[0] = 7.0
        assert not is_chain(y._file)
        np.testing.assert_array_equal(x.to_numpy(force=True), data)
        assert (y.to_numpy(force=True)[0] == 7).all()
        np.testing.assert_array_equal(y.to_numpy(force=True)[1:], data[1:] * 2)
        np.testing.assert_array_equal(z.to_numpy(force=True), data * 2 + 1)  # made before the write


# ---------------------------------------------------------------- explain


def test_explain_shows_passes_formulas_and_io(data):
    with ooc.MemoryBudget(16384):
        x = ooc.DiskArray.from_numpy(data)
        plan = ooc.explain(jax.value_and_grad(lambda x: ooc.mean(_chain(ooc, x))), x)
        # one pass: the loss, and the gradient written as it goes (`_one_pass`)
        (stage,) = plan.stages
        assert stage.name == "mean" and stage.phase == "value and gradient"
        assert "tanh(x0)" in stage.reads[0]
        assert stage.io.bytes_read == stage.projected_read_bytes == x.nbytes
        assert stage.io.bytes_written == stage.projected_write_bytes == x.nbytes
        assert stage.projected_peak_bytes <= 16384 and stage.tiles > 1
        assert plan.fused >= 6
        assert plan.io.bytes_read == x.nbytes
        text = str(plan)
        assert "mean" in text and "value and gradient" in text and "fused" in text
        _value, g = plan.result
        assert not is_chain(g._file)  # written by the pass


def test_a_stack_of_a_dozen_fused_arrays_plans_within_the_budget(rng):
    """A step reads its chains one after another, so the plan counts the largest
    chain's intermediates, not their sum (which refused this at any budget)."""
    X = rng.standard_normal((24, 64, 64)).astype(np.float32)
    x = ooc.DiskArray.from_numpy(X)
    with ooc.MemoryBudget(2**20):
        parts = [ooc.tanh(x[k] * 2.0) + x[k + 12] for k in range(12)]
        plan = ooc.explain(lambda: ooc.sum(ooc.stack(parts), axis=0))
        got = plan.result.to_numpy()
    assert all(s.projected_peak_bytes <= 2**20 for s in plan.stages)
    want = np.sum(np.stack([np.tanh(X[k] * 2) + X[k + 12] for k in range(12)]), axis=0)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
