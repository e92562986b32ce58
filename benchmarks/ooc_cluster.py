"""gradpipe.ooc on a dask.distributed cluster: against one process, and against dask.array.

Two workloads read from one zarr store on local disk (uncompressed, so the figures
are the engines', not a codec's):

- ``chain``: ``mean(exp(tanh(X) * 0.5 + 0.1) - X * X)`` on a float32 ``X`` of
  16384² (1 GiB), the fused chain of the out-of-core chain benchmark.
- ``matmul``: ``A @ W`` of two float32 8192² arrays (256 MiB each), the product
  written to disk (gradpipe: its scratch file, through ``persist``; dask:
  ``to_zarr`` of a new store).

Contenders, under one memory budget (256 MiB by default):

- ``single``: gradpipe in this process (``ooc.open_zarr``; the default executor).
- ``cluster``: the same code inside ``with ooc.executor(client):`` on a
  ``LocalCluster`` of 2 worker processes of one thread each, on loopback.
- ``dask``: ``dask.array.from_zarr`` of the same store, computed on the same
  cluster.

The cluster starts once; every contender first runs once on small arrays
(untimed), then the rounds interleave the contenders and the table gives medians.
The per-task overhead comes from a pass of many small tiles run both ways; with
the bytes each worker read and wrote it gives the projection printed at the end.

    .venv/bin/python benchmarks/ooc_cluster.py               # the recorded run
    .venv/bin/python benchmarks/ooc_cluster.py --quick       # a smoke test, under a minute
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

MIB = 2**20
WORKLOADS = ("chain", "matmul")
CONTENDERS = ("single", "cluster", "dask")


def _chain(xp, x):
    return xp.mean(xp.exp(xp.tanh(x) * 0.5 + 0.1) - x * x)


def write_store(path: Path, shape, chunks, rng) -> None:
    """A standard-normal float32 zarr array at ``path``, uncompressed, row block by row block."""
    import zarr

    z = zarr.create_array(
        str(path), shape=shape, chunks=chunks, dtype="float32", compressors=None, overwrite=True
    )
    rows = chunks[0]
    for r in range(0, shape[0], rows):
        z[r : r + rows] = rng.standard_normal((min(rows, shape[0] - r), shape[1]), np.float32)


class Inputs:
    """The stores of one size: ``X`` for the chain, ``A`` and ``W`` for the product."""

    def __init__(self, d: Path, rows: int, cols: int, n: int, budget_mib: int, rng):
        self.d = d
        chunk_rows = max(1, budget_mib * MIB // 8 // (4 * cols))  # whole rows, budget/8
        side = min(n, 2048)
        self.x = d / "X.zarr"
        self.a, self.w = d / "A.zarr", d / "W.zarr"
        write_store(self.x, (rows, cols), (chunk_rows, cols), rng)
        write_store(self.a, (n, n), (side, side), rng)
        write_store(self.w, (n, n), (side, side), rng)
        self.bytes = {"chain": rows * cols * 4, "matmul": 2 * n * n * 4}


def run_gradpipe(workload: str, inp: Inputs, budget: int):
    from gradpipe import ooc

    with ooc.MemoryBudget(budget):
        if workload == "chain":
            return float(_chain(ooc, ooc.open_zarr(inp.x)))
        product = (ooc.open_zarr(inp.a) @ ooc.open_zarr(inp.w)).persist()
        return product.shape


def run_dask(workload: str, inp: Inputs, client):
    import dask.array as da

    if workload == "chain":
        return float(client.compute(_chain(da, da.from_zarr(str(inp.x)))).result())
    out = inp.d / "dask-product.zarr"
    shutil.rmtree(out, ignore_errors=True)
    product = da.from_zarr(str(inp.a)) @ da.from_zarr(str(inp.w))
    client.compute(product.to_zarr(str(out), compute=False)).result()
    shutil.rmtree(out, ignore_errors=True)
    return product.shape


def timed(fn):
    t = time.perf_counter()
    value = fn()
    return time.perf_counter() - t, value


def run(contender: str, workload: str, inp: Inputs, client, budget: int):
    from gradpipe import ooc

    if contender == "dask":
        return timed(lambda: run_dask(workload, inp, client))
    if contender == "cluster":
        with ooc.executor(client):
            return timed(lambda: run_gradpipe(workload, inp, budget))
    return timed(lambda: run_gradpipe(workload, inp, budget))


def task_overhead(client, budget: int, tiles: int = 64) -> dict:
    """Seconds a task adds: a pass of ``tiles`` small tiles on the cluster against
    this process, each cut to one tile per task."""
    from gradpipe import ooc

    x = np.ones((tiles * 64, 256), np.float32)  # 64 KiB tiles under a 256 KiB budget
    with ooc.MemoryBudget(256 * 2**10):
        d = ooc.DiskArray.from_numpy(x)
        here = [timed(lambda: ooc.sum(d, axis=1).persist())[0] for _ in range(5)]
        with ooc.executor(ooc.DaskExecutor(client, tasks_per_thread=tiles)):
            there = [timed(lambda: ooc.sum(d, axis=1).persist())[0] for _ in range(5)]
    threads = sum(client.nthreads().values())
    # tasks run `threads` at a time: each slot carries tiles/threads of them
    per_task = (statistics.median(there) - statistics.median(here) / threads) / (tiles / threads)
    return {
        "tasks": tiles,
        "single_s": statistics.median(here),
        "cluster_s": statistics.median(there),
        "per_task_s": max(per_task, 0.0),
    }


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--rows", type=int, default=16384, help="rows of the chain's X")
    p.add_argument("--cols", type=int, default=16384, help="columns of the chain's X")
    p.add_argument("--matmul-size", type=int, default=8192, help="side of A and W")
    p.add_argument("--budget-mib", type=int, default=256, help="memory budget (per worker)")
    p.add_argument("--repeats", type=int, default=3, help="timed rounds")
    p.add_argument("--workers", type=int, default=2, help="worker processes")
    p.add_argument("--quick", action="store_true", help="small arrays, one round: a smoke test")
    p.add_argument(
        "--dir",
        type=Path,
        default=None,
        help="where the stores go (default: a temporary directory)",
    )
    p.add_argument("--json", type=Path, default=None, help="write the results here too")
    args = p.parse_args()
    if args.quick:
        args.rows = args.cols = 2048
        args.matmul_size = 1024
        args.budget_mib = 16
        args.repeats = 1
    from distributed import Client, LocalCluster

    from gradpipe import ooc

    budget = args.budget_mib * MIB
    root = Path(tempfile.mkdtemp(prefix="gradpipe-cluster-", dir=args.dir))
    ooc.set_scratch_dir(root / "scratch")
    rng = np.random.default_rng(0)
    try:
        print(f"writing the stores in {root} ...", flush=True)
        small = Inputs(root / "small", 256, 256, 256, args.budget_mib, rng)
        inp = Inputs(root / "big", args.rows, args.cols, args.matmul_size, args.budget_mib, rng)
        cluster = LocalCluster(
            n_workers=args.workers,
            threads_per_worker=1,
            processes=True,
            host="127.0.0.1",
            dashboard_address=None,
            memory_limit=None,
        )
        with cluster, Client(cluster) as client:
            client.wait_for_workers(args.workers)
            for w in WORKLOADS:
                for c in CONTENDERS:
                    run(c, w, small, client, budget)  # warm-up: imports, first dispatch
            times = {(w, c): [] for w in WORKLOADS for c in CONTENDERS}
            values = {}
            moved = {}
            for r in range(args.repeats):
                for w in WORKLOADS:
                    for c in CONTENDERS:
                        before = ooc.io_stats()
                        dt, value = run(c, w, inp, client, budget)
                        if c == "cluster":
                            moved[w] = ooc.io_stats() - before
                        times[(w, c)].append(dt)
                        values[(w, c)] = value
                        print(f"round {r + 1}: {w:6s} {c:7s} {dt:7.2f} s", flush=True)
            overhead = task_overhead(client, budget)
        report(args, inp, times, values, moved, overhead)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def report(args, inp, times, values, moved, overhead) -> None:
    med = {k: statistics.median(v) for k, v in times.items()}
    print()
    print(
        f"workers: {args.workers} processes x 1 thread, budget {args.budget_mib} MiB each; "
        f"chain X {args.rows}x{args.cols} float32, matmul {args.matmul_size}^2 float32; "
        f"medians of {args.repeats}"
    )
    print(f"{'workload':8s} {'contender':9s} {'time s':>8s} {'GB/s in':>8s}")
    for (w, c), t in med.items():
        print(f"{w:8s} {c:9s} {t:8.2f} {inp.bytes[w] / t / 1e9:8.2f}")
    rows = []
    for w in WORKLOADS:
        rows.append((f"{w}: cluster / single", med[(w, "cluster")] / med[(w, "single")], 1.3))
        rows.append((f"{w}: cluster / dask", med[(w, "cluster")] / med[(w, "dask")], 1.0))
    print()
    for name, ratio, target in rows:
        print(
            f"{name:26s} {ratio:5.2f}  (target <= {target}: {'PASS' if ratio <= target else 'MISS'})"
        )
    print(
        f"chain values: single {values[('chain', 'single')]:.6f} cluster "
        f"{values[('chain', 'cluster')]:.6f} dask {values[('chain', 'dask')]:.6f}"
    )
    print()
    print(
        f"per-task overhead: {overhead['per_task_s'] * 1e3:.1f} ms "
        f"({overhead['tasks']} tasks: {overhead['cluster_s']:.2f} s on the cluster, "
        f"{overhead['single_s']:.2f} s here)"
    )
    for w, io in moved.items():
        print(
            f"{w}: {io.bytes_read / 2**30:.2f} GiB read, {io.bytes_written / 2**30:.2f} GiB written "
            f"in all ({io.bytes_read / args.workers / 2**30:.2f} GiB read per worker)"
        )
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "median_s": {f"{w}/{c}": t for (w, c), t in med.items()},
                    "times_s": {f"{w}/{c}": t for (w, c), t in times.items()},
                    "ratios": {name: ratio for name, ratio, _ in rows},
                    "overhead": overhead,
                    "moved": {
                        w: {"read": io.bytes_read, "written": io.bytes_written}
                        for w, io in moved.items()
                    },
                },
                indent=2,
            )
        )


if __name__ == "__main__":
    main()
