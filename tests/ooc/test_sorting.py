"""sort and argsort out of core: NumPy's order (stable, NaNs last), whole lines per
tile, a clear refusal when one line exceeds the budget, and JAX's gradient."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from gradcases import MODE_IDS, MODES, GradCase, check

from gradpipe import ooc

BUDGET = 4096


def _want_sort(X, axis, descending):
    if descending:
        return np.flip(np.sort(np.flip(X, axis), axis=axis, kind="stable"), axis)
    return np.sort(X, axis=axis, kind="stable")


@pytest.mark.parametrize("dtype", ["float32", "float64", "int8", "uint16", "int64", "bool"])
@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("descending", [False, True])
def test_sort_and_argsort_follow_numpy(dtype, axis, descending):
    rng = np.random.default_rng(7)
    X = (rng.standard_normal((41, 3, 19)) * 4).astype(dtype)
    if X.dtype.kind == "f":
        X[0, 0, :4] = np.nan
        X[1, 1, :3] = X[1, 1, 3]  # ties: a stable sort keeps their order
    with ooc.MemoryBudget(BUDGET):
        x = ooc.asarray(X)
        for run in (lambda a: a, jax.jit(lambda a: a)):
            got = ooc.sort(run(x), axis=axis, descending=descending).to_numpy(force=True)
            np.testing.assert_array_equal(got, _want_sort(X, axis, descending))
            idx = ooc.argsort(run(x), axis=axis, descending=descending).to_numpy(force=True)
            want = np.asarray(jnp.argsort(X, axis=axis, descending=descending, stable=True))
            assert idx.dtype == want.dtype  # jax.numpy's index dtype: int32 with x64 off
            np.testing.assert_array_equal(idx, want)


def test_a_line_longer_than_the_budget_is_refused_with_its_size():
    x = ooc.zeros((2, 50_000))
    with ooc.MemoryBudget(BUDGET), pytest.raises(MemoryError, match="one line of 50000"):
        ooc.sort(x)
    np.testing.assert_array_equal(
        ooc.sort(x, axis=0, budget=BUDGET).to_numpy(), np.zeros((2, 50_000))
    )


def test_bad_input_is_refused():
    with pytest.raises(TypeError, match="complex"):
        ooc.sort(ooc.asarray(np.ones(3, np.complex64)))
    with pytest.raises(ValueError, match="0-d"):
        ooc.sort(ooc.DiskArray.from_numpy(np.array(1.0)))
    with pytest.raises(np.exceptions.AxisError):
        ooc.argsort(ooc.asarray(np.ones((3, 2))), axis=2)


CASES = [
    GradCase("sort", lambda xp, x: xp.sort(x, axis=0), ((37, 29),)),
    GradCase("sort", lambda xp, x: xp.sort(x, descending=True), ((37, 29),)),
    GradCase("argsort", lambda xp, x: xp.astype(xp.argsort(x), x.dtype) + x, ((37, 29),)),
]


@pytest.mark.parametrize("dtype, jit", MODES, ids=MODE_IDS)
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_sort_gradients_equal_jax(case, dtype, jit):
    check(case, dtype, jit)
