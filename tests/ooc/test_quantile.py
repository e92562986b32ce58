"""`quantile`, `nanquantile`, `median` and `nanmedian`: NumPy's values and dtypes
out of core (whole reduced axes per element of the others, the rest tiled by the
budget), and jax.numpy's gradients (`CASES`, in the gradient table)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from gradcases import MODE_IDS, MODES, GradCase, check

from gradpipe import ooc

BUDGET = 4096  # several tiles for every array below


def _value(x):
    return x.to_numpy() if isinstance(x, ooc.DiskArray) else np.asarray(x)


def _data(rng, dtype, shape=(16, 5, 6)):
    x = rng.standard_normal(shape) * 10
    if np.dtype(dtype).kind == "b":
        return x > 0
    if np.dtype(dtype).kind in "iu":
        return np.abs(x).astype(dtype)
    x[rng.random(shape) < 0.1] = np.nan
    return x.astype(dtype)


CALLS = [
    ("quantile", dict(q=0.3, axis=0)),
    ("quantile", dict(q=np.array([0.1, 0.5, 0.9]), axis=(0, 2))),
    ("quantile", dict(q=[0.25], axis=1, keepdims=True, method="nearest")),
    ("quantile", dict(q=0.5, axis=2, method="weibull")),
    ("nanquantile", dict(q=np.array([0.2, 0.8]), axis=0)),
    ("nanquantile", dict(q=0.7, axis=(1, 2), method="midpoint")),
    ("median", dict(axis=0)),
    ("median", dict(axis=(0, 1), keepdims=True)),
    ("nanmedian", dict(axis=2)),
]


@pytest.mark.parametrize("dtype", ["float64", "float32", "int64", "int8", "bool"])
@pytest.mark.parametrize("name,kwargs", CALLS, ids=[f"{n}-{i}" for i, (n, _) in enumerate(CALLS)])
def test_values_and_dtypes_are_numpys(rng, name, kwargs, dtype):
    x = _data(rng, dtype)
    try:
        want = getattr(np, name)(x, **kwargs)
    except TypeError:  # NumPy cannot interpolate booleans: neither can we
        with ooc.MemoryBudget(BUDGET), pytest.raises(TypeError, match=f"{name} of a bool"):
            getattr(ooc, name)(ooc.asarray(x), **kwargs)
        return
    with ooc.MemoryBudget(BUDGET):
        got = getattr(ooc, name)(ooc.asarray(x), **kwargs)
    assert isinstance(got, ooc.DiskArray)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(_value(got), want)


def test_a_reduction_over_every_axis_is_a_jax_value_and_fits_the_budget(rng):
    x = _data(rng, "float32", (16, 8))
    with ooc.MemoryBudget(BUDGET):
        got = ooc.nanmedian(ooc.asarray(x))
    assert isinstance(got, jax.Array) and got.shape == ()
    assert got == np.nanmedian(x)
    big = ooc.asarray(_data(rng, "float64", (64, 32)))
    with ooc.MemoryBudget(BUDGET), pytest.raises(MemoryError, match="median: one batch element"):
        ooc.median(big)  # 16 KiB whole, more than the budget


def test_in_memory_values_give_numpys_values_as_a_jax_array(rng):
    x = _data(rng, "float32", (10, 3))
    got = ooc.nanquantile(x, 0.4, axis=0)
    assert isinstance(got, jax.Array)
    np.testing.assert_array_equal(got, np.nanquantile(x, 0.4, axis=0))


def test_arguments_are_checked(rng):
    d = ooc.asarray(_data(rng, "float32"))
    with pytest.raises(ValueError, match="in \\[0, 1\\]"):
        ooc.quantile(d, 1.5, axis=0)
    with pytest.raises(ValueError, match="method must be one of"):
        ooc.quantile(d, 0.5, axis=0, method="cubic")
    with pytest.raises(ValueError, match="1-D"):
        ooc.quantile(d, np.zeros((2, 2)), axis=0)


def test_a_method_jax_lacks_refuses_a_gradient(rng):
    d = ooc.asarray(rng.standard_normal((12, 4)).astype(np.float32))
    with ooc.MemoryBudget(BUDGET), pytest.raises(TypeError, match="not differentiable"):
        jax.grad(lambda x: ooc.sum(ooc.quantile(x, 0.5, axis=0, method="weibull")))(d)


# ---------------------------------------------------------------- gradients


def _case(name, body, shapes):
    compiled = jax.jit(lambda *xs: body(jnp, *xs))

    def fn(xp, *xs):
        return compiled(*xs) if xp is jnp else body(xp, *xs)

    return GradCase(name, fn, shapes)


def _holes(xp, x):
    return xp.where(x > 1.0, xp.nan, x)


CASES = [
    _case("quantile", lambda xp, x: xp.quantile(x, 0.3, axis=0), ((24, 6),)),
    _case(
        "quantile",
        lambda xp, x: xp.quantile(x, np.array([0.2, 0.9]), axis=(0, 2), method="midpoint"),
        ((12, 3, 4),),
    ),
    _case("nanquantile", lambda xp, x: xp.nanquantile(_holes(xp, x), 0.6, axis=1), ((8, 16),)),
    _case("median", lambda xp, x: xp.median(x, axis=1, keepdims=True), ((12, 9),)),
    _case("nanmedian", lambda xp, x: xp.nanmedian(_holes(xp, x), axis=0), ((15, 6),)),
]


@pytest.mark.parametrize("dtype, jit", MODES, ids=MODE_IDS)
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_gradient_matches_jax(case, dtype, jit):
    check(case, dtype, jit)
