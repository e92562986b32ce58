"""A first gradpipe pipeline: compose, inspect, save, reload, and pass to JAX.

Run: python examples/core_pipeline.py
"""

from __future__ import annotations

import pathlib
import tempfile

import numpy as np

import gradpipe as gp


class Invert(gp.Operator):
    """Per-band inversion of transmittance: z_b = -log(y_b) / k_b."""

    def __init__(self, k: tuple[float, ...]):
        self.k = tuple(k)

    def _apply(self, y):
        return -np.log(y) / np.asarray(self.k)


class WeightedMean(gp.Operator):
    """Inverse-variance mean of the bands, with weights (k_b y_b)^2."""

    def __init__(self, k: tuple[float, ...]):
        self.k = tuple(k)

    def _apply(self, z):
        k = np.asarray(self.k)
        w = (k * np.exp(-k * z)) ** 2
        return np.sum(w * z, axis=-1) / np.sum(w, axis=-1)


K = (0.002, 0.004, 0.006, 0.008, 0.010)


def main(outdir: pathlib.Path | None = None) -> dict:
    rng = np.random.default_rng(0)
    alpha = rng.uniform(0, 300, size=8)
    y = np.exp(-np.outer(alpha, K)) + rng.normal(0, 1e-3, size=(8, 5))

    retrieval = Invert(K) | WeightedMean(K)
    print(retrieval.summary(y))
    estimate = retrieval(y)

    with tempfile.TemporaryDirectory() as root:
        registry = gp.Registry(outdir / "registry" if outdir else root)
        # Run as a script, the classes live in __main__, which only this script can
        # import again: fine here, since the example reloads in the same process.
        ref = registry.store(retrieval, tags=["retrieval-v1"], force=True, allow_unimportable=True)
        reloaded = registry.load("retrieval-v1")
    same = np.array_equal(reloaded(y), estimate)

    print()
    print(f"{'true α (DU)':>12} {'retrieved (DU)':>15}")
    for a, e in zip(alpha, estimate):
        print(f"{a:12.2f} {e:15.2f}")
    print(f"\nstored as {ref[:12]} (tag retrieval-v1); reloaded pipeline identical: {same}")
    return {"rmse": float(np.sqrt(np.mean((estimate - alpha) ** 2))), "reloaded_identical": same}


if __name__ == "__main__":
    main()
