"""Out-of-core training step: one jitted optax adam step, JAX parameters on disk data.

Least squares ``mean(square(X @ w + b - y))``, JAX parameters ``w`` (K,) and ``b`` (),
float32 ``X`` (N, K) on disk: 1 GiB, K = 256, N = 1,048,576, against a 256 MiB
budget by default; a step is the loss and gradient, then ``optax.adam(1e-3)``. Each
contender runs in its own subprocess, once a round, the rounds interleaving them; a
worker takes one untimed step (the jit compiles there) and times the next. The
table: median s per step, bytes read / X, MiB written, peak RSS, the targets.

    .venv/bin/python benchmarks/ooc_params.py            # 1 GiB, 256 MiB, 5 rounds: the recorded run
    .venv/bin/python benchmarks/ooc_params.py --quick    # 65536 x 64, 16 MiB, 2 rounds: a smoke test
    .venv/bin/python benchmarks/ooc_params.py --cols 64 --budget-mib 64 --rounds 3 --json p.json

Contenders:

- ``gradpipe``: ``X``, ``y`` are ``ooc.DiskArray.open(...)``, the parameters
  ``{"w": jnp.zeros(K), "b": jnp.zeros(())}``; ``jax.jit`` of ``jax.value_and_grad``,
  ``opt.update`` and ``optax.apply_updates`` under ``ooc.MemoryBudget(budget)``.
- ``jax-memory`` (floor): the same jitted step, ``X`` and ``y`` JAX arrays in memory.
- ``numpy-memory`` (floor): NumPy in memory, the gradient by hand
  (``r = X @ w + b - y``, ``gw = 2 X.T r / N``, ``gb = 2 mean(r)``), adam in NumPy.
- ``dask`` (peer): ``da.from_array`` of ``np.load(mmap_mode="r")`` in chunks of whole
  rows, about budget/8 bytes each; the same gradient in one ``dask.compute`` (X read
  once), threaded scheduler; adam in NumPy. The memmap goes in behind a thin
  wrapper (`_dask_input`): handed an ndarray (a memmap is one), dask's ``from_array``
  copies it whole into memory, and the timed step would read no disk at all.

All start from the same parameters and take the same two steps; the second step's
loss, gradient and parameters are compared with ``jax-memory``'s (max absolute
difference over the largest reference entry), so a fast wrong answer shows (``y`` is
``X @ w_true + 0.5 + noise``: the gradient is far from zero).

I/O: gradpipe's ``ooc.io_stats()`` around the timed step; dask's ``rchar``/``wchar``
(``/proc/self/io``) plus its resident bytes of the ``.npy`` maps (reading a memory
map makes no system call). Peak RSS: VmHWM over the timed step, reset through
``/proc/self/clear_refs`` just before it; "above base" subtracts the RSS there.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from _measure import mapped_bytes, measured, proc_io, rel, write_report

CONTENDERS = ["gradpipe", "jax-memory", "numpy-memory", "dask"]
FLOORS = ["jax-memory", "numpy-memory"]
MIB = 2**20
LR, B1, B2, EPS = 1e-3, 0.9, 0.999, 1e-8  # optax.adam(1e-3) and its defaults
AGREE = 1e-4  # the largest relative difference from jax-memory that passes
OUTPUTS = ("loss", "grads", "params")
VERDICT = {None: "n/a", True: "PASS", False: "MISS"}


# ---------------------------------------------------------------- process counters


# ---------------------------------------------------------------- workers
def _numpy_adam(params, state, grads):
    """One ``optax.adam(1e-3)`` update in NumPy; ``state`` is ``(t, m, v)``."""
    (t, m, v), new, m2, v2 = state, {}, {}, {}
    t += 1
    for k, g in grads.items():
        m2[k] = B1 * m[k] + (1 - B1) * g
        v2[k] = B2 * v[k] + (1 - B2) * g * g
        m_hat, v_hat = m2[k] / (1 - B1**t), v2[k] / (1 - B2**t)
        new[k] = (params[k] - LR * m_hat / (np.sqrt(v_hat) + EPS)).astype(np.float32)
    return new, (t, m2, v2)


def _jax_worker(name: str, d: Path, budget_mib: int, zeros: dict):
    import jax
    import jax.numpy as jnp
    import optax

    if name == "gradpipe":
        from gradpipe import ooc

        ooc.set_scratch_dir(d / "scratch")
        xp, X, y = ooc, ooc.DiskArray.open(d / "X.gpa"), ooc.DiskArray.open(d / "y.gpa")
        budget, io_stats = ooc.MemoryBudget(budget_mib * MIB), ooc.io_stats
    else:
        xp, X, y = jnp, jnp.asarray(np.load(d / "X.npy")), jnp.asarray(np.load(d / "y.npy"))
        budget, io_stats = contextlib.nullcontext(), lambda: None
    opt = optax.adam(LR)

    @jax.jit
    def step(params, state, X, y):
        def loss(p):
            return xp.mean(xp.square(X @ p["w"] + p["b"] - y))

        value, grads = jax.value_and_grad(loss)(params)
        updates, state = opt.update(grads, state, params)
        return optax.apply_updates(params, updates), state, value, grads

    params = {k: jnp.asarray(v) for k, v in zeros.items()}
    with budget:
        params, state, _, _ = jax.block_until_ready(step(params, opt.init(params), X, y))
        io0 = io_stats()
        rec, out = measured(lambda: jax.block_until_ready(step(params, state, X, y)))
        io = None if io0 is None else io_stats() - io0
    rec["read"], rec["written"] = (0, 0) if io is None else (io.bytes_read, io.bytes_written)
    return rec, out


def _numpy_worker(name: str, d: Path, budget_mib: int, zeros: dict):
    xpath, ypath = d / "X.npy", d / "y.npy"
    if name == "numpy-memory":
        X, y = np.load(xpath), np.load(ypath)
        compute = lambda *parts: parts
    else:
        import dask

        from _dask_input import from_npy

        rows = max(1, budget_mib * MIB // 8 // (4 * len(zeros["w"])))  # ~budget/8 a chunk
        X = from_npy(xpath, chunks=(rows, -1), name="X")  # read through the map, not copied
        y = from_npy(ypath, chunks=(rows,), name="y")

        def compute(*parts):
            with dask.config.set(scheduler="threads"):
                return dask.compute(*parts)

    def step(params, state):
        r = X @ params["w"] + params["b"] - y
        parts = compute((r * r).mean(), X.T @ r * (2 / X.shape[0]), 2 * r.mean())
        value, gw, gb = (np.asarray(p, np.float32) for p in parts)
        grads = {"w": gw, "b": gb}
        return (*_numpy_adam(params, state, grads), value, grads)

    params, state, _, _ = step(zeros, (0, dict(zeros), dict(zeros)))
    io0 = proc_io()
    rec, out = measured(lambda: step(params, state))
    io1 = proc_io()
    rec["read"], rec["written"] = io1["rchar"] - io0["rchar"], io1["wchar"] - io0["wchar"]
    if name == "dask":
        rec["mapped"] = mapped_bytes(xpath, ypath)
        rec["read"] += rec["mapped"]
    return rec, out


def worker(name: str, d: Path, budget_mib: int) -> dict:
    """Two steps of contender ``name`` on the inputs in ``d``, the second timed."""
    K = np.load(d / "X.npy", mmap_mode="r").shape[1]
    zeros = {"w": np.zeros(K, np.float32), "b": np.zeros((), np.float32)}
    run = _jax_worker if name in ("gradpipe", "jax-memory") else _numpy_worker
    rec, (params, _, value, grads) = run(name, d, budget_mib, zeros)
    flat = lambda t: [float(v) for v in np.append(np.asarray(t["w"]), t["b"])]
    return dict(rec, name=name, loss=float(value), grads=flat(grads), params=flat(params))


# ---------------------------------------------------------------- setup and rounds
def make_inputs(d: Path, rows: int, cols: int, budget_mib: int) -> None:
    """``X`` (standard normal) and ``y = X @ w_true + 0.5 + noise`` as ``.npy``, made
    in ~64 MiB row blocks, and as gradpipe array files."""
    from gradpipe import ooc

    rng = np.random.default_rng(0)
    w_true = rng.standard_normal(cols).astype(np.float32)
    X = np.lib.format.open_memmap(d / "X.npy", "w+", np.float32, (rows, cols))
    y = np.empty(rows, np.float32)
    step = max(1, 64 * MIB // (4 * cols))
    for r in range(0, rows, step):
        block = rng.standard_normal((min(step, rows - r), cols), np.float32)
        X[r : r + step] = block
        y[r : r + step] = block @ w_true + 0.5 + 0.1 * rng.standard_normal(len(block))
    X.flush()
    del X
    np.save(d / "y.npy", y)
    budget = ooc.MemoryBudget(budget_mib * MIB)
    ooc.DiskArray.from_numpy(np.load(d / "X.npy", mmap_mode="r"), path=d / "X.gpa", budget=budget)
    ooc.DiskArray.from_numpy(y, path=d / "y.gpa", budget=budget)


def run_contender(name: str, d: Path, budget_mib: int) -> dict:
    cmd = [sys.executable, __file__, "--worker", name, "--data", str(d)]
    cmd += ["--budget-mib", str(budget_mib)]
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    out = subprocess.run(cmd, capture_output=True, text=True, env=env)
    shutil.rmtree(d / "scratch", ignore_errors=True)  # this worker's leftovers, if any
    if out.returncode != 0:
        return {"name": name, "error": out.stderr.strip().splitlines()[-3:]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, help="N (default: X of 1 GiB)")
    p.add_argument("--cols", type=int, default=256, help="K")
    p.add_argument("--budget-mib", type=int, default=256)
    p.add_argument("--rounds", type=int, default=5, help="rounds (each contender once a round)")
    p.add_argument("--contenders", nargs="+", default=CONTENDERS, choices=CONTENDERS)
    p.add_argument("--quick", action="store_true", help="65536 x 64, 16 MiB, 2 rounds")
    p.add_argument("--dir", default="/tmp", help="where the temporary directory goes")
    p.add_argument("--json", metavar="PATH", help="also write the results as JSON ('-': stdout)")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--data", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker, Path(args.data), args.budget_mib)))
        return
    if args.quick:
        args.rows, args.cols, args.budget_mib, args.rounds = 65536, 64, 16, 2
    args.rows = args.rows or 2**30 // (4 * args.cols)

    d = Path(tempfile.mkdtemp(prefix="gradpipe-bench-params-", dir=args.dir))
    results: dict[str, list[dict]] = {name: [] for name in args.contenders}
    try:
        t = time.perf_counter()
        make_inputs(d, args.rows, args.cols, args.budget_mib)
        x_mib, dt = args.rows * args.cols * 4 / MIB, time.perf_counter() - t
        print(f"X {args.rows}x{args.cols} float32 ({x_mib:.1f} MiB) in {d} ({dt:.1f} s)")
        print(f"budget {args.budget_mib} MiB, {args.rounds} rounds, load {os.getloadavg()}")
        # Rounds interleave the contenders, so load from other processes falls on all alike.
        for i in range(args.rounds):
            for name in args.contenders:
                r = run_contender(name, d, args.budget_mib)
                results[name].append(r)
                print(f"  round {i + 1} {name}: {r.get('time', r.get('error'))}", flush=True)
    finally:
        shutil.rmtree(d, ignore_errors=True)
    print(f"load after: {os.getloadavg()}")
    report = print_table(results, args)
    write_report(report, args.json)


# ---------------------------------------------------------------- report


def print_table(results: dict[str, list[dict]], args) -> dict:
    """Print the table (medians and maxima over the rounds), the differences from
    jax-memory and the targets; return it all."""
    x_bytes, summary = args.rows * args.cols * 4, {}
    ran = {name: recs for name, recs in results.items() if not any("error" in r for r in recs)}
    ref = ran["jax-memory"][0] if "jax-memory" in ran else None
    print(
        f"\n{'contender':<14} {'median s':>9} {'read/X':>7} {'wrote MiB':>10} {'peak MiB':>9}"
        f" {'above base':>11} {'loss diff':>10} {'grad diff':>10} {'param diff':>10}"
    )
    for name, recs in results.items():
        if name not in ran:
            print(f"{name:<14} failed: {next(r['error'] for r in recs if 'error' in r)}")
            continue
        r = summary[name] = {"median_s": statistics.median(rec["time"] for rec in recs)}
        for k in ("peak_rss_mib", "above_base_mib", "read", "written"):
            r[k] = max(rec[k] for rec in recs)
        for k in OUTPUTS if ref else ():
            r[f"{k}_rel_diff"] = max(rel(rec[k], ref[k]) for rec in recs)
        diffs = "".join(f" {r.get(f'{k}_rel_diff', np.nan):>10.1e}" for k in OUTPUTS)
        print(
            f"{name:<14} {r['median_s']:>9.3f} {r['read'] / x_bytes:>7.3f} {r['written'] / MIB:>10.2f}"
            f" {r['peak_rss_mib']:>9.0f} {r['above_base_mib']:>11.0f}{diffs}"
        )
    med = {name: r["median_s"] for name, r in summary.items()}
    g = summary.get("gradpipe", {})
    floor = min((med[f] for f in FLOORS if f in med), default=None)

    def ratio(a, b):
        return a / b if a is not None and b else None

    rows = [
        ("gradpipe / faster floor", ratio(med.get("gradpipe"), floor), 2.0),
        ("gradpipe / dask", ratio(med.get("gradpipe"), med.get("dask")), 1.0),
        ("gradpipe read / X per step", ratio(g.get("read"), x_bytes), 2.05),
        ("gradpipe written MiB per step", ratio(g.get("written"), MIB), 1.0),
        ("gradpipe above base MiB", g.get("above_base_mib"), args.budget_mib + 64),
    ]
    rows += [(f"gradpipe {k} vs jax-memory", g.get(f"{k}_rel_diff"), AGREE) for k in OUTPUTS]
    print(f"\n{'target':<38} {'measured':>9}  {'limit':>8}")
    targets = []
    for label, value, limit in rows:
        ok = None if value is None else bool(value <= limit)
        shown = "n/a" if ok is None else f"{value:.3g}"
        print(f"{label:<38} {shown:>9}  <= {limit:<6g} {VERDICT[ok]}")
        targets.append({"target": label, "measured": value, "limit": limit, "pass": ok})
    for a, b in [("dask", "numpy-memory"), ("jax-memory", "numpy-memory")]:
        if a in med and b in med:
            print(f"{f'(info) {a} / {b}':<38} {med[a] / med[b]:>9.3g}")
    config = {k: getattr(args, k) for k in ("rows", "cols", "budget_mib", "rounds")}
    report = {"config": config, "x_bytes": x_bytes, "summary": summary, "targets": targets}
    return dict(report, rounds=results)


if __name__ == "__main__":
    main()
