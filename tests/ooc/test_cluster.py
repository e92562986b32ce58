"""Passes on a dask.distributed cluster: `ooc.executor(client)`.

A `LocalCluster` of two worker processes on loopback runs the tile work; the same
programs run in this process give the reference. Elementwise results and sums in the
same order are compared bit for bit: the workers run the same NumPy kernels on the
same tiles, on this machine's CPU. Products are not: a BLAS ``gemm`` sums in an
order that depends on its thread count (dask starts workers with one BLAS thread,
this process uses one per core) and on the CPU, so they, and sums whose partial
sums are grouped by task, are compared to the rounding bounds of `rounding`.
"""

import math
import os
import signal
import sys

import cloudpickle
import jax
import numpy as np
import pytest
from rounding import assert_within, gamma, product_reference

from gradpipe import ooc

distributed = pytest.importorskip("distributed")

BUDGET = 256 * 2**10


@pytest.fixture(scope="module")
def client():
    # the test module's operations (below) go to the workers by value
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    cluster = distributed.LocalCluster(
        n_workers=2,
        threads_per_worker=1,
        processes=True,
        host="127.0.0.1",
        dashboard_address=None,
        worker_dashboard_address=None,
    )
    with cluster, distributed.Client(cluster) as c:
        c.wait_for_workers(2)
        yield c
    cloudpickle.unregister_pickle_by_value(sys.modules[__name__])


def value(x):
    return x.to_numpy(force=True) if hasattr(x, "to_numpy") else np.asarray(x)


def arrays(rng):
    a = rng.standard_normal((512, 384)).astype(np.float32)
    b = rng.standard_normal((384, 256)).astype(np.float32)
    c = rng.standard_normal((256,)).astype(np.float32)
    return a, b, c


def loss(a, b, c):
    return ooc.mean(ooc.tanh(a @ b + c) * 2.0)


def run_both(client, fn, *xs):
    """``fn(*disk arrays)`` in this process and on the cluster, as NumPy, and the
    `ooc.explain` plan of the run in this process (the cluster runs the same tiles)."""
    with ooc.MemoryBudget(BUDGET):
        disk = [ooc.DiskArray.from_numpy(x) for x in xs]
        plan = ooc.explain(fn, *disk, store_results=False)
        here = jax.tree.map(value, plan.result)
        with ooc.executor(client):
            there = jax.tree.map(value, fn(*disk))
    return here, there, plan


def stage_of(plan, name: str):
    """The forward pass ``name`` of ``plan`` (its tile, and its number of tiles): a
    loss under differentiation computes its gradient in the same pass."""
    phases = ("forward", "value and gradient")
    (stage,) = [s for s in plan.stages if s.name == name and s.phase in phases]
    return stage


def test_block_maps_equal_one_process_bit_for_bit_and_products_to_rounding(client, rng):
    a, b, _ = arrays(rng)

    def fn(x, y):
        chain = ooc.exp(ooc.sin(x) * 0.5) - x
        return {
            "chain": chain.persist(),
            "product": x @ y,
            "row sums": ooc.sum(chain, axis=1),
            "column max": ooc.max(x, axis=0),
        }

    here, there, _ = run_both(client, fn, a, b)
    # no BLAS: the same NumPy kernels on the same tiles, summed in the same order
    for key in ("chain", "row sums", "column max"):
        np.testing.assert_array_equal(there[key], here[key], err_msg=key)
    # gemm's order of summation differs with its thread count: each product is
    # within gamma(K) |a| @ |b| of the exact one (K = 384), so of the other to twice
    # that. A wrong tile or a missing block is off by O(1) or more.
    want, bound = product_reference(a, b)
    assert_within(here["product"], want, bound, "product in this process")
    assert_within(there["product"], want, bound, "product on the cluster")
    assert_within(there["product"], here["product"], 2 * bound, "cluster against one process")


def test_a_full_reduction_is_split_across_tasks_and_differs_only_in_the_last_bits(client, rng):
    a, _, _ = arrays(rng)
    (s_here, m_here), (s_there, m_there), plan = run_both(
        client, lambda x: (ooc.sum(x * x), ooc.mean(ooc.tanh(x))), a
    )
    # Each tile's partial sum is the same in both (same tiles, same NumPy kernel);
    # only their grouping differs: in order here, task by task there. A sum of the
    # n partials p_i in any grouping is within gamma(n - 1) sum |p_i| of their exact
    # sum, and sum |p_i| <= (1 + gamma(N)) sum |terms| (N terms in all).
    big = 1 + gamma(a.size)
    total = np.sum(np.square(a), dtype=np.float64)  # sum |terms|: x * x >= 0
    stage = stage_of(plan, "sum")
    assert stage.tiles > 1
    bound = 2 * gamma(stage.tiles) * big * total
    assert_within(s_there, s_here, bound, "sum of squares")
    # and it is the sum: a term goes through at most (tile size - 1) additions in
    # its tile, in any order, and (tiles - 1) more
    depth = math.prod(stage.tile) + stage.tiles
    assert_within(s_here, total, (gamma(depth) + gamma(a.size, np.float64)) * total, "sum")
    # the mean divides each sum by N once (a relative error u each); |tanh| <= 1
    n = stage_of(plan, "mean").tiles
    assert n > 1
    u = gamma(1)
    assert_within(m_there, m_here, (2 * gamma(n) + 2 * u) * big, "mean of tanh")


#: The gradient tests' inputs lie on a grid of 1/32 in [-1/4, 1/4]: each term of
#: ``a @ b`` is a multiple of 2**-10 and every partial sum is at most 384 / 16 in
#: size, so all of them are exact in float32 (24 bits), whatever the order of the
#: sums. The forward values are then the same bits in both runs, and the bounds
#: below are those of the backward pass alone.
def grid_arrays(rng):
    a = (rng.integers(-8, 9, (512, 384)) / 32).astype(np.float32)
    b = (rng.integers(-8, 9, (384, 256)) / 32).astype(np.float32)
    c = rng.standard_normal((256,)).astype(np.float32)
    assert np.array_equal(a @ b, a.astype(np.float64) @ b.astype(np.float64))
    return a, b, c


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
def test_gradients_on_the_cluster_equal_one_process_to_rounding(client, rng, jit):
    xs = a, b, _ = grid_arrays(rng)
    grad = jax.value_and_grad(loss, argnums=(0, 1, 2))
    if jit:
        grad = jax.jit(grad)
    (l_here, g_here), (l_there, g_there), plan = run_both(client, grad, *xs)
    size, u = a.shape[0] * b.shape[1], gamma(1)
    # the loss: N terms 2 tanh(z), at most 2 in size, whose tile partial sums are
    # grouped by task, then divided by N (see the test above)
    n = stage_of(plan, "mean").tiles
    assert n > 1
    assert_within(l_there, l_here, (2 * gamma(n) + 2 * u) * 2 * (1 + gamma(size)), "loss")
    # G = dL/dz = 2 (1 - tanh(z)**2) / N: the same bits in both runs, and at most
    # (2 / N)(1 + 8u) in size (1 - tanh**2 <= 1, and a few roundings). The products'
    # gradients are products with it, dA = G @ B.T of inner length 256 and
    # dB = A.T @ G of inner length 512, each within gamma(K) |G| @ |B.T| (resp.
    # |A.T| @ |G|) of the exact one; the bias gradient sums G over the 512 rows, in
    # task groups. A wrong or missing tile is off by far more.
    g_max = 2 / size * (1 + 8 * u)
    bound = 2 * gamma(b.shape[1]) * g_max * np.sum(np.abs(b), axis=1, dtype=np.float64)
    assert_within(g_there[0], g_here[0], bound[None, :], "dL/da")
    bound = 2 * gamma(a.shape[0]) * g_max * np.sum(np.abs(a), axis=0, dtype=np.float64)
    assert_within(g_there[1], g_here[1], bound[:, None], "dL/db")
    assert_within(g_there[2], g_here[2], 2 * gamma(a.shape[0]) * g_max * a.shape[0], "dL/dc")


def test_the_tile_work_runs_on_both_workers(client, rng):
    a, b, _ = arrays(rng)
    with ooc.MemoryBudget(BUDGET), distributed.get_task_stream(client=client) as stream:
        x, y = ooc.DiskArray.from_numpy(a), ooc.DiskArray.from_numpy(b)
        with ooc.executor(client):
            before = ooc.io_stats()
            (x @ y).persist()
            counted = ooc.io_stats() - before
    ours = [t for t in stream.data if t["key"].startswith("gradpipe-matmul")]
    assert len({t["worker"] for t in ours}) == 2, ours
    # the workers' reads and writes are counted in this process
    assert counted.bytes_written >= a.shape[0] * b.shape[1] * 4
    assert counted.bytes_read >= a.nbytes + b.nbytes


# ---------------------------------------------------------------- failures


class KillsItsWorkerOnce(ooc.BlockParallelOp):
    """2 * x, except that the first worker to compute a block kills its own process
    (SIGKILL: no cleanup), after noting whether the result was visible yet."""

    def __init__(self, marker, result):
        self.marker, self.result = marker, result

    def output_shape(self, s):
        return s

    def reduction_shape(self, s):
        return ()

    def index_map(self, out_r, red_r, s):
        return (out_r,)

    def forward_block(self, x):
        try:
            distributed.get_worker()
        except ValueError:
            return 2 * x  # not on a worker
        try:
            fd = os.open(self.marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            return 2 * x
        os.write(fd, b"visible" if os.path.exists(self.result) else b"hidden")
        os.close(fd)
        os.kill(os.getpid(), signal.SIGKILL)
        raise AssertionError("unreachable")


class FailsOnWorkers(KillsItsWorkerOnce):
    def forward_block(self, x):
        raise ValueError("a block that cannot be computed")


kills_its_worker_once = ooc.make_op(KillsItsWorkerOnce)
fails_on_workers = ooc.make_op(FailsOnWorkers)


def test_a_worker_killed_mid_pass_is_replaced_and_the_result_is_right(client, rng, tmp_path):
    x = rng.standard_normal((1024, 64)).astype(np.float32)
    result = tmp_path / "result.gpa"
    marker = tmp_path / "killed"
    with ooc.MemoryBudget(64 * 2**10):
        d = ooc.DiskArray.from_numpy(x)
        with ooc.executor(client):
            # a pass of tiles, then a chain saved by the workers
            y = kills_its_worker_once(d, marker=str(marker), result=str(result)) + 1.0
            saved = y.save(result)
    assert marker.read_bytes() == b"hidden"  # nothing under the name while it ran
    np.testing.assert_array_equal(saved.to_numpy(force=True), 2 * x + 1)
    np.testing.assert_array_equal(ooc.DiskArray.open(result).to_numpy(force=True), 2 * x + 1)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["killed", "result.gpa"]
    client.wait_for_workers(2, timeout=60)  # the nanny started a new worker


def test_a_failing_task_raises_its_error_and_leaves_no_file(client, rng, tmp_path):
    x = rng.standard_normal((256, 64)).astype(np.float32)
    where = {"marker": str(tmp_path / "unused"), "result": str(tmp_path / "unused")}
    with ooc.MemoryBudget(64 * 2**10):
        d = ooc.DiskArray.from_numpy(x)
        chain = ooc.tanh(d) * 3.0
        with ooc.executor(client):
            with pytest.raises(ValueError, match="cannot be computed"):
                fails_on_workers(chain, **where)
            with pytest.raises(ValueError, match="cannot be computed"):
                (fails_on_workers(d, **where) + 1).save(tmp_path / "never.gpa")
    assert list(tmp_path.iterdir()) == []


def test_executor_none_runs_here_and_the_options_are_checked(client):
    with ooc.executor(None) as ex:
        assert ex is None
    with pytest.raises(ValueError, match="tasks_per_thread"):
        ooc.DaskExecutor(client, tasks_per_thread=0)
    ex = ooc.DaskExecutor(client, tasks_per_thread=1)
    with ooc.executor(ex) as got:
        assert got is ex


def test_a_pass_on_the_cluster_shows_progress_when_asked(client, rng, capsys):
    a = rng.standard_normal((512, 384)).astype(np.float32)
    with ooc.MemoryBudget(BUDGET):
        x = ooc.DiskArray.from_numpy(a)
        ooc.set_progress(True)
        try:
            with ooc.executor(client):
                (x @ x.T).persist()
        finally:
            ooc.set_progress(False)
    assert "forward on the cluster" in capsys.readouterr().err


def _restart_peak() -> int:
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")  # the peak (VmHWM) restarts from the current RSS
    return _status_bytes("VmRSS:")


def _status_bytes(key: str) -> int:
    with open("/proc/self/status") as fh:
        line = next(line for line in fh if line.startswith(key))
    return int(line.split()[1]) * 1024


def _peak() -> int:
    return _status_bytes("VmHWM:")


@pytest.mark.skipif(not os.path.exists("/proc/self/clear_refs"), reason="needs Linux /proc")
def test_the_memory_budget_holds_on_each_worker(client, rng):
    big = rng.standard_normal((4096, 4096)).astype(np.float32)  # 64 MiB
    budget = 4 * 2**20
    with ooc.MemoryBudget(budget):
        x = ooc.DiskArray.from_numpy(big)
        with ooc.executor(client):
            ooc.sum(ooc.tanh(x[:256]), axis=0)  # the workers import and warm up first
            base = client.run(_restart_peak)
            total = ooc.sum(ooc.exp(ooc.tanh(x) * 0.5) - x, axis=0)
            peak = client.run(_peak)
    np.testing.assert_allclose(
        np.asarray(total), np.sum(np.exp(np.tanh(big) * 0.5) - big, axis=0), rtol=1e-3, atol=1e-2
    )
    for worker, p in peak.items():
        # each worker held a few tiles, never the 64 MiB array
        assert p - base[worker] <= budget + 16 * 2**20, (worker, (p - base[worker]) / 2**20)


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
def test_jax_parameters_on_the_cluster_equal_one_process_to_rounding(client, rng, jit):
    """A JAX parameter's gradient is summed over the tasks' tiles in memory, on the
    workers and then here, in task order."""
    a, b, _ = grid_arrays(rng)
    w = jax.numpy.asarray(b[:, 0])  # (384,): a @ w is exact (see grid_arrays)

    def f(w, x):
        return ooc.mean(ooc.tanh(x @ w) * 2.0)

    grad = jax.value_and_grad(f)
    if jit:
        grad = jax.jit(grad)
    with ooc.MemoryBudget(BUDGET):
        x = ooc.DiskArray.from_numpy(a)
        l_here, g_here = grad(w, x)
        with ooc.executor(client):
            l_there, g_there = grad(w, x)
    n, u = a.shape[0], gamma(1)
    assert_within(l_there, l_here, (2 * gamma(n) + 2 * u) * 2, "loss")
    # dL/dw = a.T @ G, G = 2 (1 - tanh(a @ w)**2) / N at most (2 / N)(1 + 8u) in size,
    # summed over the rows in task groups
    g_max = 2 / n * (1 + 8 * u)
    bound = 2 * gamma(n) * g_max * np.sum(np.abs(a), axis=0, dtype=np.float64)
    assert_within(g_there, g_here, bound, "dL/dw")
    assert isinstance(g_there, jax.Array) and g_there.shape == w.shape


def test_a_small_result_held_in_memory_is_sent_to_the_workers_by_value(client, rng):
    a, b, _ = grid_arrays(rng)
    with ooc.MemoryBudget(BUDGET):
        x = ooc.DiskArray.from_numpy(a)
        w = ooc.DiskArray.from_numpy(b[:, 0])
        p = x @ w  # 2 KiB, held in memory here (not a file the workers could open)
        assert not p._file.on_disk
        q = x @ b[:, 0]  # an in-memory operand: a step of a chain, computed where read
        here = value(ooc.sum(ooc.tanh(p) * x[:, 0]))
        with ooc.executor(client):
            there = value(ooc.sum(ooc.tanh(p) * x[:, 0]))
            doubled = value(p * 2.0)  # an elementwise pass whose tiles run on the workers
            q_there = value(ooc.sum(ooc.tanh(q) * x[:, 0]))
    terms = np.abs(np.tanh(value(p)) * a[:, 0])
    assert_within(there, here, 2 * gamma(a.shape[0]) * np.sum(terms, dtype=np.float64), "sum")
    assert_within(q_there, here, 4 * gamma(a.shape[0]) * np.sum(terms, dtype=np.float64), "sum")
    np.testing.assert_array_equal(doubled, value(p) * 2)


def test_rows_taken_here_are_read_through_on_the_workers(client, rng):
    """A take made in this process is a chain over the rows it picks (`PickedRows`);
    a pass on the cluster reads it on the workers. Inside a cluster's passes a take
    gathers into a file. Both equal this process's sums to rounding (the cluster
    may group a reduction's partial sums by task)."""
    a = rng.standard_normal((1024, 96)).astype(np.float32)
    days = np.concatenate([np.arange(y * 256 + 32, y * 256 + 96) for y in range(4)])
    with ooc.MemoryBudget(BUDGET):
        x = ooc.DiskArray.from_numpy(a)
        picked = ooc.take(x, days, axis=0) * 2.0
        here = value(ooc.sum(picked, axis=0))
        with ooc.executor(client):
            there = value(ooc.sum(picked, axis=0))
            inside = value(ooc.sum(ooc.take(x, days, axis=0) * 2.0, axis=0))
    np.testing.assert_allclose(there, here, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(inside, here, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(here, (a[days] * 2).sum(0), rtol=1e-4, atol=1e-4)
