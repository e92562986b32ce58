"""Where a gradpipe training step's time goes on an accelerator, beside the hand loop.

A diagnostic for issue 33 (not a benchmark): the least-squares and MLP steps of
`benchmarks/ooc_device.py` over a 4 MiB X (the eager step's own cost) and over X of
``size`` GiB, with the pass's own steps timed in place (the tile's gathering, the
sends, the programs' launch, the waits for them, the pages' release, the folds),
in variants: sums folded on the device or brought back tile by tile
(`SUMS_ON_DEVICE`), pages faulted by the transfers rather than asked for first
(`POPULATE_VIEWS`), the interpreter's thread switch at 0.2 ms rather than 5, or
pages kept (kept: over the budget, for comparison only); beside the hand loop and the
loop by hand in 64 MiB blocks that keeps the link busy (`device_loops.py`). Two rounds of six
steps each, medians; each part is its total a step.

    python3 tools/device_diag.py 2          # on the accelerator (via tools/on_device.sh's set-up)
    python3 tools/device_diag.py 0.25 --cpu # the device path on JAX's CPU device
"""

from __future__ import annotations

import collections
import contextlib
import io
import mmap
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import jax

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import device_loops

import ooc_device as od
from _params_workloads import WORKLOADS
from gradpipe import ooc
from gradpipe.ooc.execution import _one_pass, _tile_flow, _tile_program
from gradpipe.ooc.planning import _chain_read
from gradpipe.ooc.storage import _file_map

GIB, K, BUDGET = 2**30, 256, 512 * 2**20
_parts: collections.defaultdict[str, float] = collections.defaultdict(float)
_keep_pages = [False]


def _timed(name, fn):
    def timed(*a, **k):
        start = time.perf_counter()
        try:
            return fn(*a, **k)
        finally:
            _parts[name] += time.perf_counter() - start

    return timed


def _instrument() -> None:
    jax.device_put = _timed("device_put", jax.device_put)
    _tile_program.populate = _timed("populate", _tile_program.populate)
    _one_pass.launch = _timed("launch", _one_pass.launch)
    _one_pass.Tile = _timed("Tile", _one_pass.Tile)
    _one_pass._forward = _timed("pass", _one_pass._forward)
    _tile_flow.settle_pieces = _timed("settle", _tile_flow.settle_pieces)
    _tile_flow.fold_tile = _timed("fold", _tile_flow.fold_tile)
    release_views = _tile_program.Tile.release_views

    def maybe_release_views(self):
        if not _keep_pages[0]:
            release_views(self)

    _tile_program.Tile.release_views = _timed("release piece", maybe_release_views)
    if _file_map._madvise is not None:  # (None: no C library, `mmap.madvise` used)
        _file_map._madvise = _timed("madvise", _file_map._madvise)
    release = _chain_read.Evaluation.release

    def maybe_release(self):
        if _keep_pages[0]:
            self.leaves.clear()
        else:
            release(self)

    _chain_read.Evaluation.release = _timed("release", maybe_release)


def _variants(w, params, X, t, mapped, target, rows, device):
    block_rows = min(rows, max(1, BUDGET // 4 // (4 * K)))
    fn = jax.value_and_grad(lambda p: ooc.mean(w.row_loss(ooc, p, X, t)))

    def gradpipe(sums=True, keep=False, populate=True, switch=None):
        def step():
            _one_pass.SUMS_ON_DEVICE, _keep_pages[0] = sums, keep
            _tile_program.POPULATE_VIEWS, interval = populate, sys.getswitchinterval()
            sys.setswitchinterval(switch or interval)
            try:
                with ooc.MemoryBudget(BUDGET, device=device):
                    return fn(params)
            finally:
                _one_pass.SUMS_ON_DEVICE, _keep_pages[0] = True, False
                _tile_program.POPULATE_VIEWS = True
                sys.setswitchinterval(interval)

        return step

    return {
        "hand loop": od._hand_loop(w, params, mapped, target, block_rows),
        "loop in budget": od._hand_loop(w, params, mapped, target, block_rows, True),
        "64M loop, 5 queued": device_loops._loop(
            w, params, mapped, target, block_rows // 2, 5, True
        ),
        "gradpipe": gradpipe(),
        "pages faulted": gradpipe(populate=False),
        "GIL switch 0.2 ms": gradpipe(switch=2e-4),
        "tile by tile": gradpipe(sums=False),
        "pages kept": gradpipe(keep=True),
    }


def main() -> None:
    size = float(sys.argv[1]) if len(sys.argv) > 1 else 2.0
    device = jax.devices("cpu")[0] if "--cpu" in sys.argv else None
    _instrument()
    print(jax.devices(), flush=True)
    d = Path(tempfile.mkdtemp(prefix="gradpipe-diag-"))
    ooc.set_scratch_dir(d / "scratch")
    try:
        for size_gib, repeats in [(1 / 256, 21), (size, 6)]:
            rows = int(size_gib * GIB) // (4 * K)
            with contextlib.redirect_stdout(io.StringIO()):
                X, mapped, targets, disk = od._inputs(Path(tempfile.mkdtemp(dir=d)), rows, BUDGET)
            print(f"X = {size_gib} GiB", flush=True)
            for name, w in WORKLOADS.items():
                params = jax.device_put(w.init(K))
                runs = _variants(
                    w, params, X, disk[w.target], mapped, targets[w.target], rows, device
                )
                times = collections.defaultdict(list)
                parts = collections.defaultdict(lambda: collections.defaultdict(float))
                for fn in runs.values():
                    jax.block_until_ready(fn())  # compiles
                for _ in range(2):
                    for v, fn in runs.items():
                        mapped._mmap.madvise(mmap.MADV_DONTNEED)
                        for _ in range(repeats):
                            _parts.clear()
                            start = time.perf_counter()
                            jax.block_until_ready(fn())
                            times[v].append(time.perf_counter() - start)
                            for k, x in _parts.items():
                                parts[v][k] += x / (2 * repeats)
                for v in runs:
                    each = " ".join(f"{k}={x * 1e3:.1f}" for k, x in sorted(parts[v].items()))
                    ms = statistics.median(times[v]) * 1e3
                    print(f"{name} {v:22} {ms:8.1f} ms  {each}", flush=True)
    finally:
        ooc.set_scratch_dir(None)
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
