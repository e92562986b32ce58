"""Small sums wait until read, and sums of the same data then share one pass
(`gradpipe.ooc.execution._pending`): xarray's weighted mean reads its data once, not twice."""

import gc
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gradpipe import ooc
from gradpipe.ooc.execution import _held_results
from gradpipe.ooc.execution._pending import is_pending

BUDGET = 2 * 2**20
SHAPE = (240, 30, 64)  # 1.8 MiB of float32; each sum over the last axis is 28 KiB


@pytest.fixture
def data(rng):
    a = rng.standard_normal(SHAPE).astype(np.float32)
    a[a > 1.5] = np.nan
    return a


def pending(x) -> bool:
    return is_pending(x._concrete_file("test"))


def test_two_sums_of_the_same_data_read_it_once(data):
    clean = np.nan_to_num(data)
    with ooc.MemoryBudget(BUDGET):
        x = ooc.DiskArray.from_numpy(clean)
        ooc.reset_io_stats()
        s, q = ooc.sum(x, axis=2), ooc.sum(x * x, axis=2)
        assert pending(s) and pending(q)
        np.testing.assert_allclose(s.to_numpy(), clean.sum(2), rtol=1e-5, atol=1e-4)
        assert not pending(q)  # computed in s's pass
        np.testing.assert_allclose(q.to_numpy(), (clean * clean).sum(2), rtol=1e-5)
        io = ooc.io_stats()
    assert io.bytes_read < 1.2 * clean.nbytes  # once, not twice


def test_the_weighted_mean_of_xarray_reads_once_with_numpys_values_and_dtypes(data):
    """``dot(a.fillna(0), w) / dot(a.notnull(), w)``: a float sum and a bool count."""
    w = np.cos(np.linspace(0, 1.5, SHAPE[1])).astype(np.float32)
    with ooc.MemoryBudget(BUDGET):
        x = ooc.DiskArray.from_numpy(data)
        ooc.reset_io_stats()
        total = ooc.einsum("abc,b->a", ooc.where(ooc.isnan(x), 0.0, x), w)
        count = ooc.einsum("abc,b->a", ooc.logical_not(ooc.isnan(x)), w)
        mean = total / count
        got = mean.to_numpy()
        io = ooc.io_stats()
    want_total = np.einsum("abc,b->a", np.nan_to_num(data), w)
    want_count = np.einsum("abc,b->a", ~np.isnan(data), w)
    assert got.dtype == (want_total / want_count).dtype == np.float32
    np.testing.assert_allclose(got, want_total / want_count, rtol=2e-5, atol=1e-6)
    assert io.bytes_read < 1.2 * data.nbytes


def test_counts_of_bools_joined_with_float_sums_are_exact_and_integers(data):
    with ooc.MemoryBudget(BUDGET):
        x = ooc.DiskArray.from_numpy(data)
        n = ooc.sum(ooc.isnan(x), axis=2)
        s = ooc.sum(ooc.where(ooc.isnan(x), 0.0, x), axis=2)
        assert pending(n) and pending(s)
        counts = n.to_numpy()
    assert counts.dtype == jnp.sum(jnp.isnan(data), axis=2).dtype  # as a sum alone
    np.testing.assert_array_equal(counts, np.isnan(data).sum(2))
    np.testing.assert_allclose(s.to_numpy(), np.nansum(data, 2), rtol=1e-5, atol=1e-4)


def test_sums_of_other_dtypes_or_axes_are_each_right(data):
    clean = np.nan_to_num(data)
    with ooc.MemoryBudget(BUDGET):
        x = ooc.DiskArray.from_numpy(clean)
        a = ooc.sum(x, axis=2)
        b = ooc.sum(ooc.astype(x, ooc.float64), axis=2)
        c = ooc.sum(x, axis=1)
        got = [v.to_numpy() for v in (c, b, a)]
    want = [clean.sum(1), clean.astype(np.float64).sum(2), clean.sum(2)]
    for g, w in zip(got, want):
        assert g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-4)


def test_a_write_into_the_data_computes_the_waiting_sums_first(data):
    clean = np.nan_to_num(data)
    with ooc.MemoryBudget(BUDGET):
        x = ooc.asarray(clean, copy=True)
        s, q = ooc.sum(x, axis=2), ooc.sum(2.0 * x, axis=2)
        x[0] = 5.0
        assert not pending(s) and not pending(q)
        np.testing.assert_allclose(s.to_numpy(), clean.sum(2), rtol=1e-5, atol=1e-4)
        np.testing.assert_allclose(q.to_numpy(), 2 * clean.sum(2), rtol=1e-5, atol=1e-4)
        assert float(x[0, 0, 0]) == 5.0


def test_a_sum_outlives_the_array_it_was_made_from(data):
    clean = np.nan_to_num(data)
    with ooc.MemoryBudget(BUDGET):
        x = ooc.DiskArray.from_numpy(clean)
        s = ooc.sum(ooc.exp(x), axis=2)
        del x
        gc.collect()
        np.testing.assert_allclose(s.to_numpy(), np.exp(clean).sum(2), rtol=1e-5)


def test_a_small_result_of_a_waiting_sum_waits_too_and_reads_right(data):
    clean = np.nan_to_num(data)
    with ooc.MemoryBudget(BUDGET):
        x = ooc.DiskArray.from_numpy(clean)
        s = ooc.sum(x, axis=2)
        m = ooc.mean(s, axis=1, keepdims=True)  # a pass over a pending result
        assert pending(m)
        np.testing.assert_allclose(m.to_numpy(), clean.sum(2).mean(1, keepdims=True), rtol=1e-5)


@pytest.mark.parametrize("x64", [False, True], ids=["x64-off", "x64-on"])
def test_a_float32_sum_and_a_float64_count_share_a_pass(data, x64):
    with jax.enable_x64(x64):
        _float32_sum_and_float64_count(data)


@pytest.mark.parametrize("mode", ["eager", "jit"])
def test_gradients_of_a_loss_over_two_sums_match_jax(data, mode):
    clean = np.nan_to_num(data)
    w = np.linspace(0.5, 1.5, SHAPE[1]).astype(np.float32)

    def loss(x, w, xp):
        total = xp.einsum("abc,b->a", x, w)
        energy = xp.einsum("abc,b->a", x * x, w)
        return xp.sum(total / (1.0 + energy))

    with ooc.MemoryBudget(BUDGET):
        x = ooc.DiskArray.from_numpy(clean)
        f = jax.value_and_grad(lambda x, w: loss(x, w, ooc), argnums=(0, 1))
        f = jax.jit(f) if mode == "jit" else f
        value, (gx, gw) = f(x, jnp.asarray(w))
        gx = gx.to_numpy()
    want, (wx, ww) = jax.value_and_grad(lambda x, w: loss(x, w, jnp), argnums=(0, 1))(
        jnp.asarray(clean), jnp.asarray(w)
    )
    np.testing.assert_allclose(float(value), float(want), rtol=1e-4)
    np.testing.assert_allclose(gx, np.asarray(wx), rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(np.asarray(gw), np.asarray(ww), rtol=1e-4, atol=1e-4)


def test_explain_shows_the_sums_in_one_pass(data):
    clean = np.nan_to_num(data)
    with ooc.MemoryBudget(BUDGET):
        x = ooc.DiskArray.from_numpy(clean)

        def both(x):
            return (ooc.sum(x, axis=2) / ooc.sum(x * x, axis=2)).persist()

        report = ooc.explain(both, x)
    text = str(report)
    assert "reads stack(x0, multiply(x0, x0))" in text, text
    assert text.count(" sum ") == 1, text


def _float32_sum_and_float64_count(data):
    """xarray's weights are often float64 (``np.cos`` of a coordinate): under x64 a
    float32 anomaly's valid values are then counted in float64 and the anomaly
    summed in float32. One pass, each in its own dtype (NumPy's: results on disk
    keep NumPy's dtype whatever x64 says)."""
    w = np.cos(np.linspace(0, 1.5, SHAPE[1]))  # float64
    with ooc.MemoryBudget(BUDGET):
        x = ooc.DiskArray.from_numpy(data)
        ooc.reset_io_stats()
        total = ooc.einsum("abc,b->a", ooc.where(ooc.isnan(x), 0.0, x), w)
        count = ooc.einsum("abc,b->a", ooc.logical_not(ooc.isnan(x)), w)
        got_count, got_total = count.to_numpy(), total.to_numpy()
        io = ooc.io_stats()
    want_total = np.einsum("abc,b->a", np.nan_to_num(data), w)
    want_count = np.einsum("abc,b->a", ~np.isnan(data), w)
    assert [got_total.dtype, got_count.dtype] == [want_total.dtype, want_count.dtype]
    np.testing.assert_allclose(got_count, want_count, rtol=1e-6)
    np.testing.assert_allclose(got_total, want_total, rtol=1e-5, atol=1e-5)
    assert io.bytes_read < 1.2 * data.nbytes


def test_under_a_small_budget_a_tile_keeps_every_sum_and_the_data_is_read_once(data):
    """Tiles cut the other axes before the sums' slots: one slot per tile would read
    the data once per sum."""
    clean = np.nan_to_num(data)
    with ooc.MemoryBudget(2**20):  # sums still small (1/32 of it), tiles of 1/4 the data
        x = ooc.DiskArray.from_numpy(clean)
        ooc.reset_io_stats()
        s, q = ooc.sum(x, axis=2), ooc.sum(ooc.exp(x), axis=2)
        np.testing.assert_allclose(q.to_numpy(), np.exp(clean).sum(2), rtol=1e-5)
        np.testing.assert_allclose(s.to_numpy(), clean.sum(2), rtol=1e-5, atol=1e-4)
        io = ooc.io_stats()
    assert io.bytes_read < 1.25 * clean.nbytes


def test_tiles_cut_every_other_axis_before_the_slots_of_joined_sums():
    """A stack of sums asks for its slot axis whole (``grain``): the tile planner
    cuts the slots only when no other axis can be cut."""
    from types import SimpleNamespace

    from gradpipe.ooc.ops._reduce import Sum
    from gradpipe.ooc.planning._budget import plan_tiles
    from gradpipe.ooc.planning._grain import loop_grain

    shape = (64, 48, 2, 256)  # slots on axis 2, just before the summed axis
    stack = SimpleNamespace(shape=shape, dtype=np.dtype(np.float32), grain=(1, 1, 2, 1))
    op = Sum((3,), False, None)
    out_shape, red_shape = op.output_shape(shape), op.reduction_shape(shape)
    grain = loop_grain(op, [stack], [shape], out_shape, red_shape)
    assert grain == (1, 1, 2, 1)

    def held(tile):
        return 4 * int(np.prod(tile))

    tile = plan_tiles(
        (*out_shape, *red_shape), held, ooc.MemoryBudget(64 * 2**10), what="t", grain=grain
    )
    assert tile[2] == 2 and held(tile) <= 64 * 2**10


def test_many_sums_of_the_same_data_join_only_as_many_as_memory_holds(data):
    """Forty sums, each 1/36 of the budget: a joined result is held whole, so a pass
    joins at most an eighth of the budget's worth of them; every sum is right."""
    clean = np.nan_to_num(data)
    with ooc.MemoryBudget(BUDGET):
        x = ooc.DiskArray.from_numpy(clean)
        sums = [ooc.sum(x * float(k), axis=2) for k in range(40)]
        got = [s.to_numpy() for s in sums]
    for k, g in enumerate(got):
        np.testing.assert_allclose(g, k * clean.sum(2), rtol=1e-5, atol=1e-3)


# ---------------------------------------------------------------- a write into what a sum reads


@pytest.fixture
def table(rng):
    """The issue's set-up: float32 data of 400 KiB under a 1 MiB budget."""
    return rng.standard_normal((400, 256)).astype(np.float32)


def test_a_write_into_a_fused_result_computes_its_waiting_sum_first(table):
    with ooc.MemoryBudget(2**20):
        c = ooc.DiskArray.from_numpy(table) * 2.0
        s = ooc.sum(c, axis=0)
        assert pending(s)
        c[...] = 0.0  # stores c, then changes the stored copy: none of the files under c
        np.testing.assert_allclose(s.to_numpy(), (2 * table).sum(0), rtol=1e-5, atol=1e-4)
        assert float(c[3, 4]) == 0.0


def test_update_of_a_fused_result_computes_its_waiting_sum_first(table):
    with ooc.MemoryBudget(2**20):
        c = ooc.DiskArray.from_numpy(table) * 2.0
        s = ooc.sum(c, axis=0)
        ooc.update_(c, 1.0)
        np.testing.assert_allclose(s.to_numpy(), (2 * table).sum(0), rtol=1e-5, atol=1e-4)


def test_a_write_into_a_slice_computes_its_waiting_sum_first(table):
    with ooc.MemoryBudget(2**20):
        x = ooc.DiskArray.from_numpy(table)
        c = x[100:300]
        s = ooc.sum(c, axis=0)
        c[:50] = -4.0
        np.testing.assert_allclose(s.to_numpy(), table[100:300].sum(0), rtol=1e-5, atol=1e-4)
        np.testing.assert_array_equal(x.to_numpy(), table)  # a slice written is a copy


def test_a_fused_result_written_under_jit_or_through_a_mask_keeps_its_sums(table):
    """The other ways into a fused result: ``update_`` inside a compiled call, a
    boolean mask, a transpose's row; and sums joined over ``c`` and its data."""
    want = (2 * table).sum(0)
    with ooc.MemoryBudget(2**20):
        x = ooc.DiskArray.from_numpy(table)
        c = x * 2.0
        s = ooc.sum(c, axis=0)
        jax.jit(lambda c: ooc.update_(c, c * 0.0))(c)
        np.testing.assert_allclose(s.to_numpy(), want, rtol=1e-5, atol=1e-4)

        c = x * 2.0
        s, alone = ooc.sum(c, axis=0), ooc.sum(x, axis=0)  # would be joined
        c[c > 0] = 0.0
        np.testing.assert_allclose(s.to_numpy(), want, rtol=1e-5, atol=1e-4)
        np.testing.assert_allclose(alone.to_numpy(), table.sum(0), rtol=1e-5, atol=1e-4)

        t = x.T
        s = ooc.sum(t, axis=1)
        t[0] = 7.0
        np.testing.assert_allclose(s.to_numpy(), table.sum(0), rtol=1e-5, atol=1e-4)


def test_a_stored_fused_result_written_later_keeps_its_sums(table):
    with ooc.MemoryBudget(2**20):
        c = ooc.DiskArray.from_numpy(table) * 2.0
        s = ooc.sum(c, axis=0)
        ooc.persist(c)  # stored after the sum was asked for
        c[...] = 0.0
        np.testing.assert_allclose(s.to_numpy(), (2 * table).sum(0), rtol=1e-5, atol=1e-4)


# ---------------------------------------------------------------- joined sums, alone


def test_joined_sums_hold_at_most_an_eighth_of_the_budget_in_memory(rng):
    """Twelve waiting sums of a 32nd of the budget each: the results held in memory
    stay within the 8th of the budget they may take together; the rest go to disk."""
    data = rng.standard_normal((64, 8192)).astype(np.float32)
    budget = 2**20
    with ooc.MemoryBudget(budget):
        x = ooc.DiskArray.from_numpy(data)
        gc.collect()
        before = _held_results.held_bytes()
        sums = [ooc.sum(x * float(k), axis=0) for k in range(12)]
        assert sums[0].nbytes == budget // 32 and all(pending(s) for s in sums)
        got = [s.to_numpy() for s in sums]
        assert _held_results.held_bytes() - before <= budget // 8
    for k, g in enumerate(got):
        np.testing.assert_allclose(g, k * data.sum(0), rtol=1e-5, atol=1e-3)


@pytest.mark.parametrize("x64", [False, True], ids=["x64-off", "x64-on"])
def test_a_mean_of_booleans_joined_with_a_float32_mean_is_what_it_is_alone(table, x64):
    """The float64 mean of a mask is divided in float64, not in the float32 the
    joined pass sums in: exact, as alone."""
    with jax.enable_x64(x64), ooc.MemoryBudget(2**20):
        x = ooc.DiskArray.from_numpy(table)
        share, mean = ooc.mean(x > 0, axis=0), ooc.mean(x, axis=0)
        got_share = share.to_numpy()
        assert not pending(mean)  # joined
        got_mean = mean.to_numpy()
        alone = ooc.mean(x > 0, axis=0).to_numpy()
    assert got_share.dtype == alone.dtype == (table > 0).mean(0).dtype
    np.testing.assert_array_equal(got_share, alone)
    np.testing.assert_array_equal(got_share, (table > 0).mean(0))
    np.testing.assert_allclose(got_mean, table.mean(0), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("x64", [False, True], ids=["x64-off", "x64-on"])
def test_sums_of_integers_join_and_are_exact(table, x64):
    """Integers of up to 32 bits join a float sum's pass (in float64 where float32
    would round their partial sums): their sums and means are exact, as alone."""
    ints = (table * 1e6).astype(np.int32)  # sums up to 2**31 * 400: not exact in float32
    with jax.enable_x64(x64), ooc.MemoryBudget(2**20):
        n = ooc.DiskArray.from_numpy(ints)
        s, m, f = ooc.sum(n, axis=0), ooc.mean(n, axis=0), ooc.sum(n * 0.5, axis=0)
        got = [s.to_numpy()]
        assert not pending(m) and not pending(f)  # one pass
        got += [m.to_numpy(), f.to_numpy()]
        alone = [ooc.sum(n, axis=0).to_numpy(), ooc.mean(n, axis=0).to_numpy()]
        as_jax = jnp.sum(jnp.asarray(ints), axis=0).dtype
    assert got[0].dtype == alone[0].dtype == as_jax
    np.testing.assert_array_equal(got[0], alone[0])
    np.testing.assert_array_equal(got[1], alone[1])
    np.testing.assert_array_equal(got[1], ints.mean(0))
    np.testing.assert_allclose(got[2], 0.5 * ints.astype(np.float64).sum(0), rtol=1e-6)


# ---------------------------------------------------------------- random programs

#: Arrays of each dtype a joined pass takes, read from one float32 DiskArray ``x``
#: of whole numbers in [-100, 100]: as a DiskArray, and as NumPy of its data ``d``.
_SOURCES = {
    "bool": (lambda x: x > 3.0, lambda d: d > 3.0),
    "int8": (lambda x: ooc.astype(x, ooc.int8), lambda d: d.astype(np.int8)),
    "uint16": (
        lambda x: ooc.astype(ooc.abs(x), ooc.uint16),
        lambda d: np.abs(d).astype(np.uint16),
    ),
    "int32": (
        lambda x: ooc.astype(x * 1000.0, ooc.int32),
        lambda d: (d * np.float32(1000.0)).astype(np.int32),
    ),
    "float32": (lambda x: x * 0.37, lambda d: d * np.float32(0.37)),
    "float64": (
        lambda x: ooc.astype(x, ooc.float64) * 0.1,
        lambda d: d.astype(np.float64) * 0.1,
    ),
}
_SUMS = {
    "sum": lambda a, axis: ooc.sum(a, axis=axis),
    "mean": lambda a, axis: ooc.mean(a, axis=axis),
    "sum in float64": lambda a, axis: ooc.sum(a, axis=axis, dtype=ooc.float64),
}


@pytest.mark.parametrize("x64", [False, True], ids=["x64-off", "x64-on"])
@pytest.mark.parametrize("seed", range(6))
def test_joined_sums_of_mixed_dtypes_equal_each_computed_alone(seed, x64):
    """Random sums and means of booleans, integers and floats of one array, asked for
    together (so they share passes) and then each alone. Each joined result has the
    dtype it has alone; a result of booleans or integers is equal to it bit for bit
    (a mean of them too); a float one is within the rounding of its own
    accumulator (a float64 result carries no float32 rounding)."""
    rng = np.random.default_rng(seed)
    with jax.enable_x64(x64):
        for _ in range(5):
            _joined_program(rng)


def _joined_program(rng: np.random.Generator) -> None:
    shape = (int(rng.integers(60, 120)), int(rng.integers(4, 16)), int(rng.integers(8, 32)))
    axis = [0, 2, (0, 2), (1, 2)][int(rng.integers(4))]
    data = np.round(rng.standard_normal(shape) * 20).clip(-100, 100).astype(np.float32)
    k = int(rng.integers(2, 8))
    sources = rng.choice(list(_SOURCES), size=k, p=[0.25, 0.1, 0.1, 0.1, 0.3, 0.15])
    hows = rng.choice(list(_SUMS), size=k, p=[0.35, 0.45, 0.2])
    program = [(str(s), str(h)) for s, h in zip(sources, hows)]
    # under 1 MiB, so that the chains stay whole (`_chain.CUT_BUDGET`) and all read x
    with ooc.MemoryBudget(2**19):
        x = ooc.DiskArray.from_numpy(data)

        def make(source: str, how: str):
            return _SUMS[how](_SOURCES[source][0](x), axis)

        results = [make(*step) for step in program]
        waiting = [r for r in results if pending(r)]
        order = rng.permutation(len(results))
        got = {int(i): results[i].to_numpy() for i in order[:1]}
        if len(waiting) > 1:
            assert any(not pending(r) for r in waiting if r is not results[order[0]]), program
        got.update({int(i): results[i].to_numpy() for i in order[1:]})
        alone = [make(*step).to_numpy() for step in program]
    terms = math.prod(shape[a] for a in np.atleast_1d(axis))
    for i, (source, how) in enumerate(program):
        joined, want = got[i], alone[i]
        assert joined.dtype == want.dtype, (program, i)
        values = _SOURCES[source][1](data)
        if values.dtype.kind in "biu":
            np.testing.assert_array_equal(joined, want, err_msg=f"{program}, {i}")
            continue
        acc = np.float64 if np.float64 in (values.dtype, want.dtype) else np.float32
        bound = np.abs(values.astype(np.float64)).sum(axis=axis) * terms * np.finfo(acc).eps
        if how == "mean":
            bound /= terms
        assert np.all(np.abs(joined - want) <= bound), (program, i)
