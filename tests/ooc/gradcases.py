"""The gradient table's harness: one `GradCase` per differentiable namespace function.

A case is a function ``fn(xp, *arrays)`` written once against an array namespace;
`check` runs it with ``xp = gradpipe.ooc`` on DiskArrays cut into several tiles and
with ``xp = jax.numpy`` in memory, and compares ``jax.grad`` of the same weighted
sum of the output, eagerly and under ``jax.jit``. Each family's test file holds a
``CASES`` list; `tests/ooc/test_grad_coverage.py` checks that together they name
every differentiable function of the namespace.
"""

from __future__ import annotations

import contextlib
import dataclasses
import zlib
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gradpipe import ooc
from gradpipe.ooc.arrays._hijax import type_of

# every case's arrays (a few KiB) are cut into several tiles at this budget
TILE_BUDGET = 4096  # the minimum
DTYPES = ("float32", "float64")
# (dtype, jit) pairs each case runs in: float32 as most users run JAX (eager and
# jitted), float64 jitted (x64 and tracing together); eager float64 adds little
# beyond these and would cost a quarter of the table's time
MODES = [("float32", False), ("float32", True), ("float64", True)]
MODE_IDS = ["float32-eager", "float32-jit", "float64-jit"]
TOLERANCE = {"float32": dict(rtol=2e-4, atol=2e-5), "float64": dict(rtol=1e-9, atol=1e-11)}


@dataclasses.dataclass(frozen=True)
class GradCase:
    """One function of the namespace under ``jax.grad``.

    - `name`: the namespace function it covers (several cases may cover one).
    - `fn`: ``fn(xp, *arrays)``, the same code for gradpipe.ooc and jax.numpy.
    - `shapes`: the input shapes (broadcasting cases give different ones).
    - `domain`: ``"real"`` (standard normal), ``"positive"`` (0.5 to 2),
      ``"above1"`` (1.5 to 3), ``"near1"`` (0.8 to 1.25: long running products
      stay well conditioned in float32) or ``"unit"`` (-0.9 to 0.9), for
      functions defined on part of the line.
    - `argnums`: the inputs differentiated (default: all).
    - `refuses`: the function has no out-of-core gradient: ``jax.grad`` must raise
      a `TypeError` naming it (never a silent zero).
    """

    name: str
    fn: Callable
    shapes: tuple
    domain: str = "real"
    argnums: tuple | None = None
    refuses: bool = False

    @property
    def id(self) -> str:
        return f"{self.name}{list(self.shapes)}"


def _draw(rng, shape, dtype, domain):
    if domain == "positive":
        x = rng.uniform(0.5, 2.0, shape)
    elif domain == "near1":
        x = rng.uniform(0.8, 1.25, shape)
    elif domain == "above1":
        x = rng.uniform(1.5, 3.0, shape)
    elif domain == "unit":
        x = rng.uniform(-0.9, 0.9, shape)
    else:
        x = rng.standard_normal(shape)
    return np.asarray(x, dtype)


def check(case: GradCase, dtype: str, jit: bool) -> None:
    """Assert that gradpipe.ooc's gradient equals JAX's for ``case`` in ``dtype``."""
    # the same inputs in every process (str hashes are salted per process)
    rng = np.random.default_rng(zlib.crc32(case.id.encode()))
    arrays = [_draw(rng, s, dtype, case.domain) for s in case.shapes]
    argnums = case.argnums if case.argnums is not None else tuple(range(len(arrays)))
    # float32 cases run as most users run JAX (x64 off); float64 needs it on
    x64 = jax.enable_x64(True) if dtype == "float64" else contextlib.nullcontext()
    with x64:
        out = jax.eval_shape(lambda *a: case.fn(jnp, *a), *arrays)
        weights = np.asarray(rng.standard_normal(out.shape), out.dtype)

        def reference(*a):
            return jnp.sum(case.fn(jnp, *a) * weights)

        # JAX itself may have no derivative for a refused case
        want = None if case.refuses else jax.grad(reference, argnums=argnums)(*arrays)
        with ooc.MemoryBudget(TILE_BUDGET):
            disk = [ooc.DiskArray.from_numpy(a) for a in arrays]
            w = ooc.DiskArray.from_numpy(weights) if weights.shape else weights

            # the weights are an argument, not a closed-over constant: a trace that
            # fails (a refused case) would otherwise keep its constants, files and all
            def loss(w, *xs):
                result = case.fn(ooc, *xs)
                if type_of(result) is None:  # a 0-d result is a JAX array
                    return jnp.sum(result * w)
                return ooc.sum(ooc.multiply(result, w))

            grad = jax.grad(loss, argnums=tuple(i + 1 for i in argnums))
            if jit:
                grad = jax.jit(grad)
            if case.refuses:
                with pytest.raises(TypeError, match=case.name):
                    grad(w, *disk)
                return
            got = grad(w, *disk)
        for i, g, r in zip(argnums, got, want):
            g = g.to_numpy() if type_of(g) is not None else np.asarray(g)
            assert g.dtype == arrays[i].dtype, (case.id, i, g.dtype)
            assert g.shape == arrays[i].shape, (case.id, i, g.shape)
            np.testing.assert_allclose(
                g, np.asarray(r), **TOLERANCE[dtype], err_msg=f"{case.id}: input {i}"
            )
