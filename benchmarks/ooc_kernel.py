"""Which block kernel is fastest on this CPU for the out-of-core matmul?

The out-of-core driver multiplies tiles of about 2048-4096 squared and adds each
product into an output tile. This measures, on such tiles, interleaved:

- ``numpy``: ``acc += a @ b`` (NumPy's OpenBLAS; a new product tile, then an add);
- ``gemm``: SciPy's BLAS ``gemm`` with ``beta=1``, accumulating into ``acc`` in
  place (what `gradpipe.ooc.matmul` uses for BLAS dtypes);
- ``xla``: ``jax.jit(jnp.matmul)`` plus the add, including the host-to-device copy a
  block kernel would pay on each tile.

It prints the median time, GFLOP/s and the ratios to ``gemm``; the choice is
recorded in docs/benchmarks.md.

    .venv/bin/python benchmarks/ooc_kernel.py [--sizes 2048 4096] [--repeats 5]
"""

from __future__ import annotations

import argparse
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np
from scipy.linalg import blas


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[2048, 4096])
    p.add_argument("--repeats", type=int, default=5)
    args = p.parse_args()
    rng = np.random.default_rng(0)
    mm = jax.jit(jnp.matmul)
    print(
        f"{'tile':>6} {'gemm s':>8} {'numpy s':>8} {'xla s':>8} {'gemm GF/s':>10}"
        f" {'numpy/gemm':>11} {'xla/gemm':>9}"
    )
    for n in args.sizes:
        a = rng.standard_normal((n, n), dtype=np.float32)
        b = rng.standard_normal((n, n), dtype=np.float32)
        acc = np.zeros((n, n), np.float32)
        mm(jnp.asarray(a), jnp.asarray(b)).block_until_ready()
        times: dict[str, list[float]] = {"gemm": [], "numpy": [], "xla": []}
        for _ in range(args.repeats):
            t = time.perf_counter()
            # acc.T is a Fortran-ordered view: acc.T += b.T @ a.T, i.e. acc += a @ b
            blas.sgemm(1.0, b.T, a.T, beta=1.0, c=acc.T, overwrite_c=True)
            times["gemm"].append(time.perf_counter() - t)
            t = time.perf_counter()
            acc += np.matmul(a, b)
            times["numpy"].append(time.perf_counter() - t)
            t = time.perf_counter()
            acc += np.asarray(mm(jnp.asarray(a), jnp.asarray(b)))
            times["xla"].append(time.perf_counter() - t)
        med = {k: statistics.median(v) for k, v in times.items()}
        gf = 2 * n**3 / 1e9
        print(
            f"{n:>6} {med['gemm']:>8.3f} {med['numpy']:>8.3f} {med['xla']:>8.3f}"
            f" {gf / med['gemm']:>10.1f} {med['numpy'] / med['gemm']:>11.2f}"
            f" {med['xla'] / med['gemm']:>9.2f}"
        )


if __name__ == "__main__":
    main()
