"""Small results held in memory files: no disk I/O, the same values, bounded memory."""

import gc
import pickle

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gradpipe import ooc
from gradpipe.ooc.execution import _held_results

BUDGET = 4 * 2**20  # held: results of at most 128 KiB each, 512 KiB in all


@pytest.fixture
def X(rng, tmp_path):
    data = rng.standard_normal((16384, 32)).astype(np.float32)  # 2 MiB on disk
    ooc.DiskArray.from_numpy(data, path=tmp_path / "x.gpa")
    return data, ooc.DiskArray.open(tmp_path / "x.gpa")


def test_a_product_with_a_vector_is_held_in_memory_and_written_nowhere(X, rng):
    data, x = X
    gc.collect()
    w = rng.standard_normal(32).astype(np.float32)
    wd = ooc.DiskArray.from_numpy(w)  # on disk: the product is a pass of its own
    with ooc.MemoryBudget(BUDGET):
        before = ooc.io_stats()
        p = x @ wd  # 64 KiB: a small result
        io = ooc.io_stats() - before
        assert io.bytes_written == 0 and io.bytes_read == data.nbytes + w.nbytes
        assert not p._file.on_disk and p.path.startswith("<memory")
        np.testing.assert_allclose(p.to_numpy(), data @ w, rtol=1e-5, atol=1e-4)
        y = p * 2.0 + 1.0  # read like any array, fused
        np.testing.assert_allclose(y.to_numpy(), 2 * (data @ w) + 1, rtol=1e-5, atol=2e-4)
        saved = p.save(x.path + ".p.gpa")  # and saved to disk like any other
        np.testing.assert_array_equal(saved.to_numpy(), p.to_numpy())


def test_a_product_with_a_vector_in_memory_is_computed_where_it_is_read(X, rng):
    data, x = X
    w = rng.standard_normal(32).astype(np.float32)
    with ooc.MemoryBudget(BUDGET):
        before = ooc.io_stats()
        p = x @ w  # a block map over x's rows: made when read, fused with what reads it
        assert ooc.io_stats() - before == ooc.IOStats(0, 0, 0, 0)
        y = ooc.sum(ooc.tanh(p * 2.0))
        io = ooc.io_stats() - before
        assert io.bytes_written == 0 and io.bytes_read == data.nbytes
    np.testing.assert_allclose(y, np.tanh(2 * (data @ w)).sum(), rtol=1e-4)


def test_the_loss_step_writes_nothing_and_holds_nothing(X, rng):
    data, x = X
    gc.collect()
    y = ooc.DiskArray.from_numpy(rng.standard_normal(16384).astype(np.float32))

    def loss(p, x, y):
        return ooc.mean(ooc.square(x @ p["w"] + p["b"] - y))

    params = {"w": jnp.asarray(rng.standard_normal(32).astype(np.float32)), "b": jnp.float32(0.5)}
    with ooc.MemoryBudget(BUDGET):
        step = jax.jit(jax.value_and_grad(loss))
        step(params, x, y)
        before = ooc.io_stats()
        value, grads = step(params, x, y)
        assert (ooc.io_stats() - before).bytes_written == 0
        plan = ooc.explain(jax.value_and_grad(loss), params, x, y)
    assert "holds" not in str(plan)  # the product is a step of the loss's pass
    assert len(plan.stages) == 1 and plan.stages[0].phase == "value and gradient"
    want_value, want_grads = jax.value_and_grad(
        lambda p: jnp.mean(jnp.square(jnp.asarray(data) @ p["w"] + p["b"] - jnp.asarray(y)))
    )(params)
    np.testing.assert_allclose(value, want_value, rtol=1e-5)
    np.testing.assert_allclose(grads["w"], want_grads["w"], rtol=1e-4, atol=1e-5)


def test_held_results_take_at_most_their_share_and_are_freed_with_their_arrays(X, rng):
    data, x = X
    gc.collect()
    start = _held_results.held_bytes()  # (what other tests' live arrays hold)
    fit = (int(BUDGET * _held_results.TOTAL_SHARE) - start) // (128 * 1024)
    assert fit >= 2
    with ooc.MemoryBudget(BUDGET):
        w = rng.standard_normal((32, 2)).astype(np.float32)  # 128 KiB products
        kept = [x @ ooc.DiskArray.from_numpy(w + k) for k in range(fit + 2)]
        held = [not a._file.on_disk for a in kept]
        assert held == [True] * fit + [False] * 2  # 512 KiB in memory, then on disk
        assert _held_results.held_bytes() - start == fit * 128 * 1024
        wide = x @ ooc.DiskArray.from_numpy(rng.standard_normal((32, 4)).astype(np.float32))
        assert wide._file.on_disk  # 256 KiB: too big
        again = x @ ooc.DiskArray.from_numpy(w)  # now on disk: where it lives changes no value
        assert again._file.on_disk
        np.testing.assert_array_equal(again.to_numpy(), kept[0].to_numpy())
        for k, a in enumerate(kept):
            np.testing.assert_allclose(a.to_numpy(), data @ (w + k), rtol=1e-5, atol=1e-3)
    del kept, a
    gc.collect()
    assert _held_results.held_bytes() == start


def test_a_held_result_pickles_like_any_scratch_array(X, rng):
    _, x = X
    with ooc.MemoryBudget(BUDGET):
        p = x @ ooc.DiskArray.from_numpy(rng.standard_normal(32).astype(np.float32))
    with pytest.raises(TypeError, match="scratch"):
        pickle.dumps(p)


def test_gradients_of_small_disk_parameters_are_held_in_memory(X, rng):
    data, x = X
    gc.collect()
    w = ooc.DiskArray.from_numpy(rng.standard_normal((32, 1)).astype(np.float32))
    with ooc.MemoryBudget(BUDGET):
        before = ooc.io_stats()
        g = jax.grad(lambda w: ooc.sum(ooc.tanh(x @ w)))(w)
        got = g.to_numpy()
        assert (ooc.io_stats() - before).bytes_written == 0
    assert not g._file.on_disk
    want = jax.grad(lambda w: jnp.sum(jnp.tanh(jnp.asarray(data) @ w)))(jnp.asarray(w.to_numpy()))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3)


def test_without_a_memory_file_to_be_had_a_small_result_goes_to_disk(X, rng, monkeypatch):
    data, x = X

    def no_more(name, flags=0):
        raise OSError(24, "Too many open files")

    monkeypatch.setattr("os.memfd_create", no_more)
    w = rng.standard_normal(32).astype(np.float32)
    with ooc.MemoryBudget(BUDGET):
        p = x @ ooc.DiskArray.from_numpy(w)
    assert p._file.on_disk
    np.testing.assert_allclose(p.to_numpy(), data @ w, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("make", ["arange", "linspace", "eye"])
def test_a_small_created_array_is_held_in_memory_and_a_large_one_written(make):
    """`arange`, `linspace` and `eye` of a small size (a loss's classes) make no file
    (a training step would create and remove one each call); a large one is written
    to disk; both hold the values NumPy gives and are written to like any array."""
    small, large = 16, (256 if make == "eye" else 65536)  # (large: 256 KiB)
    build = {
        "arange": lambda n: (ooc.arange(n, dtype=np.int32), np.arange(n, dtype=np.int32)),
        "linspace": lambda n: (ooc.linspace(0.0, 1.0, n), np.linspace(0.0, 1.0, n)),
        "eye": lambda n: (ooc.eye(n, dtype=np.float32), np.eye(n, dtype=np.float32)),
    }[make]
    with ooc.MemoryBudget(BUDGET):
        before = ooc.io_stats()
        got, want = build(small)
        assert ooc.io_stats() - before == ooc.IOStats(0, 0, 0, 0)
        assert not got._file.on_disk and got.path.startswith("<memory")
        np.testing.assert_array_equal(got.to_numpy(), want.astype(got.dtype))
        got[1] = 7  # written in place, as any array
        want[1] = 7
        np.testing.assert_array_equal(got.to_numpy(), want.astype(got.dtype))
        got, want = build(large)  # over the share of the budget one result may hold
        assert got._file.on_disk
        np.testing.assert_array_equal(got.to_numpy(), want.astype(got.dtype))
