"""Out-of-core matmul: gradpipe.ooc against NumPy in memory, dask.array and cubed.

An ``n x n`` float32 matmul with both inputs on disk and a memory budget (512 MiB
by default), and a batched one, ``(b, m, m) @ (b, m, m)`` (16 x 2048² by default).
Each contender runs in its own subprocess (so its peak RSS is its own), once per
round, the rounds interleaving the contenders; the table gives the median wall
time, GFLOP/s, peak RSS (VmHWM) and the ratios the issue targets.

    .venv/bin/python benchmarks/ooc_matmul.py                 # 8192, the recorded run
    .venv/bin/python benchmarks/ooc_matmul.py --size 2048 --batch 4 --batch-size 1024

Contenders:

- ``numpy``: ``A @ B`` with both arrays loaded in memory (load time not counted).
- ``gradpipe-fwd``: ``ooc.matmul(a, b)`` from DiskArray files to a DiskArray file.
- ``gradpipe-fwd+bwd``: ``jax.value_and_grad`` of ``sum(a @ b)`` for both
  operands: the product plus two more out-of-core products (6 n^3 flops).
- ``dask``: ``da.from_array`` on ``np.load(mmap_mode="r")`` inputs in chunks of
  the gradpipe tile, threaded scheduler, stored into an ``np.memmap`` output.
- ``cubed``: zarr inputs in the same chunks, ``allowed_mem`` = the budget,
  ``cubed.to_zarr`` output (cubed writes intermediates to its work dir).
- ``numpy-batched``, ``gradpipe-batched``, ``dask-batched``: the same three on the
  batched product (dask in chunks of whole matrices, as many as fit the budget).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

CONTENDERS = ["numpy", "gradpipe-fwd", "gradpipe-fwd+bwd", "dask", "cubed"]
BATCHED = ["numpy-batched", "gradpipe-batched", "dask-batched"]


# ---------------------------------------------------------------- workers


def _peak_rss_mib() -> float:
    """This process's peak RSS. VmHWM, not ru_maxrss: ru_maxrss survives fork and exec,
    so a worker would report its parent's peak."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _chunk(n: int, budget_mib: int) -> int:
    """Chunk side for dask and cubed: the gradpipe tile size (4096 for 8192 at 512 MiB),
    smaller when cubed's projected memory (about 7 chunks) would exceed the budget."""
    c = min(n, 4096)
    while c > 256 and 7 * c * c * 4 > budget_mib * 2**20:
        c //= 2
    return c


def _batch_chunk(m: int, budget_mib: int) -> int:
    """How many whole ``m x m`` matrices a dask chunk of the batched product holds."""
    return max(1, budget_mib * 2**20 // (7 * m * m * 4))


def worker(name: str, d: Path, n: int, budget_mib: int, repeats: int) -> dict:
    """Time contender ``name``; a ``-batched`` one reads the batched inputs."""
    times = []
    batched = name in BATCHED
    fa, fb = ("ab", "bb") if batched else ("a", "b")
    if name.startswith("numpy"):
        a, b = np.load(d / f"{fa}.npy"), np.load(d / f"{fb}.npy")
        for _ in range(repeats):
            t = time.perf_counter()
            c = a @ b
            times.append(time.perf_counter() - t)
            del c
    elif name.startswith("gradpipe"):
        import jax

        from gradpipe import ooc

        ooc.set_default_budget(ooc.MemoryBudget(budget_mib * 2**20))
        ooc.set_scratch_dir(d / "scratch")
        a, b = ooc.DiskArray.open(d / f"{fa}.gpa"), ooc.DiskArray.open(d / f"{fb}.gpa")
        grad = jax.value_and_grad(lambda a, b: ooc.sum(a @ b), argnums=(0, 1))
        for _ in range(repeats):
            t = time.perf_counter()
            if name == "gradpipe-fwd+bwd":
                out = grad(a, b)
                jax.block_until_ready(out[0])
            else:
                out = ooc.matmul(a, b)
            times.append(time.perf_counter() - t)
            del out
    elif name.startswith("dask"):
        import dask
        import dask.array as da

        from _dask_input import from_npy

        shape = np.load(d / f"{fa}.npy", mmap_mode="r").shape
        if batched:  # whole matrices, as many as fit the budget
            chunks = (_batch_chunk(shape[-1], budget_mib), *shape[1:])
        else:
            chunks = (_chunk(n, budget_mib),) * 2
        for _ in range(repeats):
            a = from_npy(d / f"{fa}.npy", chunks=chunks)  # read through the map, not copied
            b = from_npy(d / f"{fb}.npy", chunks=chunks)
            out = np.lib.format.open_memmap(d / f"c_{name}.npy", "w+", np.float32, shape)
            t = time.perf_counter()
            with dask.config.set(scheduler="threads"):
                da.store(a @ b, out, lock=False)
            out.flush()
            times.append(time.perf_counter() - t)
            del out
    elif name == "cubed":
        import cubed
        import cubed.array_api as xp

        for i in range(repeats):
            work = d / f"cubed-work-{i}"
            spec = cubed.Spec(work_dir=str(work), allowed_mem=f"{budget_mib}MB")
            a = cubed.from_zarr(str(d / "a.zarr"), spec=spec)
            b = cubed.from_zarr(str(d / "b.zarr"), spec=spec)
            t = time.perf_counter()
            cubed.to_zarr(xp.matmul(a, b), str(d / f"c_cubed_{i}.zarr"))
            times.append(time.perf_counter() - t)
            shutil.rmtree(work, ignore_errors=True)
            shutil.rmtree(d / f"c_cubed_{i}.zarr", ignore_errors=True)
    else:
        raise SystemExit(f"unknown contender {name!r}; choose from {CONTENDERS + BATCHED}")
    return {"name": name, "times": times, "peak_rss_mib": _peak_rss_mib()}


# ---------------------------------------------------------------- setup


def make_inputs(d: Path, n: int, want: list[str], budget_mib: int, batch=(0, 0)) -> None:
    """A and B in every format the contenders read, written in row blocks (and the
    batched ``ab``, ``bb`` of shape ``(batch[0], batch[1], batch[1])`` when wanted)."""
    from gradpipe import ooc

    rng = np.random.default_rng(0)
    budget = ooc.MemoryBudget("512MiB")

    def write(name, shape):
        npy = np.lib.format.open_memmap(d / f"{name}.npy", "w+", np.float32, shape)
        flat = npy.reshape(-1, shape[-1])
        rows = max(1, 2**26 // (4 * shape[-1]))  # 64 MiB blocks
        for r in range(0, flat.shape[0], rows):
            part = (min(rows, flat.shape[0] - r), shape[-1])
            flat[r : r + rows] = rng.standard_normal(part, dtype=np.float32)
        npy.flush()
        src = np.load(d / f"{name}.npy", mmap_mode="r")
        ooc.DiskArray.from_memmap(src, path=d / f"{name}.gpa", budget=budget)
        return src

    for name in ("a", "b") if any(w in CONTENDERS for w in want) else ():
        src = write(name, (n, n))
        if "cubed" in want:
            import zarr

            ch = _chunk(n, budget_mib)
            z = zarr.open_array(
                str(d / f"{name}.zarr"), mode="w", shape=(n, n), dtype="f4", chunks=(ch, ch)
            )
            for r in range(0, n, ch):
                z[r : r + ch] = src[r : r + ch]
    for name in ("ab", "bb") if any(w in BATCHED for w in want) else ():
        write(name, (batch[0], batch[1], batch[1]))


def run_contender(name, d, n, budget_mib, repeats) -> dict:
    cmd = [sys.executable, __file__, "--worker", name, "--dir", str(d), "--size", str(n)]
    cmd += ["--budget-mib", str(budget_mib), "--repeats", str(repeats)]
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    out = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if out.returncode != 0:
        return {"name": name, "error": out.stderr.strip().splitlines()[-1:]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", type=int, default=8192)
    p.add_argument("--budget-mib", type=int, default=512)
    p.add_argument("--repeats", type=int, default=3, help="rounds (each contender once a round)")
    p.add_argument("--batch", type=int, default=16, help="matrices in the batched product")
    p.add_argument("--batch-size", type=int, default=2048, help="their side")
    p.add_argument(
        "--contenders", nargs="+", default=CONTENDERS + BATCHED, choices=CONTENDERS + BATCHED
    )
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--dir", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        r = worker(args.worker, Path(args.dir), args.size, args.budget_mib, args.repeats)
        print(json.dumps(r))
        return

    n = args.size
    d = Path(tempfile.mkdtemp(prefix="gradpipe-bench-ooc-", dir=os.environ.get("GRADPIPE_SCRATCH")))
    try:
        t = time.perf_counter()
        batch = (args.batch, args.batch_size)
        make_inputs(d, n, args.contenders, args.budget_mib, batch)
        print(
            f"inputs: 2 x {n}x{n} and 2 x {batch[0]}x{batch[1]}x{batch[1]} float32 on disk "
            f"in {d} ({time.perf_counter() - t:.1f} s)"
        )
        print(f"budget {args.budget_mib} MiB, {args.repeats} rounds, load {os.getloadavg()}")
        # Rounds interleave the contenders, so that load from other processes on a
        # shared machine falls on all of them alike.
        results: dict[str, dict] = {}
        for i in range(args.repeats):
            for name in args.contenders:
                r = run_contender(name, d, n, args.budget_mib, 1)
                acc = results.setdefault(name, {"name": name, "times": [], "peak_rss_mib": 0})
                if "error" in r:
                    results[name] = r
                    continue
                if "times" in acc:
                    acc["times"] += r["times"]
                    acc["peak_rss_mib"] = max(acc["peak_rss_mib"], r["peak_rss_mib"])
                print(f"  round {i + 1} {name}: {r.get('times', r.get('error'))}", flush=True)
    finally:
        shutil.rmtree(d, ignore_errors=True)
    print(f"load after: {os.getloadavg()}")
    print_table(results, n, args.budget_mib, batch)


def print_table(results: dict, n: int, budget_mib: int, batch=(0, 0)) -> None:
    flops = {name: 2 * n**3 for name in results}
    flops["gradpipe-fwd+bwd"] = 6 * n**3
    flops.update({name: 2 * batch[0] * batch[1] ** 3 for name in BATCHED})
    med = {k: statistics.median(r["times"]) for k, r in results.items() if "times" in r}
    print(f"\n{'contender':<18} {'median s':>9} {'GFLOP/s':>8} {'peak RSS MiB':>13}")
    for name, r in results.items():
        if name not in med:
            print(f"{name:<18} failed: {r.get('error')}")
            continue
        gf = flops[name] / med[name] / 1e9
        print(f"{name:<18} {med[name]:>9.2f} {gf:>8.1f} {r['peak_rss_mib']:>13.0f}")
    fwd, bat = med.get("gradpipe-fwd"), med.get("gradpipe-batched")
    print("\nratio                              measured  target")
    rows = [
        ("gradpipe fwd / numpy in memory", fwd, med.get("numpy"), "<= 1.25"),
        ("gradpipe fwd / dask", fwd, med.get("dask"), "<= 0.67"),
        ("gradpipe fwd / cubed", fwd, med.get("cubed"), "<= 0.67"),
        ("gradpipe fwd+bwd / gradpipe fwd", med.get("gradpipe-fwd+bwd"), fwd, "<= 3.5"),
        ("gradpipe batched / numpy in memory", bat, med.get("numpy-batched"), "<= 1.25"),
        ("gradpipe batched / dask batched", bat, med.get("dask-batched"), "<= 0.67"),
    ]
    for label, a, b, target in rows:
        value = f"{a / b:.2f}" if a and b else "n/a"
        print(f"{label:<34} {value:>8}  {target}")
    # What no out-of-core forward pass can beat: the same product with both inputs
    # already in memory, on the same BLAS and cores.
    floors = [
        ("numpy", "dask", "(floor) numpy in memory / dask"),
        ("numpy", "cubed", "(floor) numpy in memory / cubed"),
        ("numpy-batched", "dask-batched", "(floor) batched: numpy / dask"),
    ]
    for ours, peer, label in floors:
        if med.get(ours) and med.get(peer):
            print(f"{label:<34} {med[ours] / med[peer]:>8.2f}")
    rss = [results[k]["peak_rss_mib"] for k in med if k.startswith("gradpipe")]
    if rss:
        print(f"{'gradpipe peak RSS MiB':<34} {max(rss):>8.0f}  <= {budget_mib + 200}")


if __name__ == "__main__":
    main()
