"""Which shape of a hand-written loop reaches the host link's speed on an accelerator.

A diagnostic for issue 33 (not a benchmark): the least-squares and MLP steps of
`benchmarks/ooc_device.py` over X of ``size`` GiB, written by hand in variants that
each add one thing gradpipe's pass does to the peer's loop (a bounded queue, pages
dropped after a block's program ran, dropped on a thread of their own, populated
before the send, smaller blocks, blocks read into reused buffers instead of mapped),
beside gradpipe itself (and with its pages released on a thread: X's tiles are
mapped views, so nothing goes back to the pass's buffer pool). Two rounds of
``repeats`` steps each, medians.

    python3 tools/device_loops.py 2            # on the accelerator
    python3 tools/device_loops.py 0.25 --cpu   # on JAX's CPU device
"""

from __future__ import annotations

import collections
import contextlib
import ctypes
import io
import mmap
import os
import platform
import re
import shutil
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import ooc_device as od
from _params_workloads import WORKLOADS
from gradpipe import ooc
from gradpipe.ooc.execution import _one_pass, _tile_program
from gradpipe.ooc.planning import _chain_read

GIB, K, BUDGET, HEADER = 2**30, 256, 512 * 2**20, 4096
_libc = ctypes.CDLL(None, use_errno=True)
_libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
_KERNEL = tuple(int(p) for p in re.findall(r"\d+", os.uname().release)[:2])
POPULATE_READ = 22 if _KERNEL >= (5, 14) else mmap.MADV_WILLNEED


def _loop(w, params, mapped, target, block_rows, ahead, drop=False, bg=False, populate=False):
    """Blocks sent and their programs queued, at most ``ahead`` queued behind the one
    waited for; ``drop``: its pages dropped once its program ran (``bg``: on a thread
    of its own); ``populate``: its pages mapped before the send."""
    n, row_bytes = mapped.shape[0], mapped.strides[0]
    base = mapped.ctypes.data  # (row 0's address, page-aligned)
    pool = ThreadPoolExecutor(1)

    @jax.jit
    def share(p, xb, tb):
        return jax.value_and_grad(lambda p: jnp.sum(w.row_loss(jnp, p, xb, tb)) / n)(p)

    def span(r):
        start = r * row_bytes // mmap.PAGESIZE * mmap.PAGESIZE
        return start, min(n, r + block_rows) * row_bytes - start

    def advise(r, advice):
        start, length = span(r)
        if _libc.madvise(base + start, length, advice) != 0:
            raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))

    def step():
        value, grads, queue, pending = 0.0, None, collections.deque(), []
        for r in range(0, n, block_rows):
            sl = slice(r, r + block_rows)
            if populate:
                advise(r, POPULATE_READ)
            v, g = share(params, *jax.device_put((mapped[sl], target[sl])))
            queue.append((r, v))
            value = value + v
            grads = g if grads is None else jax.tree.map(jnp.add, grads, g)
            while len(queue) > ahead:
                r0, v0 = queue.popleft()
                v0.block_until_ready()
                if drop:
                    pending.append(pool.submit(advise, r0, 4)) if bg else advise(r0, 4)
        for r0, v0 in queue:
            v0.block_until_ready()
            if drop:
                advise(r0, 4)
        for f in pending:
            f.result()
        return value, grads

    return step


def _read_loop(w, params, fd, target, n, block_rows, ahead, threads):
    """Blocks read with ``pread`` by ``threads`` threads into ``ahead + 1`` buffers
    reused in turn (a buffer is refilled once its program ran)."""
    pool = ThreadPoolExecutor(threads)
    buffers = [np.empty((block_rows, K), np.float32) for _ in range(ahead + 1)]

    @jax.jit
    def share(p, xb, tb):
        return jax.value_and_grad(lambda p: jnp.sum(w.row_loss(jnp, p, xb, tb)) / n)(p)

    def fill(buf, r, rows):
        part = -(-rows // threads)
        views = memoryview(buf.reshape(-1).view(np.uint8))
        row_bytes = 4 * K

        def one(i):
            a, b = i * part, min(rows, (i + 1) * part)
            if a < b:
                os.preadv(fd, [views[a * row_bytes : b * row_bytes]], HEADER + (r + a) * row_bytes)

        list(pool.map(one, range(threads)))
        return buf[:rows]

    def step():
        value, grads, queue = 0.0, None, collections.deque()
        for i, r in enumerate(range(0, n, block_rows)):
            while len(queue) > ahead - 1:
                queue.popleft().block_until_ready()
            rows = min(block_rows, n - r)
            xb = fill(buffers[i % len(buffers)], r, rows)
            v, g = share(params, *jax.device_put((xb, target[r : r + rows])))
            queue.append(v)
            value = value + v
            grads = g if grads is None else jax.tree.map(jnp.add, grads, g)
        return value, grads

    return step


def _gradpipe(w, params, X, t, device, ahead=2, bg=False):
    fn = jax.value_and_grad(lambda p: ooc.mean(w.row_loss(ooc, p, X, t)))
    release = _chain_read.Evaluation.release
    release_views = _tile_program.Tile.release_views
    pool = ThreadPoolExecutor(1)

    def step():
        _one_pass.DEVICE_AHEAD = ahead
        if bg:  # (each piece's pages, then the rest of each tile's)
            _chain_read.Evaluation.release = lambda self: pool.submit(release, self)
            _tile_program.Tile.release_views = lambda self: pool.submit(release_views, self)
        try:
            with ooc.MemoryBudget(BUDGET, device=device):
                return fn(params)
        finally:
            _one_pass.DEVICE_AHEAD = 2
            _chain_read.Evaluation.release = release
            _tile_program.Tile.release_views = release_views

    return step


def main() -> None:
    size = float(sys.argv[1]) if len(sys.argv) > 1 else 2.0
    repeats = int(sys.argv[2]) if len(sys.argv) > 2 and sys.argv[2].isdigit() else 5
    device = jax.devices("cpu")[0] if "--cpu" in sys.argv else None
    print(jax.devices(), platform.uname().release, os.cpu_count(), flush=True)
    with contextlib.suppress(OSError):
        print(Path("/sys/kernel/mm/transparent_hugepage/enabled").read_text().strip())
    d = Path(tempfile.mkdtemp(prefix="gradpipe-loops-"))
    ooc.set_scratch_dir(d / "scratch")
    try:
        rows = int(size * GIB) // (4 * K)
        with contextlib.redirect_stdout(io.StringIO()):
            X, mapped, targets, disk = od._inputs(Path(tempfile.mkdtemp(dir=d)), rows, BUDGET)
        probe = np.frombuffer(mapped._mmap, np.uint8, 1).ctypes.data
        ok = _libc.madvise(probe, mmap.PAGESIZE, 22)
        print(f"X = {size} GiB; MADV_POPULATE_READ: {ok} {os.strerror(ctypes.get_errno())}")
        fd = os.open(mapped.filename, os.O_RDONLY)
        b = BUDGET // 4 // (4 * K)
        for name, w in WORKLOADS.items():
            params = jax.device_put(w.init(K))
            tg = targets[w.target]
            runs = {
                "hand loop": od._hand_loop(w, params, mapped, tg, b),
                "loop in budget": od._hand_loop(w, params, mapped, tg, b, True),
                "ahead 2": _loop(w, params, mapped, tg, b, 2),
                "ahead 2 drop": _loop(w, params, mapped, tg, b, 2, drop=True),
                "ahead 2 drop bg": _loop(w, params, mapped, tg, b, 2, drop=True, bg=True),
                "ahead 2 drop populate": _loop(w, params, mapped, tg, b, 2, True, populate=True),
                "ahead 16": _loop(w, params, mapped, tg, b, 16),
                "64M ahead 5 drop": _loop(w, params, mapped, tg, b // 2, 5, drop=True),
                "32M ahead 11 drop": _loop(w, params, mapped, tg, b // 4, 11, drop=True),
                "32M ahead 11 drop bg": _loop(w, params, mapped, tg, b // 4, 11, True, True),
                "pread 4t ahead 2": _read_loop(w, params, fd, tg, rows, b, 2, 4),
                "pread 8t 64M ahead 5": _read_loop(w, params, fd, tg, rows, b // 2, 5, 8),
                "gradpipe": _gradpipe(w, params, X, disk[w.target], device),
                "gradpipe bg release": _gradpipe(w, params, X, disk[w.target], device, bg=True),
                "gradpipe 3 bg release": _gradpipe(w, params, X, disk[w.target], device, 3, True),
            }
            times = collections.defaultdict(list)
            ref = None
            for v, fn in runs.items():
                out = jax.block_until_ready(fn())  # compiles
                if ref is None:
                    ref = out
                diff = od._difference(out, ref)
                assert diff < 1e-4, (v, diff)
            for _ in range(2):
                for v, fn in runs.items():
                    mapped._mmap.madvise(mmap.MADV_DONTNEED)
                    for _ in range(repeats):
                        start = time.perf_counter()
                        jax.block_until_ready(fn())
                        times[v].append(time.perf_counter() - start)
            for v in runs:
                ms = statistics.median(times[v]) * 1e3
                gbs = X.nbytes / statistics.median(times[v]) / 1e9
                print(f"{name} {v:24} {ms:8.1f} ms  {gbs:5.1f} GB/s  min {min(times[v]) * 1e3:.1f}")
            sys.stdout.flush()
        os.close(fd)
    finally:
        ooc.set_scratch_dir(None)
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
