"""The interpreter's garbage collections inside a loss's pass, with the collector paused
for the pass (`gradpipe.ooc.execution._collector`) and as it is.

A diagnostic for issue 33: the least-squares and MLP steps of
`benchmarks/ooc_device.py` on JAX's CPU device over X of ``size`` GiB, in pieces of
at most ``piece_bytes`` (fewer bytes, more pieces a step: 700000 gives a 0.25 GiB X
as many pieces as a 24 GiB one has in 64 MiB pieces); for each, the median step and
the collections that ran inside its passes and outside them (how many, their time a
step, the full ones), and the cyclic garbage the paused passes leave.

    python3 tools/pass_collections.py 0.25 10 700000
"""

from __future__ import annotations

import contextlib
import gc
import io
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import jax

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import ooc_device as od
from _params_workloads import WORKLOADS
from gradpipe import ooc
from gradpipe.ooc.execution import _one_pass

K, BUDGET = 256, 512 * 2**20
_inside = [False]
_pauses: list[tuple[int, float, bool]] = []  # generation, time, inside a pass
_started = [0.0]


def _marked(run):
    def marked(*a, **k):
        _inside[0] = True
        try:
            return run(*a, **k)
        finally:
            _inside[0] = False

    return marked


def _timing(phase: str, info: dict) -> None:
    if phase == "start":
        _started[0] = time.perf_counter()
    else:
        _pauses.append((info["generation"], time.perf_counter() - _started[0], _inside[0]))


def main() -> None:
    size = float(sys.argv[1]) if len(sys.argv) > 1 else 0.25
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 10
    if len(sys.argv) > 3:
        _one_pass.DEVICE_PIECE_BYTES = int(sys.argv[3])
    rows = int(size * 2**30) // (4 * K)
    d = Path(tempfile.mkdtemp(prefix="gradpipe-collections-"))
    ooc.set_scratch_dir(d / "scratch")
    _one_pass._pass = _marked(_one_pass._pass)
    gc.callbacks.append(_timing)
    paused, device = _one_pass.collector_paused, jax.devices("cpu")[0]
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            X, _, _, disk = od._inputs(d, rows, BUDGET)
        for name, w in WORKLOADS.items():
            params = jax.device_put(w.init(K))
            t = disk[w.target]
            fn = jax.value_and_grad(lambda p, w=w, t=t: ooc.mean(w.row_loss(ooc, p, X, t)))

            def step(fn=fn, params=params):
                with ooc.MemoryBudget(BUDGET, device=device):
                    return jax.block_until_ready(fn(params))

            step()  # compiles
            for label in ("as it is", "paused", "as it is", "paused"):
                _one_pass.collector_paused = paused if label == "paused" else contextlib.nullcontext
                _pauses.clear()
                times = []
                for _ in range(steps):
                    start = time.perf_counter()
                    step()
                    times.append(time.perf_counter() - start)
                parts = []
                for where, inside in (("in its passes", True), ("outside them", False)):
                    mine = [(g, p) for g, p, i in _pauses if i == inside]
                    full = [p for g, p in mine if g == 2]
                    every = sum(p for _, p in mine) * 1e3 / steps
                    parts.append(
                        f"{where}: {len(mine)} collections, {every:5.1f} ms a step, "
                        f"{len(full)} full ({sum(full) * 1e3 / steps:.1f} ms a step)"
                    )
                ms = statistics.median(times) * 1e3
                print(f"{name} {label:12} step {ms:6.1f} ms; " + "; ".join(parts), flush=True)
            # what the paused collector leaves: the cycles its passes made
            _one_pass.collector_paused = paused
            gc.collect()
            for _ in range(steps):
                step()
            left = gc.collect()
            print(
                f"{name} cyclic garbage after {steps} steps, the collector paused in each "
                f"pass: {left} objects",
                flush=True,
            )
    finally:
        _one_pass.collector_paused = paused
        ooc.set_scratch_dir(None)
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
