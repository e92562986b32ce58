"""Out-of-core matmul: gradpipe.ooc against NumPy in memory, dask.array and cubed.

An ``n x n`` float32 matmul with both inputs on disk and a memory budget (512 MiB
by default). Each contender runs in its own subprocess (so its peak RSS is its
own), once per round, the rounds interleaving the contenders; the table gives the
median wall time, GFLOP/s, peak RSS (VmHWM) and the ratios the issue targets.

    .venv/bin/python benchmarks/ooc_matmul.py                 # 8192, the recorded run
    .venv/bin/python benchmarks/ooc_matmul.py --size 2048     # a quick check

Contenders:

- ``numpy``: ``A @ B`` with both arrays loaded in memory (load time not counted).
- ``gradpipe-fwd``: ``ooc.matmul(a, b)`` from DiskArray files to a DiskArray file.
- ``gradpipe-fwd+bwd``: ``jax.value_and_grad`` of ``sum(a @ b)`` for both
  operands: the product plus two more out-of-core products (6 n^3 flops).
- ``dask``: ``da.from_array`` on ``np.load(mmap_mode="r")`` inputs in chunks of
  the gradpipe tile, threaded scheduler, stored into an ``np.memmap`` output.
- ``cubed``: zarr inputs in the same chunks, ``allowed_mem`` = the budget,
  ``cubed.to_zarr`` output (cubed writes intermediates to its work dir).
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


def worker(name: str, d: Path, n: int, budget_mib: int, repeats: int) -> dict:
    times = []
    if name == "numpy":
        a, b = np.load(d / "a.npy"), np.load(d / "b.npy")
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
        a, b = ooc.DiskArray.open(d / "a.gpa"), ooc.DiskArray.open(d / "b.gpa")
        fb = jax.value_and_grad(lambda a, b: ooc.sum(a @ b), argnums=(0, 1))
        for _ in range(repeats):
            t = time.perf_counter()
            if name == "gradpipe-fwd":
                out = ooc.matmul(a, b)
            else:
                out = fb(a, b)
                jax.block_until_ready(out[0])
            times.append(time.perf_counter() - t)
            del out
    elif name == "dask":
        import dask
        import dask.array as da

        ch = _chunk(n, budget_mib)
        for _ in range(repeats):
            a = da.from_array(np.load(d / "a.npy", mmap_mode="r"), chunks=(ch, ch))
            b = da.from_array(np.load(d / "b.npy", mmap_mode="r"), chunks=(ch, ch))
            out = np.lib.format.open_memmap(d / "c_dask.npy", "w+", np.float32, (n, n))
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
        raise SystemExit(f"unknown contender {name!r}; choose from {CONTENDERS}")
    return {"name": name, "times": times, "peak_rss_mib": _peak_rss_mib()}


# ---------------------------------------------------------------- setup


def make_inputs(d: Path, n: int, want: list[str], budget_mib: int) -> None:
    """A and B in every format the contenders read, written in row blocks."""
    from gradpipe import ooc

    rng = np.random.default_rng(0)
    rows = max(1, 2**26 // (4 * n))  # 64 MiB blocks
    budget = ooc.MemoryBudget("512MiB")
    for name in ("a", "b"):
        npy = np.lib.format.open_memmap(d / f"{name}.npy", "w+", np.float32, (n, n))
        for r in range(0, n, rows):
            npy[r : r + rows] = rng.standard_normal((min(rows, n - r), n), dtype=np.float32)
        npy.flush()
        src = np.load(d / f"{name}.npy", mmap_mode="r")
        ooc.DiskArray.from_memmap(src, path=d / f"{name}.gpa", budget=budget)
        if "cubed" in want:
            import zarr

            ch = _chunk(n, budget_mib)
            z = zarr.open_array(
                str(d / f"{name}.zarr"), mode="w", shape=(n, n), dtype="f4", chunks=(ch, ch)
            )
            for r in range(0, n, ch):
                z[r : r + ch] = src[r : r + ch]


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
    p.add_argument("--contenders", nargs="+", default=CONTENDERS, choices=CONTENDERS)
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
        make_inputs(d, n, args.contenders, args.budget_mib)
        print(f"inputs: 2 x {n}x{n} float32 on disk in {d} ({time.perf_counter() - t:.1f} s)")
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
    print_table(results, n, args.budget_mib)


def print_table(results: dict, n: int, budget_mib: int) -> None:
    flops = {name: 2 * n**3 for name in results}
    flops["gradpipe-fwd+bwd"] = 6 * n**3
    med = {k: statistics.median(r["times"]) for k, r in results.items() if "times" in r}
    print(f"\n{'contender':<18} {'median s':>9} {'GFLOP/s':>8} {'peak RSS MiB':>13}")
    for name, r in results.items():
        if name not in med:
            print(f"{name:<18} failed: {r.get('error')}")
            continue
        gf = flops[name] / med[name] / 1e9
        print(f"{name:<18} {med[name]:>9.2f} {gf:>8.1f} {r['peak_rss_mib']:>13.0f}")
    fwd = med.get("gradpipe-fwd")
    print("\nratio                              measured  target")
    rows = [
        ("gradpipe fwd / numpy in memory", fwd, med.get("numpy"), "<= 1.25"),
        ("gradpipe fwd / dask", fwd, med.get("dask"), "<= 0.67"),
        ("gradpipe fwd / cubed", fwd, med.get("cubed"), "<= 0.67"),
        ("gradpipe fwd+bwd / gradpipe fwd", med.get("gradpipe-fwd+bwd"), fwd, "<= 3.5"),
    ]
    for label, a, b, target in rows:
        value = f"{a / b:.2f}" if a and b else "n/a"
        print(f"{label:<34} {value:>8}  {target}")
    # What no out-of-core forward pass can beat: the same product with both inputs
    # already in memory, on the same BLAS and cores.
    for peer in ("dask", "cubed"):
        if med.get("numpy") and med.get(peer):
            label = f"(floor) numpy in memory / {peer}"
            print(f"{label:<34} {med['numpy'] / med[peer]:>8.2f}")
    rss = [results[k]["peak_rss_mib"] for k in med if k.startswith("gradpipe")]
    if rss:
        print(f"{'gradpipe peak RSS MiB':<34} {max(rss):>8.0f}  <= {budget_mib + 200}")


if __name__ == "__main__":
    main()
