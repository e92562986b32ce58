"""A take along one axis by an index in memory is read through by its consumer
(`PickedRows`): no copy written, the source read only where the consumer needs it."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gradpipe import ooc
from gradpipe.ooc.planning._chain import is_chain
from gradpipe.ooc.storage._picked_rows import PickedRows

BUDGET = 2 * 2**20
SHAPE = (400, 32, 64)  # rows of 8 KiB along axis 0
ROW = 32 * 64 * 4


@pytest.fixture
def data(rng):
    return rng.standard_normal(SHAPE).astype(np.float32)


def months(n_years=4, days=30):
    """The days of month m in every year (runs of ``days`` neighbours)."""
    return [
        np.concatenate([y * 12 * days + m * days + np.arange(days) for y in range(n_years)])
        for m in range(12)
    ]


def picked(a) -> bool:
    f = a._file
    return is_chain(f) and isinstance(f.node.sources[0], PickedRows)


@pytest.mark.parametrize("axis", [0, 1, 2])
def test_runs_are_read_through_with_the_values_of_numpy(data, axis):
    n = SHAPE[axis]
    index = np.r_[np.arange(n // 4, n // 2), np.arange(n - 3, n), np.arange(-n // 2, -n // 2 + 5)]
    with ooc.MemoryBudget(BUDGET):
        x = ooc.DiskArray.from_numpy(data)
        y = ooc.take(x, index, axis=axis)
        assert picked(y)
        np.testing.assert_array_equal(y.to_numpy(force=True), np.take(data, index, axis=axis))


def test_a_grouped_mean_reads_each_row_once_and_writes_nothing(data):
    index = months(n_years=1, days=SHAPE[0] // 12)[3]  # one month's days
    with ooc.MemoryBudget(BUDGET):
        x = ooc.DiskArray.from_numpy(data)
        ooc.reset_io_stats()
        m = ooc.mean(ooc.take(x, index, axis=0), axis=0)
        io = ooc.io_stats()
        np.testing.assert_allclose(m.to_numpy(), data[index].mean(0), rtol=1e-6, atol=1e-7)
    assert io.bytes_written <= index.nbytes  # the index's file, not a copy of rows
    assert io.bytes_read <= len(index) * ROW + 2 * index.nbytes


def test_a_repeated_row_is_read_once_per_read(data):
    """A climatology expanded to every day: each read fetches the distinct rows only."""
    clim, codes = data[:12], np.repeat(np.arange(12), 30)
    with ooc.MemoryBudget(BUDGET):
        c = ooc.DiskArray.from_numpy(clim)
        days = ooc.DiskArray.from_numpy(data[:360])
        ooc.reset_io_stats()
        anomaly = ooc.sum(days - ooc.take(c, codes, axis=0), axis=0)
        io = ooc.io_stats()
        np.testing.assert_allclose(
            anomaly.to_numpy(), (data[:360] - clim[codes]).sum(0), rtol=1e-4, atol=1e-4
        )
    assert io.bytes_written <= codes.nbytes
    # the days once, and at most two distinct months per tile of the climatology
    tiles = io.tiles_read
    assert io.bytes_read <= days.nbytes + 2 * tiles * ROW + codes.nbytes


def test_explain_shows_the_take_inside_the_pass(data):
    with ooc.MemoryBudget(BUDGET):
        x = ooc.DiskArray.from_numpy(data)
        report = ooc.explain(lambda x: ooc.sum(ooc.take(x, np.arange(100, 300), axis=0) * 2), x)
    text = str(report)
    assert "multiply(take(x0, 200 of 400 along axis 0), 2" in text, text
    assert "1 passes" in text


def test_a_scattered_index_of_short_rows_is_gathered_into_a_file(rng):
    a = rng.standard_normal((2000, 8)).astype(np.float32)
    index = rng.permutation(2000)[:500]
    with ooc.MemoryBudget(BUDGET):
        y = ooc.take(ooc.DiskArray.from_numpy(a), index, axis=0)
        assert not is_chain(y._file)
        np.testing.assert_array_equal(y.to_numpy(), a[index])


def test_out_of_bounds_refused_as_numpy(data):
    with ooc.MemoryBudget(BUDGET):
        x = ooc.DiskArray.from_numpy(data)
        with pytest.raises(IndexError, match="index 400 is out of bounds for axis 0 with size 400"):
            ooc.take(x, np.arange(200, 401), axis=0)


def test_writes_into_the_source_or_the_result_keep_both_right(data):
    index = np.arange(50, 250)
    with ooc.MemoryBudget(BUDGET):
        x = ooc.DiskArray.from_numpy(data)
        y = ooc.take(x, index, axis=0)
        x[60] = 7.0  # y keeps the values it was taken from
        np.testing.assert_array_equal(y.to_numpy(), data[index])
        y[0] = -1.0  # written first, then changed; x is not touched
        expected = data[index].copy()
        expected[0] = -1.0
        np.testing.assert_array_equal(y.to_numpy(), expected)
        assert float(x[50, 0, 0]) == data[50, 0, 0] and float(x[60, 0, 0]) == 7.0


@pytest.mark.parametrize("jit", [False, True])
def test_gradients_equal_jax(data, jit):
    codes = np.repeat(np.arange(12), 30)
    w = jnp.asarray(np.linspace(-1, 1, SHAPE[2], dtype=np.float32))

    def loss(c, w, xp):
        anomaly = xp.take(c, codes, axis=0) * w
        return xp.sum(anomaly * anomaly)

    run = jax.jit if jit else (lambda f: f)
    with ooc.MemoryBudget(BUDGET):
        c = ooc.DiskArray.from_numpy(data[:12])
        value, (gc, gw) = run(jax.value_and_grad(lambda c, w: loss(c, w, ooc), (0, 1)))(c, w)
        want, (wc, ww) = jax.value_and_grad(lambda c, w: loss(c, w, jnp), (0, 1))(
            jnp.asarray(data[:12]), w
        )
        np.testing.assert_allclose(float(value), float(want), rtol=1e-5)
        np.testing.assert_allclose(gc.to_numpy(), np.asarray(wc), rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(np.asarray(gw), np.asarray(ww), rtol=1e-4)


def test_rows_of_a_fused_result_are_computed_where_read(data):
    """A take from a result still computed on read (``exp(x)``) reads the chain at
    the rows it names: nothing written, the values of NumPy."""
    with ooc.MemoryBudget(BUDGET):
        x = ooc.DiskArray.from_numpy(data)
        ooc.reset_io_stats()
        y = ooc.sum(ooc.take(ooc.exp(x), np.arange(100, 300), axis=0), axis=0)
        assert ooc.io_stats().bytes_written <= 200 * 8  # the index's file only
        np.testing.assert_allclose(y.to_numpy(), np.exp(data[100:300]).sum(0), rtol=1e-5)
