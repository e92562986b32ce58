"""A loss and its parameters' gradient in one pass, against the ordinary passes.

``mean(square(tanh(X * w + b) - y) + 0.1 * tanh(X * w + b) * w)`` over float32 ``X``
and ``y`` on disk (N x K), JAX parameters ``w`` (K,) and ``b`` (), one
``jax.jit(jax.value_and_grad(...))`` step. Contenders, in one process, rounds
interleaved: gradpipe with its one-pass plan, gradpipe with it turned off (the
ordinary forward and backward passes), the forward alone, and the floor: the same
step on ``jax.numpy`` arrays in memory. Medians of ``--rounds``; bytes read and
written per step from ``ooc.io_stats``.

    .venv/bin/python benchmarks/ooc_one_pass.py                 # 2**20 x 32 (256 MiB in all)
    .venv/bin/python benchmarks/ooc_one_pass.py --rows 65536    # a smoke test
"""

from __future__ import annotations

import argparse
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

from gradpipe import ooc
from gradpipe.ooc.execution import _one_pass


def _loss(xp, X, y):
    def loss(p):
        t = xp.tanh(X * p["w"] + p["b"])
        return xp.mean(xp.square(t - y) + 0.1 * t * p["w"])

    return loss


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=2**20)
    ap.add_argument("--cols", type=int, default=32)
    ap.add_argument("--budget-mib", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    A = rng.standard_normal((args.rows, args.cols)).astype(np.float32)
    Y = rng.standard_normal((args.rows, args.cols)).astype(np.float32)
    p = {"w": jnp.linspace(0.1, 1.0, args.cols, dtype=jnp.float32), "b": jnp.float32(0.3)}
    plain = _one_pass.one_pass_reduction
    times: dict[str, list[float]] = {}
    io: dict[str, tuple[float, float]] = {}
    with ooc.MemoryBudget(args.budget_mib * 2**20):
        X, y = ooc.DiskArray.from_numpy(A), ooc.DiskArray.from_numpy(Y)
        steps = {
            "gradpipe, one pass": jax.jit(jax.value_and_grad(_loss(ooc, X, y))),
            "gradpipe, ordinary passes": jax.jit(jax.value_and_grad(_loss(ooc, X, y))),
            "gradpipe, forward alone": jax.jit(_loss(ooc, X, y)),
        }
        Xm, ym = jnp.asarray(A), jnp.asarray(Y)
        floor = jax.jit(jax.value_and_grad(_loss(jnp, Xm, ym)))
        for rnd in range(args.rounds + 1):  # round 0 compiles
            for name, fn in [*steps.items(), ("jax in memory (floor)", floor)]:
                _one_pass.one_pass_reduction = (
                    (lambda *a: False) if name == "gradpipe, ordinary passes" else plain
                )
                before = ooc.io_stats()
                start = time.perf_counter()
                jax.block_until_ready(fn(p))
                took = time.perf_counter() - start
                moved = ooc.io_stats() - before
                if rnd:
                    times.setdefault(name, []).append(took)
                    io[name] = (
                        moved.bytes_read / (A.nbytes + Y.nbytes),
                        moved.bytes_written / 2**20,
                    )
            print(f"round {rnd} done", flush=True)
    _one_pass.one_pass_reduction = plain
    one = statistics.median(times["gradpipe, one pass"])
    fwd = statistics.median(times["gradpipe, forward alone"])
    print(f"\n{args.rows} x {args.cols} float32, X and y, budget {args.budget_mib} MiB")
    print(
        f"{'contender':<28} {'median s':>9} {'read/data':>9} {'written MiB':>12} {'one pass /':>11}"
    )
    for name, ts in times.items():
        m = statistics.median(ts)
        read, written = io[name]
        print(f"{name:<28} {m:>9.3f} {read:>9.2f} {written:>12.1f} {one / m:>11.2f}")
    print(f"\none pass / forward alone: {one / fwd:.2f} (issue 34's target for a backward: <= 2.2)")


if __name__ == "__main__":
    main()
