"""The statistical and searching functions (and all/any) against NumPy, and their gradients.

Values are compared with NumPy on arrays cut into several tiles (a 4 KiB budget),
eagerly and under `jax.jit`; gradients with `jax.grad` of the same `jax.numpy`
function (the `CASES` table). x64 is on wherever a 0-d result may be 64-bit.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from gradcases import MODE_IDS, MODES, GradCase, check

from gradpipe import ooc
from gradpipe.ooc import Driver
from gradpipe.ooc.arrays._hijax import type_of
from gradpipe.ooc.ops._cumulative import Cumulative

AXES = [None, 0, 1, (0, 1), -1]
BUDGET = 4096


def disk(x):
    return ooc.DiskArray.from_numpy(np.asarray(x))


def value(r):
    """A result in memory: a DiskArray's data, or a 0-d JAX array as NumPy."""
    return r.to_numpy(force=True) if type_of(r) is not None else np.asarray(r)


def draw(rng, shape, dtype):
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return rng.random(shape) < 0.7
    if dtype.kind in "iu":
        lo = 0 if dtype.kind == "u" else -3
        return rng.integers(lo, 4, shape).astype(dtype)
    x = rng.standard_normal(shape) + (1j * rng.standard_normal(shape) if dtype.kind == "c" else 0)
    return np.where(rng.random(shape) < 0.1, 0, x).astype(dtype)  # some zeros


def assert_matches(got, want, dtype):
    got = value(got)
    assert got.shape == np.shape(want)
    assert got.dtype == np.asarray(want).dtype, (got.dtype, np.asarray(want).dtype)
    if np.dtype(dtype).kind in "biu" and got.dtype.kind in "biu":
        np.testing.assert_array_equal(got, want)
    else:
        rtol = 1e-2 if np.dtype(dtype) == np.float16 else 1e-5
        np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol)


# ---------------------------------------------------------------- reductions


NUMERIC = ["bool", "int8", "uint8", "int32", "float16", "float32", "float64", "complex64"]
REDUCTIONS = {
    # name: (NumPy function, dtypes, extra keywords)
    "sum": (np.sum, NUMERIC, {}),
    "prod": (np.prod, NUMERIC, {}),
    "mean": (np.mean, ["float16", "float32", "float64", "complex64"], {}),
    "max": (np.max, ["int8", "uint8", "float32", "float64"], {}),
    "min": (np.min, ["int8", "uint8", "float32", "float64"], {}),
    "all": (np.all, NUMERIC, {}),
    "any": (np.any, NUMERIC, {}),
    "count_nonzero": (np.count_nonzero, NUMERIC, {}),
    "var": (np.var, ["float32", "float64"], {"correction": 1}),
    "std": (np.std, ["float32", "float64"], {"correction": 0.5}),
}
REDUCTION_CASES = [(n, d) for n, (_, ds, _) in REDUCTIONS.items() for d in ds]


@pytest.mark.parametrize("name,dtype", REDUCTION_CASES, ids=str)
def test_reduction_matches_numpy(rng, name, dtype):
    fn, _, extra = REDUCTIONS[name]
    x = draw(rng, (19, 13), dtype)
    numpy_extra = {"ddof": extra["correction"]} if "correction" in extra else {}
    with jax.enable_x64(True), ooc.MemoryBudget(BUDGET):
        d = disk(x)
        for axis in AXES:
            for keepdims in (False, True):
                got = getattr(ooc, name)(d, axis=axis, keepdims=keepdims, **extra)
                want = fn(x, axis=axis, keepdims=keepdims, **numpy_extra)
                if name == "count_nonzero":
                    want = np.asarray(want, np.int64)
                assert_matches(got, want, dtype)


@pytest.mark.parametrize("name", ["sum", "prod", "max", "argmax", "var", "all", "count_nonzero"])
def test_reduction_under_jit_matches_eager(rng, name):
    x = draw(rng, (23, 11), "float32")
    with jax.enable_x64(True), ooc.MemoryBudget(BUDGET):
        d = disk(x)
        for axis in (None, 0, 1):
            for keepdims in (False, True):

                def f(a):
                    return getattr(ooc, name)(a, axis=axis, keepdims=keepdims)

                np.testing.assert_array_equal(value(jax.jit(f)(d)), value(f(d)))


SUM_DTYPES = [
    ("int8", None, "int64"),
    ("uint16", None, "uint64"),
    ("bool", None, "int64"),
    ("float16", None, "float16"),
    ("int8", "int16", "int16"),
    ("int32", "float64", "float64"),
    ("float32", "float64", "float64"),
    ("float32", "complex64", "complex64"),
]


@pytest.mark.parametrize("name", ["sum", "prod", "cumulative_sum", "cumulative_prod"])
@pytest.mark.parametrize("dtype,given,expected", SUM_DTYPES, ids=str)
def test_sum_and_prod_take_the_standard_dtype(rng, name, dtype, given, expected):
    """With x64 on the default int is NumPy's (test_x64_off.py has jax.numpy's
    int32 while it is off)."""
    x = draw(rng, (11, 9), dtype)
    axis = 0 if name.startswith("cumulative") else 1
    want = getattr(np, name)(x, axis=axis, dtype=given)
    with jax.enable_x64(True), ooc.MemoryBudget(BUDGET):
        got = getattr(ooc, name)(disk(x), axis=axis, dtype=given)
    assert got.dtype == np.dtype(expected) == want.dtype
    assert_matches(got, want, dtype)


def test_in_memory_arguments_run_on_jax_numpy_with_numpy_dtypes():
    with jax.enable_x64(True):
        assert ooc.sum(jnp.int8(3)).dtype == np.int64
        assert ooc.prod(jnp.float32(3)).dtype == np.float32
        assert ooc.mean(jnp.float32(3)) == 3
        assert bool(ooc.all(jnp.float32(np.nan))) and not bool(ooc.any(jnp.float32(0)))
        assert ooc.all(jnp.asarray(True)).dtype == np.bool_
        assert ooc.max(jnp.float32(2), axis=()) == 2
        assert int(ooc.count_nonzero(jnp.float32(2))) == 1
        assert ooc.argmax(jnp.asarray([1, 3, 3])).dtype == np.int64
        np.testing.assert_array_equal(
            ooc.cumulative_sum(jnp.asarray([1, 2, 3]), include_initial=True), [0, 1, 3, 6]
        )
        assert ooc.var(jnp.asarray([1.0, 3.0]), correction=1) == 2
        assert int(ooc.searchsorted(jnp.asarray([1, 2, 3]), jnp.int64(2), side="right")) == 2
    # with x64 off the sum of ints is jax.numpy's, in the default int (it was refused)
    with jax.enable_x64(False):
        assert ooc.sum(jnp.int32(3)).dtype == jnp.sum(jnp.int32(3)).dtype == np.int32


def test_a_full_reduction_is_a_jax_scalar_and_a_float16_sum_accumulates_in_float32():
    x = np.full((64, 64), 0.1, np.float16)
    with ooc.MemoryBudget(BUDGET):
        s = ooc.sum(disk(x))
    assert isinstance(s, jax.Array) and s.shape == () and s.dtype == np.float16
    np.testing.assert_allclose(float(s), x.astype(np.float32).sum(), rtol=1e-3)


# ---------------------------------------------------------------- argmax, argmin


@pytest.mark.parametrize("dtype", ["int8", "float32", "float64"])
def test_argmax_and_argmin_give_the_first_occurrence_as_numpy(rng, dtype):
    # values 0..3: ties in every tile, and across tiles in both axes
    x = rng.integers(0, 4, (37, 21)).astype(dtype)
    if np.dtype(dtype).kind == "f":
        x[rng.random(x.shape) < 0.03] = np.nan  # NaN is the extremum, as in NumPy
        x[5] = np.nan
    with jax.enable_x64(True), ooc.MemoryBudget(BUDGET):
        d = disk(x)
        for name in ("argmax", "argmin"):
            for axis in (None, 0, 1, -2):
                for keepdims in (False, True):
                    got = getattr(ooc, name)(d, axis=axis, keepdims=keepdims)
                    want = getattr(np, name)(x, axis=axis, keepdims=keepdims)
                    assert_matches(got, np.asarray(want, np.int64), "int64")


def test_argmax_of_a_3d_array_flattens_in_c_order(rng):
    x = rng.integers(0, 3, (9, 7, 5)).astype(np.int16)
    with jax.enable_x64(True), ooc.MemoryBudget(BUDGET):
        assert int(ooc.argmax(disk(x))) == np.argmax(x)
        assert_matches(ooc.argmin(disk(x), axis=1), np.argmin(x, axis=1), "int64")


# ---------------------------------------------------------------- cumulative sums


CUMULATIVE_SHAPES = [((70,), 0), ((70, 6), 0), ((6, 70), 1), ((6, 70), 0), ((5, 30, 4), 1)]


@pytest.mark.parametrize("name", ["cumulative_sum", "cumulative_prod"])
@pytest.mark.parametrize("dtype", ["int8", "uint8", "float32", "float64", "complex64"])
@pytest.mark.parametrize("shape,axis", CUMULATIVE_SHAPES, ids=str)
def test_cumulative_matches_numpy(rng, name, dtype, shape, axis):
    x = draw(rng, shape, dtype)
    if name == "cumulative_prod" and np.dtype(dtype).kind in "fc":
        x = (1 + 0.01 * x).astype(dtype)  # products of many factors stay finite
    # x64 on: NumPy's default int for the totals of ints (test_x64_off.py: x64 off)
    with jax.enable_x64(True), ooc.MemoryBudget(BUDGET):
        d = disk(x)
        for include_initial in (False, True):
            kw = dict(axis=axis, include_initial=include_initial)
            if len(shape) == 1:
                kw.pop("axis")
            assert_matches(getattr(ooc, name)(d, **kw), getattr(np, name)(x, **kw), dtype)
        jitted = jax.jit(lambda a: getattr(ooc, name)(a, axis=axis))(d)
        assert_matches(jitted, getattr(np, name)(x, axis=axis), dtype)


def test_cumulative_of_an_empty_axis_is_its_initial_value():
    with ooc.MemoryBudget(BUDGET):
        got = ooc.cumulative_prod(ooc.zeros((3, 0)), axis=1, include_initial=True)
    np.testing.assert_array_equal(value(got), np.ones((3, 1)))


def test_cumulative_keeps_a_tile_and_its_carry_within_the_budget():
    """A cumulative op plans tiles from the budget: an array 16x the budget is walked
    in tiles that fit it, and the carry crosses every tile boundary correctly."""
    x = np.ones((512, 32), np.float32)  # 64 KiB
    budget = ooc.MemoryBudget(BUDGET)
    op = Cumulative("sum", 0)
    tile = op._plan(Driver(budget), ooc.DiskArray.from_numpy(x), 4, "forward")
    assert np.prod(tile) * 4 * 4 <= BUDGET and tile[0] < 512
    with budget:
        got = value(ooc.cumulative_sum(disk(x), axis=0))
    np.testing.assert_array_equal(got, np.cumsum(x, axis=0))


# ---------------------------------------------------------------- searchsorted


@pytest.mark.parametrize("side", ["left", "right"])
def test_searchsorted_matches_numpy(rng, side):
    x1 = np.sort(rng.integers(0, 50, 300)).astype(np.float64)  # repeats: side matters
    x2 = rng.integers(-2, 53, (13, 7)).astype(np.float64)
    perm = rng.permutation(300)
    with jax.enable_x64(True), ooc.MemoryBudget(BUDGET):
        d1 = disk(x1)
        want = np.searchsorted(x1, x2, side=side)
        assert_matches(ooc.searchsorted(d1, disk(x2), side=side), want, "int64")
        got = ooc.searchsorted(disk(x1[perm]), disk(x2), side=side, sorter=disk(np.argsort(perm)))
        assert_matches(got, want, "int64")
        assert int(ooc.searchsorted(d1, 10.0, side=side)) == np.searchsorted(x1, 10.0, side=side)


# ---------------------------------------------------------------- bad input


def test_bad_arguments_are_refused_as_numpy_refuses(rng):
    with ooc.MemoryBudget(BUDGET):
        d = disk(rng.standard_normal((4, 3)))
        with pytest.raises(ValueError, match="max over axes"):
            ooc.max(ooc.zeros((0, 3)), axis=0)
        with pytest.raises(ValueError, match="empty"):
            ooc.argmin(ooc.zeros((0, 3)))
        with pytest.raises(ValueError, match="out of range"):
            ooc.sum(d, axis=2)
        with pytest.raises(ValueError, match="duplicate"):
            ooc.prod(d, axis=(1, -1))
        with pytest.raises(TypeError, match="axis must be an int or None"):
            ooc.argmax(d, axis=(0, 1))
        with pytest.raises(ValueError, match="axis is required"):
            ooc.cumulative_sum(d)
        with pytest.raises(TypeError, match="correction"):
            ooc.var(d, correction="1")
        with pytest.raises(TypeError, match="dtype must be"):
            ooc.sum(d, dtype="nonsense")
        with pytest.raises(ValueError, match="side"):
            ooc.searchsorted(disk(np.arange(3.0)), d, side="middle")
        with pytest.raises(ValueError, match="1-d"):
            ooc.searchsorted(d, d)
        with pytest.raises(ValueError, match="at least one dimension"):
            ooc.cumulative_prod(jnp.float32(1))


# ---------------------------------------------------------------- gradients


def case(name, body, shapes, domain="real"):
    """A `GradCase` of ``body(xp, x)`` whose jax.numpy reference runs as one compiled
    call: eagerly, jax.numpy compiles every small operation on first use (dozens for
    the associative scan of a cumulative product), which would dominate the test."""
    compiled = jax.jit(lambda *xs: body(jnp, *xs))

    def fn(xp, *xs):
        return compiled(*xs) if xp is jnp else body(xp, *xs)

    return GradCase(name, fn, shapes, domain)


def _zeroed(xp, x):
    """``x`` with the values below 0.7 set to 0 (about 1 in 8 in the positive domain)."""
    return xp.where(x > 0.7, x, 0.0)


def _times_int(xp, x, i):
    return x * xp.astype(i, x.dtype)


CASES = [
    case("sum", lambda xp, x: xp.sum(x, axis=1), ((32, 24),)),
    case("sum", lambda xp, x: xp.sum(x, axis=0, keepdims=True) * x, ((32, 24),)),
    case("prod", lambda xp, x: xp.prod(x, axis=0), ((32, 6),), "positive"),
    case("prod", lambda xp, x: xp.prod(x), ((12, 8),), "positive"),
    # rows with no zero, one zero and several zeros
    case("prod", lambda xp, x: xp.prod(_zeroed(xp, x), axis=1), ((32, 6),), "positive"),
    case("mean", lambda xp, x: xp.mean(x, axis=(0, 1)), ((32, 24),)),
    case("mean", lambda xp, x: x - xp.mean(x, axis=0, keepdims=True), ((32, 24),)),
    case("var", lambda xp, x: xp.var(x, axis=0), ((32, 24),)),
    case("var", lambda xp, x: xp.var(x, correction=1), ((32, 24),)),
    case("var", lambda xp, x: xp.var(x, axis=1, correction=1, keepdims=True) * x, ((32, 24),)),
    case("std", lambda xp, x: xp.std(x, axis=1), ((32, 24),)),
    case("std", lambda xp, x: xp.std(x, correction=1), ((32, 24),)),
    case("max", lambda xp, x: xp.max(x, axis=1), ((32, 24),)),
    # ties share the gradient as JAX shares it
    case("max", lambda xp, x: xp.max(xp.round(x), axis=0), ((32, 24),)),
    case("min", lambda xp, x: xp.min(x, axis=0, keepdims=True), ((32, 24),)),
    case("min", lambda xp, x: xp.min(xp.round(x)), ((32, 24),)),
    case("cumulative_sum", lambda xp, x: xp.cumulative_sum(x, axis=0), ((64, 6),)),
    case(
        "cumulative_sum",
        lambda xp, x: xp.cumulative_sum(x, axis=1, include_initial=True),
        ((6, 64),),
    ),
    # products of 64 values from 0.5 to 2 span 1e-9 to 1e9, and a weighted sum of
    # them loses float32 digits to cancellation in JAX and here alike
    case("cumulative_prod", lambda xp, x: xp.cumulative_prod(x, axis=0), ((64, 6),), "near1"),
    # zeros in the running products
    case(
        "cumulative_prod",
        lambda xp, x: xp.cumulative_prod(_zeroed(xp, x), axis=1, include_initial=True),
        ((6, 64),),
        "positive",
    ),
    # integer and bool results carry no gradient, as in JAX
    case(
        "argmax",
        lambda xp, x: _times_int(xp, x, xp.argmax(x, axis=1, keepdims=True)),
        ((32, 24),),
    ),
    case("argmin", lambda xp, x: _times_int(xp, x, xp.argmin(x, axis=0)), ((32, 24),)),
    case(
        "count_nonzero",
        lambda xp, x: _times_int(xp, x, xp.count_nonzero(x > 0.5, axis=0)),
        ((32, 24),),
    ),
    case("all", lambda xp, x: xp.where(xp.all(x > -2, axis=1, keepdims=True), x, -x), ((32, 24),)),
    case("any", lambda xp, x: xp.where(xp.any(x > 1.5, axis=0), x, 2 * x), ((32, 24),)),
]


@pytest.mark.parametrize("dtype, jit", MODES, ids=MODE_IDS)
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_gradient_matches_jax(case, dtype, jit):
    check(case, dtype, jit)


def test_searchsorted_passes_no_gradient(rng):
    x1 = np.sort(rng.standard_normal(50)).astype(np.float32)
    v = rng.standard_normal(20).astype(np.float32)
    with jax.enable_x64(True), ooc.MemoryBudget(BUDGET):
        d1 = disk(x1)

        def loss(a):
            return ooc.sum(a * ooc.astype(ooc.searchsorted(d1, a), a.dtype))

        got = value(jax.grad(loss)(disk(v)))
    np.testing.assert_array_equal(got, np.searchsorted(x1, v).astype(np.float32))
