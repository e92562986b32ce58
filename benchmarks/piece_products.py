"""The products of one piece of the least-squares step: XLA on the CPU against NumPy.

gradpipe computes a loss's pass on the host one piece at a time, each piece one XLA
program (the chain and its gradient); the NumPy floor of `benchmarks/ooc_params.py`
multiplies with OpenBLAS. This times the two products of the least-squares gradient
on one piece held in memory (``X @ w`` and ``X.T @ r``, float32, 16 MiB by default),
compiled by XLA for the CPU and in NumPy, in the same process, medians of several
runs each, one thread of work at a time: what the step's floor ratio is made of.

XLA is timed twice: on arrays aligned to 64 bytes, as a pass hands it its blocks (a
file's map, or gradpipe's aligned buffers), which JAX computes on in place; and on
arrays 16 bytes past such a boundary, where NumPy's large arrays start, which JAX
copies first at every call (the column "XLA, copied"; NumPy computes on these).
``X.T @ r, in batches`` is the product as a host program of a loss's pass computes
it (`execution/_row_products.py`): a batched product of (up to 64) blocks of rows,
summed.

    .venv/bin/python benchmarks/piece_products.py
    .venv/bin/python benchmarks/piece_products.py --rows 4096 --cols 256 --calls 64
"""

from __future__ import annotations

import argparse
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np


def _timed(fn, calls: int, repeats: int) -> float:
    """Median seconds of one call of ``fn`` (its result waited for)."""
    jax.block_until_ready(fn())
    runs = []
    for _ in range(repeats):
        t = time.perf_counter()
        for _ in range(calls):
            jax.block_until_ready(fn())
        runs.append((time.perf_counter() - t) / calls)
    return statistics.median(runs)


def _placed(a: np.ndarray, past: int) -> np.ndarray:
    """A copy of ``a`` whose data starts ``past`` bytes after a 64-byte boundary (0:
    aligned, as a pass's blocks are; 16: as NumPy's large arrays mostly start)."""
    raw = np.empty(a.nbytes + 128, np.uint8)
    skip = -raw.ctypes.data % 64 + past
    out = raw[skip : skip + a.nbytes].view(a.dtype).reshape(a.shape)
    out[...] = a
    return out


def _in_batches(X, r):
    """``X.T @ r`` as a batched product of blocks of rows (as many as divide the rows,
    up to 64), then their sum."""
    n, k = X.shape
    b = next(b for b in range(min(64, n), 0, -1) if n % b == 0)
    parts = jax.lax.dot_general(
        r.reshape(b, 1, n // b), X.reshape(b, n // b, k), (((2,), (1,)), ((0,), (0,)))
    )
    return parts.sum((0, 1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=16384)
    ap.add_argument("--cols", type=int, default=256)
    ap.add_argument("--calls", type=int, default=64, help="calls a run")
    ap.add_argument("--repeats", type=int, default=5, help="runs (the median is shown)")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    X = rng.standard_normal((args.rows, args.cols)).astype(np.float32)
    w = rng.standard_normal(args.cols).astype(np.float32)
    r = rng.standard_normal(args.rows).astype(np.float32)
    y = rng.standard_normal(args.rows).astype(np.float32)

    def step(w, X, y):  # the piece's share of least squares and its gradient
        return jax.value_and_grad(lambda w: jnp.sum(jnp.square(X @ w - y)))(w)

    Xa, wa, ra, ya = (_placed(a, 0) for a in (X, w, r, y))
    X, w, r, y = (_placed(a, 16) for a in (X, w, r, y))  # (JAX copies them at each call)
    xla = {
        "X @ w": (jax.jit(lambda X, w: X @ w), (Xa, wa), (X, w)),
        "X.T @ r": (jax.jit(lambda X, r: X.T @ r), (Xa, ra), (X, r)),
        # as a host program of a loss's pass computes it (`execution/_row_products.py`)
        "X.T @ r, in batches": (jax.jit(_in_batches), (Xa, ra), (X, r)),
        "value and gradient": (jax.jit(step), (wa, Xa, ya), (w, X, y)),
    }
    numpy = {
        "X @ w": lambda: X @ w,
        "X.T @ r": lambda: X.T @ r,
        "X.T @ r, in batches": lambda: X.T @ r,
        "value and gradient": lambda: (lambda d: (d @ d, 2 * (X.T @ d)))(X @ w - y),
    }
    mib = X.nbytes / 2**20
    print(f"one piece: {args.rows} x {args.cols} float32, {mib:.0f} MiB; jax {jax.__version__}")
    print(
        f"{'product':<20} {'XLA ms':>8} {'XLA, copied':>12} {'NumPy ms':>9} {'XLA / NumPy':>12}"
        f" {'XLA s/GiB':>10}"
    )
    for name, (fn, fn_args, unaligned) in xla.items():
        t_xla = _timed(lambda fn=fn, fn_args=fn_args: fn(*fn_args), args.calls, args.repeats)
        t_copied = _timed(lambda fn=fn, a=unaligned: fn(*a), args.calls, args.repeats)
        t_np = _timed(numpy[name], args.calls, args.repeats)
        per_gib = t_xla * 1024 / mib
        print(
            f"{name:<20} {t_xla * 1e3:>8.2f} {t_copied * 1e3:>12.2f} {t_np * 1e3:>9.2f}"
            f" {t_xla / t_np:>12.1f} {per_gib:>10.3f}"
        )


if __name__ == "__main__":
    main()
