"""Which block kernel is faster on this CPU: NumPy (OpenBLAS) or XLA's matmul?

The out-of-core driver multiplies tiles of about 2048-4096 squared; this measures
both kernels on such tiles, interleaved, and prints the median time, GFLOP/s and
the ratio. gradpipe.ooc uses NumPy for block kernels because of this measurement
(recorded in docs/benchmarks.md).

    .venv/bin/python benchmarks/ooc_kernel.py [--sizes 2048 4096] [--repeats 5]
"""

from __future__ import annotations

import argparse
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[2048, 4096])
    p.add_argument("--repeats", type=int, default=5)
    args = p.parse_args()
    rng = np.random.default_rng(0)
    mm = jax.jit(jnp.matmul)
    print(
        f"{'tile':>6} {'numpy s':>9} {'xla s':>9} {'numpy GF/s':>11} {'xla GF/s':>9} {'xla/numpy':>10}"
    )
    for n in args.sizes:
        a = rng.standard_normal((n, n), dtype=np.float32)
        b = rng.standard_normal((n, n), dtype=np.float32)
        ja, jb = jnp.asarray(a), jnp.asarray(b)
        mm(ja, jb).block_until_ready()
        t_np, t_xla = [], []
        for _ in range(args.repeats):
            t = time.perf_counter()
            np.matmul(a, b)
            t_np.append(time.perf_counter() - t)
            t = time.perf_counter()
            # includes the host->device copy a block kernel would pay on each tile
            mm(jnp.asarray(a), jnp.asarray(b)).block_until_ready()
            t_xla.append(time.perf_counter() - t)
        m_np, m_xla = statistics.median(t_np), statistics.median(t_xla)
        gf = 2 * n**3 / 1e9
        print(
            f"{n:>6} {m_np:>9.3f} {m_xla:>9.3f} {gf / m_np:>11.1f} {gf / m_xla:>9.1f} {m_xla / m_np:>10.2f}"
        )


if __name__ == "__main__":
    main()
