"""Out-of-core training step: one jitted optax adam step, JAX parameters on disk data.

float32 ``X`` (N, K) on disk: 1 GiB, K = 256, N = 1,048,576, against a 256 MiB
budget by default; a step is the loss and gradient, then ``optax.adam(1e-3)``. Two
workloads (`_params_workloads`), the same ``X`` for both: ``lsq``, least squares
``mean(square(X @ w + b - y))``; ``mlp``, ``z = tanh(X @ W1 + b1) @ W2 + b2`` (64
hidden units, 16 classes) and ``mean(logsumexp(z) - z[label])`` over int32 labels.
Each contender runs in its own subprocess, once a round, the rounds interleaving
workloads and contenders; a worker takes one untimed step (the jit compiles there)
and times the next. The tables: median s per step, bytes read / X, MiB written, peak
RSS, the difference from ``jax-memory``, and the targets of issue 32 with the parts
each of gradpipe's ratios is made of.

    .venv/bin/python benchmarks/ooc_params.py            # 1 GiB, 256 MiB, 5 rounds, both: the recorded run
    .venv/bin/python benchmarks/ooc_params.py --quick    # 65536 x 64, 16 MiB, 2 rounds: a smoke test
    .venv/bin/python benchmarks/ooc_params.py --workload mlp --cols 64 --budget-mib 64 --rounds 3 --json p.json

Contenders (each workload has each):

- ``gradpipe``: ``X`` and the target are ``ooc.DiskArray.open(...)``, the parameters
  JAX arrays; ``jax.jit`` of ``jax.value_and_grad``, ``opt.update`` and
  ``optax.apply_updates`` under ``ooc.MemoryBudget(budget)``. The timed step runs
  under ``ooc.explain`` (its recording costs nothing measurable: 0.092-0.116 s a
  step with it, 0.092-0.100 s without, least squares on 256 MiB), whose passes give
  the parts of gradpipe's ratios.
- ``jax-memory`` (floor): the same jitted step, ``X`` and the target JAX arrays in memory.
- ``numpy-memory`` (floor): NumPy in memory, the gradient by hand, adam in NumPy.
- ``numpy-mapped`` (the floor of data read through a map, for information): the same
  NumPy work on row windows of the ``.npy`` files, each window a map of its own (a
  quarter of the budget of ``X``), dropped once computed: what
  reading ``X`` through the page cache within the budget costs on this machine, with
  no reading ahead, no threads of its own and nothing else in the way.
- ``dask`` (peer): ``da.from_array`` of ``np.load(mmap_mode="r")`` in chunks of whole
  rows, about budget/8 bytes each; the same hand gradient in one ``dask.compute`` (X
  read once), threaded scheduler; adam in NumPy. The memmap goes in behind a thin
  wrapper (`_dask_input`): handed an ndarray (a memmap is one), dask's ``from_array``
  copies it whole into memory, and the timed step would read no disk at all.
- ``jax-stream`` (peer): the loop a JAX user writes by hand. Row blocks of the
  ``.npy`` files (``np.load(mmap_mode="r")``), each through a jitted
  ``jax.value_and_grad`` of the block's share of the loss (its rows' sum over N),
  values and gradients summed over the blocks; a reader thread faults the next
  block's pages in while the current one computes (a queue of one), and JAX computes
  on the mapped rows in place (`_read_ahead`). Three blocks are in memory at once,
  two (read, queued) as rows of ``X`` and the target, one computing, with what a row
  holds then (``Workload.row_bytes``); the budget is their sum. Then the same jitted
  adam step.

All start from the same parameters and take the same two steps; the second step's
loss, gradient and parameters are compared with ``jax-memory``'s (max absolute
difference over the largest reference entry), so a fast wrong answer shows.

I/O: gradpipe's ``ooc.io_stats()`` around the timed step; for the others ``rchar``/
``wchar`` (``/proc/self/io``), plus dask's resident bytes of the ``.npy`` maps and
the bytes of the blocks the streaming loop mapped (reading a memory map makes no
system call). Peak RSS: VmHWM over the timed step, reset through
``/proc/self/clear_refs`` just before it; "above base" subtracts the RSS there.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from _measure import mapped_bytes, measured, proc_io, write_report
from _params_report import print_tables
from _params_workloads import WORKLOADS, write_inputs

CONTENDERS = ["gradpipe", "jax-memory", "numpy-memory", "numpy-mapped", "dask", "jax-stream"]
MIB, PAGE = 2**20, 4096
LR, B1, B2, EPS = 1e-3, 0.9, 0.999, 1e-8  # optax.adam(1e-3) and its defaults


# ---------------------------------------------------------------- adam
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


def _optax_adam(opt, params, state, grads):
    import optax

    updates, state = opt.update(grads, state, params)
    return optax.apply_updates(params, updates), state


# ---------------------------------------------------------------- workers
def _jax_worker(name: str, w, d: Path, budget_mib: int, init: dict):
    import jax
    import jax.numpy as jnp
    import optax

    if name == "gradpipe":
        from gradpipe import ooc

        ooc.set_scratch_dir(d / "scratch")
        xp, X, t = ooc, ooc.DiskArray.open(d / "X.gpa"), ooc.DiskArray.open(d / f"{w.target}.gpa")
        budget, io_stats = ooc.MemoryBudget(budget_mib * MIB), ooc.io_stats
    else:
        X, t = (jnp.asarray(np.load(d / f"{s}.npy")) for s in ("X", w.target))
        xp, budget, io_stats = jnp, contextlib.nullcontext(), lambda: None
    opt = optax.adam(LR)

    @jax.jit
    def step(params, state, X, t):
        value, grads = jax.value_and_grad(lambda p: xp.mean(w.row_loss(xp, p, X, t)))(params)
        return (*_optax_adam(opt, params, state, grads), value, grads)

    params = {k: jnp.asarray(v) for k, v in init.items()}
    with budget:
        params, state, _, _ = jax.block_until_ready(step(params, opt.init(params), X, t))
        io0 = io_stats()
        if name == "gradpipe":  # the passes recorded: the parts of the ratios
            rec, plan = measured(lambda: ooc.explain(step, params, state, X, t))
            out, rec["parts"] = plan.result, _parts(plan, rec["time"])
        else:
            rec, out = measured(lambda: jax.block_until_ready(step(params, state, X, t)))
        io = None if io0 is None else io_stats() - io0
    rec["read"], rec["written"] = (0, 0) if io is None else (io.bytes_read, io.bytes_written)
    return rec, out


def _parts(plan, seconds: float) -> dict:
    """The passes of one step under ``ooc.explain`` summed by phase (``forward``,
    ``backward``, ...): seconds, bytes read and written, passes; ``outside`` is the
    rest of the step's ``seconds`` (dispatch, work outside any pass, the adam update)."""
    parts: dict[str, dict] = {}
    for s in plan.stages:
        p = parts.setdefault(s.phase, {"seconds": 0.0, "read": 0, "written": 0, "passes": 0})
        p["seconds"] += s.seconds
        p["read"] += s.io.bytes_read
        p["written"] += s.io.bytes_written
        p["passes"] += 1
    inside = sum(p["seconds"] for p in parts.values())
    parts["outside"] = {"seconds": seconds - inside, "read": 0, "written": 0, "passes": 0}
    return parts


def _read_ahead(paths: tuple[Path, ...], rows: int, handed: list[int]):
    """Row blocks ``[r, r + rows)`` of the ``.npy`` files at ``paths``, views of a map
    of their own, each read by a thread (one load of every page, which maps it) while
    the block before is computed. JAX on the CPU computes on such a view in place (an
    aligned host array is not copied); a copy on the thread made the step slower
    (0.12-0.27 s against 0.06-0.09 s for least squares on 256 MiB). A block's map
    goes, and its pages leave the RSS, when JAX is done with it. ``handed[0]``
    counts the bytes handed over."""
    n, ready = np.load(paths[0], mmap_mode="r").shape[0], queue.Queue(maxsize=1)

    def read():
        try:
            for r in range(0, n, rows):
                blocks = tuple(np.load(p, mmap_mode="r")[r : r + rows] for p in paths)
                for b in blocks:
                    b.reshape(-1)[:: PAGE // b.itemsize].sum()  # fault every page in
                handed[0] += sum(b.nbytes for b in blocks)
                ready.put(blocks)
            ready.put(None)
        except BaseException as e:  # handed to the loop, which raises it
            ready.put(e)

    threading.Thread(target=read, daemon=True).start()
    while (blocks := ready.get()) is not None:
        if isinstance(blocks, BaseException):
            raise blocks
        yield blocks


def _stream_worker(name: str, w, d: Path, budget_mib: int, init: dict):
    import jax
    import jax.numpy as jnp
    import optax

    paths = (d / "X.npy", d / f"{w.target}.npy")
    n, k = np.load(paths[0], mmap_mode="r").shape
    rows = max(1, budget_mib * MIB // (2 * 4 * (k + 1) + w.row_bytes(k)))  # read, queued: rows
    opt, handed = optax.adam(LR), [0]
    share = lambda p, Xb, tb: jnp.sum(w.row_loss(jnp, p, Xb, tb)) / n
    block = jax.jit(jax.value_and_grad(share))
    add = jax.jit(lambda a, b: jax.tree.map(jnp.add, a, b))
    adam = jax.jit(lambda params, state, grads: _optax_adam(opt, params, state, grads))

    def step(params, state):
        total = None
        for Xb, tb in _read_ahead(paths, rows, handed):
            part = block(params, Xb, tb)
            total = part if total is None else add(total, part)
            jax.block_until_ready(total)  # one block computing; the reader fills the next
        value, grads = total
        return (*adam(params, state, grads), value, grads)

    params = {k: jnp.asarray(v) for k, v in init.items()}
    params, state, _, _ = jax.block_until_ready(step(params, opt.init(params)))
    handed[0], io0 = 0, proc_io()
    rec, out = measured(lambda: jax.block_until_ready(step(params, state)))
    io1 = proc_io()
    rec["read"] = io1["rchar"] - io0["rchar"] + handed[0]
    rec["written"], rec["block_rows"] = io1["wchar"] - io0["wchar"], rows
    return rec, out


def _windows(path: Path, rows: int):
    """Row windows of the ``.npy`` file at ``path``, each a map of its own, unmapped
    (its pages leave the RSS) once the caller is done with it."""
    whole = np.load(path, mmap_mode="r")
    n, row = whole.shape[0], whole[:1].nbytes
    for r in range(0, n, rows):
        m = min(rows, n - r)
        yield np.memmap(path, whole.dtype, "r", whole.offset + r * row, (m, *whole.shape[1:]))


def _mapped_worker(name: str, w, d: Path, budget_mib: int, init: dict):
    xpath, tpath = d / "X.npy", d / f"{w.target}.npy"
    n, k = np.load(xpath, mmap_mode="r").shape
    rows, handed = max(1, budget_mib * MIB // 4 // (4 * k)), [0]

    def step(params, state):
        value, grads = 0.0, {key: 0.0 for key in params}
        for Xb, tb in zip(_windows(xpath, rows), _windows(tpath, rows)):
            v, g = w.hand(Xb, tb, params, lambda *parts: parts)  # (a window's mean)
            share = len(Xb) / n
            handed[0] += Xb.nbytes + tb.nbytes  # (read through the map: no system call)
            value += share * float(v)
            grads = {key: grads[key] + share * np.asarray(g[key], np.float64) for key in g}
            del Xb, tb
        grads = {key: np.asarray(g, np.float32) for key, g in grads.items()}
        return (*_numpy_adam(params, state, grads), np.float32(value), grads)

    zeros = {key: np.zeros_like(v) for key, v in init.items()}
    params, state, _, _ = step(init, (0, zeros, zeros))
    handed[0], io0 = 0, proc_io()
    rec, out = measured(lambda: step(params, state))
    io1 = proc_io()
    rec["read"] = io1["rchar"] - io0["rchar"] + handed[0]
    rec["written"], rec["block_rows"] = io1["wchar"] - io0["wchar"], rows
    return rec, out


def _numpy_worker(name: str, w, d: Path, budget_mib: int, init: dict):
    xpath, tpath = d / "X.npy", d / f"{w.target}.npy"
    if name == "numpy-memory":
        X, t = np.load(xpath), np.load(tpath)
        compute = lambda *parts: parts
    else:
        import dask

        from _dask_input import from_npy

        rows = max(1, budget_mib * MIB // 8 // (4 * np.load(xpath, mmap_mode="r").shape[1]))
        X = from_npy(xpath, chunks=(rows, -1), name="X")  # read through the map, not copied
        t = from_npy(tpath, chunks=(rows,), name=w.target)

        def compute(*parts):
            with dask.config.set(scheduler="threads"):
                return dask.compute(*parts)

    def step(params, state):
        value, grads = w.hand(X, t, params, compute)
        grads = {k: np.asarray(g, np.float32) for k, g in grads.items()}
        return (*_numpy_adam(params, state, grads), np.float32(value), grads)

    zeros = {k: np.zeros_like(v) for k, v in init.items()}
    params, state, _, _ = step(init, (0, zeros, zeros))
    io0 = proc_io()
    rec, out = measured(lambda: step(params, state))
    io1 = proc_io()
    rec["read"], rec["written"] = io1["rchar"] - io0["rchar"], io1["wchar"] - io0["wchar"]
    if name == "dask":
        rec["mapped"] = mapped_bytes(xpath, tpath)
        rec["read"] += rec["mapped"]
    return rec, out


WORKERS = {
    "gradpipe": _jax_worker,
    "jax-memory": _jax_worker,
    "numpy-memory": _numpy_worker,
    "numpy-mapped": _mapped_worker,
    "dask": _numpy_worker,
    "jax-stream": _stream_worker,
}


def worker(name: str, workload: str, d: Path, budget_mib: int) -> dict:
    """Two steps of contender ``name`` on ``workload`` and the inputs in ``d``, the
    second timed."""
    w = WORKLOADS[workload]
    init = w.init(np.load(d / "X.npy", mmap_mode="r").shape[1])
    rec, (params, _, value, grads) = WORKERS[name](name, w, d, budget_mib, init)
    flat = lambda tree: np.concatenate([np.ravel(tree[k]) for k in sorted(tree)]).tolist()
    return dict(rec, name=name, loss=float(value), grads=flat(grads), params=flat(params))


# ---------------------------------------------------------------- setup and rounds
def make_inputs(d: Path, rows: int, cols: int, budget_mib: int) -> None:
    """The inputs as ``.npy`` (`write_inputs`) and as gradpipe array files."""
    from gradpipe import ooc

    write_inputs(d, rows, cols)
    budget = ooc.MemoryBudget(budget_mib * MIB)
    for stem in ("X", "y", "labels"):
        data = np.load(d / f"{stem}.npy", mmap_mode="r")
        ooc.DiskArray.from_numpy(data, path=d / f"{stem}.gpa", budget=budget)


def run_contender(name: str, workload: str, d: Path, budget_mib: int) -> dict:
    cmd = [sys.executable, __file__, "--worker", name, "--workload", workload]
    cmd += ["--data", str(d), "--budget-mib", str(budget_mib)]
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
    p.add_argument("--workload", default="both", choices=[*WORKLOADS, "both"])
    p.add_argument("--contenders", nargs="+", default=CONTENDERS, choices=CONTENDERS)
    p.add_argument("--quick", action="store_true", help="65536 x 64, 16 MiB, 2 rounds")
    p.add_argument("--dir", default="/tmp", help="where the temporary directory goes")
    p.add_argument("--json", metavar="PATH", help="also write the results as JSON ('-': stdout)")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--data", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker, args.workload, Path(args.data), args.budget_mib)))
        return
    if args.quick:
        args.rows, args.cols, args.budget_mib, args.rounds = 65536, 64, 16, 2
    args.rows = args.rows or 2**30 // (4 * args.cols)
    workloads = list(WORKLOADS) if args.workload == "both" else [args.workload]

    d = Path(tempfile.mkdtemp(prefix="gradpipe-bench-params-", dir=args.dir))
    results = {wl: {name: [] for name in args.contenders} for wl in workloads}
    try:
        t = time.perf_counter()
        make_inputs(d, args.rows, args.cols, args.budget_mib)
        x_mib, dt = args.rows * args.cols * 4 / MIB, time.perf_counter() - t
        print(f"X {args.rows}x{args.cols} float32 ({x_mib:.1f} MiB) in {d} ({dt:.1f} s)")
        print(f"budget {args.budget_mib} MiB, {args.rounds} rounds, load {os.getloadavg()}")
        # Rounds interleave workloads and contenders: load from other processes falls on all alike.
        for i in range(args.rounds):
            for wl in workloads:
                for name in args.contenders:
                    r = run_contender(name, wl, d, args.budget_mib)
                    results[wl][name].append(r)
                    print(
                        f"  round {i + 1} {wl} {name}: {r.get('time', r.get('error'))}", flush=True
                    )
    finally:
        shutil.rmtree(d, ignore_errors=True)
    print(f"load after: {os.getloadavg()}")
    write_report(print_tables(results, args), args.json)


if __name__ == "__main__":
    main()
