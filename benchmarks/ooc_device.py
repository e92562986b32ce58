"""Out of core on the accelerator: a training step over data larger than the chip.

The least-squares and MLP steps of `ooc_params.py` (`_params_workloads`: the loss and
the gradient of every parameter; float32 ``X`` (N, K = 256) on disk, JAX parameters
on JAX's default device) at several sizes of ``X``, against:

- ``hand loop`` (peer): what a JAX user writes by hand. Row blocks of an ``np.memmap``
  of ``X``'s bytes (budget/4 each), each sent with ``jax.device_put`` one block
  ahead of the one computing, a jitted per-block ``jax.value_and_grad`` of the
  block's share of the loss, values and gradients summed on the device.
- ``loop in budget`` (peer within the budget): the same loop dropping each block's
  pages of the map once the next block's program is queued; the hand loop's map
  keeps every page it read, so its memory grows to ``X``'s size (``rss`` says so).
- ``resident`` (floor, where ``X`` fits half the device's memory): ``X`` on the
  device, one jitted ``jax.value_and_grad``.
- ``gradpipe``: ``jax.value_and_grad`` of the whole-array loss over
  ``ooc.DiskArray``s under ``ooc.MemoryBudget(budget)``: its pass computes on the
  default device (`MemoryBudget(device=None)`); ``gradpipe jit`` the same under
  ``jax.jit`` (the pass then runs in a host callback of the jitted program, and
  computes on the host: the device runs no other program meanwhile); ``gradpipe
  faults`` (``--faults``) sends the mapped tiles without populating their pages first;
  ``gradpipe whole tiles`` (``--whole-tiles``) sends each tile as one piece.

One process (one program at a time may hold a TPU); each contender takes one
untimed step (compiles), then ``--repeats`` timed ones: the median, the effective
rate (bytes of ``X`` a second), and for gradpipe the bytes read and written and
where its pass ran (`ooc.explain`). Every contender's loss and gradients are
compared with the hand loop's (the largest difference over the largest entry).

    python benchmarks/ooc_device.py                              # 2, 8, 24 GiB: the recorded run
    python benchmarks/ooc_device.py --sizes-gib 0.25 --repeats 2  # a smoke test (any machine)

``X`` is written once per size as a gradpipe array file whose pages are whole rows,
so its bytes after the 4096-byte header are ``X`` in C order: the hand loop maps
those same bytes (checked against gradpipe's reading of the first and last rows).
"""

from __future__ import annotations

import argparse
import json
import mmap
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from _measure import status_mib
from _params_workloads import CLASSES, WORKLOADS

GIB, MIB, HEADER = 2**30, 2**20, 4096
K = 256


def _inputs(d: Path, rows: int, budget: int):
    """``X`` (as a DiskArray and a map of its bytes) and both targets, in ``d``."""
    from gradpipe import ooc

    rng = np.random.default_rng(0)
    w_true = rng.standard_normal(K).astype(np.float32)
    teacher = rng.standard_normal((K, CLASSES)).astype(np.float32) / np.sqrt(K)
    y, labels = np.empty(rows, np.float32), np.empty(rows, np.int32)

    page_rows = max(1, budget // 16 // (4 * K))
    # one page of random rows, each page of X that page rolled and shifted (drawing
    # gigabytes of normal numbers would take longer than the whole benchmark)
    base = rng.standard_normal((page_rows, K), np.float32)

    def make(a, b):
        block = np.roll(base[: b - a], a % 7919, axis=1) + np.float32((a // page_rows) % 13 / 13)
        y[a:b] = block @ w_true + 0.5 + 0.1 * rng.standard_normal(b - a, np.float32)
        labels[a:b] = np.argmax(block @ teacher, axis=1)
        return block

    start = time.perf_counter()
    X = ooc.DiskArray.from_row_blocks(
        (rows, K), np.float32, make, path=d / "X.gpa", page_shape=(page_rows, K)
    )
    print(f"  wrote X ({rows * K * 4 / GIB:.2f} GiB) in {time.perf_counter() - start:.1f} s")
    mapped = np.memmap(d / "X.gpa", np.float32, "r", offset=HEADER, shape=(rows, K))
    for part in (slice(0, 2), slice(rows - 2, rows)):
        assert np.array_equal(mapped[part], X[part].to_numpy()), "X.gpa is not C order"
    targets = {"y": y, "labels": labels}
    disk = {
        name: ooc.DiskArray.from_numpy(v, path=d / f"{name}.gpa") for name, v in targets.items()
    }
    return X, mapped, targets, disk


def _timed(fn, repeats):
    import jax

    jax.block_until_ready(fn())  # compiles
    times, out = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        out = jax.block_until_ready(fn())
        times.append(time.perf_counter() - start)
    return statistics.median(times), out


def _hand_loop(w, params, mapped, target, block_rows, drop=False):
    """The loop a JAX user writes; ``drop``: within the budget, each block's pages
    of the map dropped once the next block's program is queued (else the map keeps
    every page it touched, X's size in the process's memory)."""
    import jax
    import jax.numpy as jnp

    n = mapped.shape[0]
    row_bytes = mapped.strides[0]

    @jax.jit
    def share(p, xb, tb):
        return jax.value_and_grad(lambda p: jnp.sum(w.row_loss(jnp, p, xb, tb)) / n)(p)

    def forget(r):  # (a file's page dropped is read again from the page cache)
        start = (HEADER + r * row_bytes) // mmap.PAGESIZE * mmap.PAGESIZE
        end = HEADER + min(n, r + block_rows) * row_bytes
        mapped._mmap.madvise(mmap.MADV_DONTNEED, start, end - start)

    def step():
        ahead = jax.device_put((mapped[:block_rows], target[:block_rows]))
        value, grads = 0.0, None
        for r in range(0, n, block_rows):
            current = ahead
            if r + block_rows < n:
                nxt = slice(r + block_rows, r + 2 * block_rows)
                ahead = jax.device_put((mapped[nxt], target[nxt]))
            v, g = share(params, *current)
            if drop and r >= block_rows:
                forget(r - block_rows)
            value = value + v
            grads = g if grads is None else jax.tree.map(jnp.add, grads, g)
        if drop:
            forget((n - 1) // block_rows * block_rows)  # the last block
        return value, grads

    return step


def _resident(w, params, mapped, target):
    import jax
    import jax.numpy as jnp

    X, t = jax.device_put(np.asarray(mapped)), jax.device_put(target)
    f = jax.jit(jax.value_and_grad(lambda p, X, t: jnp.mean(w.row_loss(jnp, p, X, t))))
    return (lambda: f(params, X, t)), (X, t)


def _gradpipe(w, params, X, t, budget, jit, populate=True, pieces=True):
    import jax

    from gradpipe import ooc
    from gradpipe.ooc.execution import _one_pass, _tile_program

    fn = jax.value_and_grad(lambda p: ooc.mean(w.row_loss(ooc, p, X, t)))
    fn = jax.jit(fn) if jit else fn
    piece_bytes = _one_pass.DEVICE_PIECE_BYTES

    def step():
        _tile_program.POPULATE_VIEWS = populate
        _one_pass.DEVICE_PIECE_BYTES = piece_bytes if pieces else 2**62
        try:
            with ooc.MemoryBudget(budget):
                return fn(params)
        finally:
            _tile_program.POPULATE_VIEWS = True
            _one_pass.DEVICE_PIECE_BYTES = piece_bytes

    return step


def _difference(got, want):
    import jax

    worst = 0.0
    for g, r in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        g, r = np.asarray(g, np.float64), np.asarray(r, np.float64)
        worst = max(worst, float(np.max(np.abs(g - r)) / max(np.max(np.abs(r)), 1e-30)))
    return worst


def run(args) -> list[dict]:
    import jax

    from gradpipe import ooc

    device = jax.devices()[0]
    stats = device.memory_stats() or {}
    device_bytes = int(stats.get("bytes_limit", 0))
    print(f"device: {device} ({device.device_kind}), memory {device_bytes / GIB:.1f} GiB")
    budget = args.budget_mib * MIB
    results = []
    for size in args.sizes_gib:
        rows = int(size * GIB) // (4 * K)
        d = Path(tempfile.mkdtemp(prefix="gradpipe-device-", dir=args.dir))
        ooc.set_scratch_dir(d / "scratch")
        try:
            print(f"X = {size} GiB ({rows} x {K} float32), budget {args.budget_mib} MiB")
            X, mapped, targets, disk = _inputs(d, rows, budget)
            for name in args.workloads:
                w = WORKLOADS[name]
                params = jax.device_put(w.init(K))
                target = targets[w.target]
                block_rows = max(1, budget // 4 // (4 * K))
                runs = {
                    "hand loop": _hand_loop(w, params, mapped, target, block_rows),
                    "loop in budget": _hand_loop(w, params, mapped, target, block_rows, True),
                }
                keep = None
                if device_bytes == 0 or X.nbytes <= device_bytes // 2:
                    runs["resident"], keep = _resident(w, params, mapped, target)
                runs["gradpipe"] = _gradpipe(w, params, X, disk[w.target], budget, False)
                if args.faults:
                    runs["gradpipe faults"] = _gradpipe(
                        w, params, X, disk[w.target], budget, False, populate=False
                    )
                if args.whole_tiles:
                    runs["gradpipe whole tiles"] = _gradpipe(
                        w, params, X, disk[w.target], budget, False, pieces=False
                    )
                if args.jit:
                    runs["gradpipe jit"] = _gradpipe(w, params, X, disk[w.target], budget, True)
                outs = {}
                first = len(results)
                for contender, fn in list(runs.items()):
                    mapped._mmap.madvise(mmap.MADV_DONTNEED)  # (what an earlier one mapped)
                    rss = status_mib("VmRSS")
                    before = ooc.io_stats()
                    try:
                        seconds, outs[contender] = _timed(fn, args.repeats)
                    except Exception as e:  # (the hand loop queues every block: see --help)
                        print(f"  {name:4} {contender:20} FAILED: {type(e).__name__}: {e}"[:400])
                        results.append(
                            {
                                "size_gib": size,
                                "workload": name,
                                "contender": contender,
                                "failed": str(e)[:400],
                            }
                        )
                        del runs[contender]
                        continue
                    io = ooc.io_stats() - before
                    row = {
                        "size_gib": size,
                        "workload": name,
                        "contender": contender,
                        "seconds": seconds,
                        "gb_per_s": X.nbytes / seconds / 1e9,
                        "rss_mib": status_mib("VmRSS") - rss,  # what it keeps in the process
                    }
                    if contender.startswith("gradpipe"):
                        row["read_per_step_x"] = io.bytes_read / (args.repeats + 1) / X.nbytes
                        row["written_mib"] = io.bytes_written / (args.repeats + 1) / MIB
                    results.append(row)
                    print(
                        f"  {name:4} {contender:20} {seconds:8.3f} s  {row['gb_per_s']:6.2f} GB/s"
                        f"  rss +{row['rss_mib']:.0f} MiB"
                        + (
                            f"  read {row['read_per_step_x']:.3f} X, wrote {row['written_mib']:.1f} MiB"
                            if "read_per_step_x" in row
                            else ""
                        ),
                        flush=True,
                    )
                del keep
                if "gradpipe" in runs:
                    with ooc.MemoryBudget(budget):
                        plan = ooc.explain(runs["gradpipe"])
                    print("\n".join("    " + line for line in str(plan).splitlines()))
                these = results[first:]  # (this size's and workload's, those that ran)
                these = [r for r in these if "seconds" in r and r["contender"] in outs]
                ref = next((r for r in these if r["contender"] == "hand loop"), None)
                bounded = next((r for r in these if r["contender"] == "loop in budget"), None)
                for row in these if ref is not None else []:
                    row["difference"] = _difference(outs[row["contender"]], outs["hand loop"])
                    row["hand_loop_x"] = row["seconds"] / ref["seconds"]
                    if bounded is not None:
                        row["budget_loop_x"] = row["seconds"] / bounded["seconds"]
                    print(
                        f"  {name:4} {row['contender']:20} {row['hand_loop_x']:6.2f}x the hand loop,"
                        + (
                            f" {row['budget_loop_x']:.2f}x the loop in budget,"
                            if "budget_loop_x" in row
                            else ""
                        )
                        + f" difference {row['difference']:.1e}"
                    )
        finally:
            ooc.set_scratch_dir(None)
            shutil.rmtree(d, ignore_errors=True)
    return results


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes-gib", type=float, nargs="+", default=[2, 8, 24])
    p.add_argument("--budget-mib", type=int, default=512)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--workloads", nargs="+", default=["lsq", "mlp"], choices=sorted(WORKLOADS))
    p.add_argument("--jit", action="store_true", help="also time gradpipe under jax.jit")
    p.add_argument(
        "--faults",
        action="store_true",
        help="also time gradpipe sending mapped tiles unpopulated (their pages faulted in)",
    )
    p.add_argument(
        "--whole-tiles",
        action="store_true",
        help="also time gradpipe sending each tile whole (not in pieces: `DEVICE_PIECE_BYTES`)",
    )
    p.add_argument("--dir", default=None, help="where X is written (default: the temp dir)")
    p.add_argument("--json", default=None, help="write the rows here")
    args = p.parse_args()
    results = run(args)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))
    main()
