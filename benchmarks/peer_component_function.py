"""The function both sides of `benchmarks/components.py` time: an elementwise implicit
solve whose forward pass dominates.

``y`` solves ``y**3 + y = x`` elementwise by a fixed number of Newton steps; its
derivative comes from the implicit function theorem (``dy = dx / (3 y**2 + 1)``), so
the backward pass is one elementwise product while the forward pass is the whole
iteration. The output is ``y * (1 + 0.1 * x)``. This file imports only JAX and
NumPy, so the peer's own virtual environment can load it too.
"""

import jax
import numpy as np

SIZE = 1_000_000


def make_simulate(newton_steps: int):
    """The benchmark's function of one float32 vector, with ``newton_steps`` steps
    (a new function each call, so no trace of another setting is reused)."""

    @jax.custom_jvp
    def cube_root_solve(x):
        def step(_, y):
            return y - (y**3 + y - x) / (3 * y**2 + 1)

        return jax.lax.fori_loop(0, newton_steps, step, x / 2)

    @cube_root_solve.defjvp
    def _jvp(primals, tangents):
        (x,), (dx,) = primals, tangents
        y = cube_root_solve(x)
        return y, dx / (3 * y**2 + 1)

    def simulate(x):
        return cube_root_solve(x) * (1 + 0.1 * x)

    return simulate


def inputs(seed=0):
    """The benchmark's input and cotangent, as NumPy float32 vectors."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(-3, 3, SIZE).astype(np.float32)
    return x, np.ones(SIZE, np.float32)
