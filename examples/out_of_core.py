"""Out of core: a least-squares fit whose design matrix is several times the memory budget.

The design matrix X (400 000 x 64 float32, 98 MiB) lives on disk; the memory budget
is 16 MiB. `jax.value_and_grad` of the mean squared error runs out of core (each
operation reads X tile by tile), a jitted gradient-descent step writes the new
weights back to disk with `update_` and is compiled once, and the out-of-core
gradient is checked against plain JAX in memory on a subset of the rows.

    .venv/bin/python examples/out_of_core.py [outdir]
"""

from __future__ import annotations

import pathlib
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
from tqdm.auto import tqdm

from gradpipe import ooc

N_ROWS, N_FEATURES, SUBSET, STEPS = 400_000, 64, 4_000, 8
BUDGET = ooc.MemoryBudget("16MiB")


def make_problem():
    """X with standard-normal rows, y = X @ w_true + noise, both built block by block."""
    w_true = np.linspace(-1.0, 1.0, N_FEATURES, dtype=np.float32).reshape(-1, 1)

    block = 4096  # rows are generated in fixed blocks, so any row range is reproducible

    def rows(start, stop, stream, width):
        first = start // block
        parts = [
            np.random.default_rng([b, stream]).standard_normal((block, width), np.float32)
            for b in range(first, -(-stop // block))
        ]
        return np.concatenate(parts)[start - first * block : stop - first * block]

    def x_rows(start, stop):
        return rows(start, stop, 0, N_FEATURES)

    def y_rows(start, stop):
        return x_rows(start, stop) @ w_true + 0.1 * rows(start, stop, 1, 1)

    X = ooc.DiskArray.from_row_blocks((N_ROWS, N_FEATURES), np.float32, x_rows)
    y = ooc.DiskArray.from_row_blocks((N_ROWS, 1), np.float32, y_rows)
    return X, y, w_true


def loss(w, X, y):
    return ooc.mean(ooc.square(X @ w - y))


def check_gradient_on_subset(X, y, w) -> float:
    """Out-of-core gradient on the first rows against jax.grad in memory."""
    Xs, ys = ooc.slice_rows(X, 0, SUBSET), ooc.slice_rows(y, 0, SUBSET)
    g_ooc = jax.grad(loss)(w, Xs, ys).to_numpy()
    Xm, ym = Xs.to_numpy(), ys.to_numpy()
    g_mem = np.asarray(jax.grad(lambda w: jnp.mean((Xm @ w - ym) ** 2))(w.to_numpy()))
    return float(np.max(np.abs(g_ooc - g_mem)) / np.max(np.abs(g_mem)))


def main(outdir: pathlib.Path) -> None:
    outdir = pathlib.Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    with BUDGET:
        X, y, w_true = make_problem()
        print(
            f"design matrix {X.shape} {X.dtype}: {X.nbytes / 2**20:.0f} MiB on disk, "
            f"{X.nbytes / BUDGET.nbytes:.1f}x the {BUDGET}"
        )
        w = ooc.DiskArray.zeros((N_FEATURES, 1))
        rel = check_gradient_on_subset(X, y, ooc.DiskArray.full((N_FEATURES, 1), 0.5))
        print(f"gradient on the first {SUBSET} rows: relative error vs in-memory JAX {rel:.1e}")

        traces = []

        @jax.jit
        def step(w):
            traces.append(1)
            value, g = jax.value_and_grad(loss)(w, X, y)
            return ooc.update_(w, w - 0.5 * g), value

        ooc.reset_io_stats()
        losses = []
        for _ in tqdm(range(STEPS), desc="gradient descent, X read tile by tile", unit="step"):
            w, value = step(w)
            losses.append(float(value))
        io = ooc.io_stats()
        err = float(np.max(np.abs(w.to_numpy() - w_true)))
    print(
        f"{STEPS} jitted steps (compiled {len(traces)}x): "
        f"loss {losses[0]:.3f} -> {losses[-1]:.4f}; max |w - w_true| = {err:.3f}"
    )
    print(
        f"read {io.bytes_read / 2**30:.2f} GiB in {io.tiles_read} tiles, wrote "
        f"{io.bytes_written / 2**20:.0f} MiB; total {time.perf_counter() - t0:.1f} s"
    )
    png = _plot(losses, outdir)
    if png:
        print(f"loss curve: {png}")


def _plot(losses, outdir: pathlib.Path) -> pathlib.Path | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, ax = plt.subplots(figsize=(6, 3.8))
    ax.semilogy(
        range(1, len(losses) + 1), losses, marker="o", label="out of core, X read from disk"
    )
    ax.axhline(0.01, color="k", ls=":", lw=1.2, zorder=3, label="noise variance (0.1²)")
    ax.set_xlabel("gradient-descent step")
    ax.set_ylabel("mean squared residual (X w − y)² (no unit)")
    ax.set_title(
        f"Least squares, {N_ROWS:,} × {N_FEATURES} design matrix on disk,\n"
        f"memory budget {BUDGET.nbytes >> 20} MiB"
    )
    ax.legend()
    fig.tight_layout()
    path = outdir / "out_of_core_loss.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


if __name__ == "__main__":
    main(pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "out"))
