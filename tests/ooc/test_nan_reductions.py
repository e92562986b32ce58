"""NumPy's NaN-skipping reductions, `einsum`, `pad`, ``cumsum``/``cumprod`` and
``ddof`` in the `gradpipe.ooc` namespace (what xarray asks an array's namespace for):
values against NumPy, gradients against ``jax.numpy`` (the gradient table's cases)."""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from gradcases import MODE_IDS, MODES, GradCase, check

from gradpipe import ooc

BUDGET = 4096  # every test array is cut into several tiles


def _with_nans(rng, shape, dtype="float32"):
    x = rng.standard_normal(shape).astype(dtype)
    x[rng.random(shape) < 0.2] = np.nan
    return x


def _value(r):
    return r.to_numpy() if isinstance(r, ooc.DiskArray) else np.asarray(r)


NAN_REDUCTIONS = ["nansum", "nanmean", "nanmax", "nanmin", "nanprod", "nanvar", "nanstd"]


@pytest.mark.parametrize("name", NAN_REDUCTIONS)
@pytest.mark.parametrize("axis", [None, 0, 1, (0, 2)], ids=str)
def test_nan_reductions_match_numpy(rng, name, axis):
    x = _with_nans(rng, (24, 10, 6))
    x[:, 3, :] = np.nan  # slices with no numbers at all
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # NumPy's all-NaN slice warnings
        want = getattr(np, name)(x, axis=axis)
    with ooc.MemoryBudget(BUDGET):
        got = getattr(ooc, name)(ooc.asarray(x), axis=axis)
    np.testing.assert_allclose(_value(got), want, rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("name", ["nanargmax", "nanargmin", "nancumsum", "nancumprod"])
def test_nan_index_and_running_reductions_match_numpy(rng, name):
    x = _with_nans(rng, (24, 10))
    with ooc.MemoryBudget(BUDGET):
        got = getattr(ooc, name)(ooc.asarray(x), axis=1)
    np.testing.assert_allclose(_value(got), getattr(np, name)(x, axis=1), rtol=1e-5)


def test_integer_arrays_take_the_plain_reductions(rng):
    x = rng.integers(-5, 5, (16, 8)).astype(np.int32)
    d = ooc.asarray(x)
    np.testing.assert_array_equal(_value(ooc.nansum(d, axis=0)), x.sum(axis=0))
    np.testing.assert_allclose(_value(ooc.nanmean(d, axis=1)), x.mean(axis=1), rtol=1e-6)
    np.testing.assert_array_equal(_value(ooc.nanmax(d, axis=0)), x.max(axis=0))


EINSUMS = [
    ("ij,jk->ik", [(12, 8), (8, 5)]),
    ("ij,ij->i", [(12, 8), (12, 8)]),
    ("...ab,...a->...b", [(4, 12, 8), (4, 12)]),
    ("...ab,b->...a", [(4, 12, 8), (8,)]),
    ("ab,a->b", [(12, 8), (12,)]),
    ("ij,jk,k->i", [(6, 5), (5, 4), (4,)]),
    ("ij->ji", [(6, 5)]),
    ("ij", [(6, 5)]),
    ("ij,ij", [(6, 5), (6, 5)]),
]


@pytest.mark.parametrize("subscripts,shapes", EINSUMS, ids=[e[0] for e in EINSUMS])
def test_einsum_matches_numpy(rng, subscripts, shapes):
    xs = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    with ooc.MemoryBudget(BUDGET):
        got = ooc.einsum(subscripts, *(ooc.asarray(x) for x in xs), optimize=True)
    np.testing.assert_allclose(_value(got), np.einsum(subscripts, *xs), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("dtype", [np.bool_, np.int8, np.int16])
def test_einsum_of_bools_or_small_integers_with_floats_keeps_numpys_dtype(rng, dtype):
    """A bool operand (xarray's ``dot(mask, weights)``) is summed in the float it
    promotes to, not counted in integers first and promoted past float32."""
    a = (rng.standard_normal((10, 6, 4)) > 0).astype(dtype)
    w = rng.standard_normal(6).astype(np.float32)
    with ooc.MemoryBudget(BUDGET):
        got = ooc.einsum("abc,b->a", ooc.asarray(a), w)
    want = np.einsum("abc,b->a", a, w)
    assert got.dtype == want.dtype == jnp.einsum("abc,b->a", a, w).dtype
    np.testing.assert_allclose(_value(got), want, rtol=1e-5, atol=1e-6)


def test_einsum_refuses_a_diagonal_and_out(rng):
    d = ooc.asarray(rng.standard_normal((4, 4)).astype(np.float32))
    with pytest.raises(NotImplementedError, match="diagonal"):
        ooc.einsum("ii->i", d)
    with pytest.raises(TypeError, match="out="):
        ooc.einsum("ij->ji", d, out=np.empty((4, 4), np.float32))


def test_opt_einsum_contracts_disk_arrays_out_of_core(rng):
    opt_einsum = pytest.importorskip("opt_einsum")
    a, b = (
        rng.standard_normal((12, 8)).astype(np.float32),
        rng.standard_normal(8).astype(np.float32),
    )
    got = opt_einsum.contract("ab,b->a", ooc.asarray(a), ooc.asarray(b))
    assert isinstance(got, ooc.DiskArray)
    np.testing.assert_allclose(got.to_numpy(), a @ b, rtol=1e-5)
    # under jax.jit a DiskArray is a JAX tracer: opt_einsum's jax backend routes it here
    traced = jax.jit(lambda x, v: opt_einsum.contract("ab,b->a", x, v))(ooc.asarray(a), b)
    np.testing.assert_allclose(traced.to_numpy(), a @ b, rtol=1e-5)
    # and JAX's own arrays stay with jax.numpy
    plain = jax.jit(lambda x, v: opt_einsum.contract("ab,b->a", x, v))(jnp.asarray(a), b)
    assert isinstance(plain, jax.Array)
    np.testing.assert_allclose(np.asarray(plain), a @ b, rtol=1e-5)


PADS = [
    (((1, 2), (0, 3)), 0.0),
    (2, np.nan),
    (((0, 0), (4, 0)), ((0, 0), (-1.5, 0))),
    ((1, 0), 7.0),
]


@pytest.mark.parametrize("width,value", PADS, ids=str)
def test_pad_matches_numpy(rng, width, value):
    x = rng.standard_normal((12, 8)).astype(np.float32)
    with ooc.MemoryBudget(BUDGET):
        got = ooc.pad(ooc.asarray(x), width, mode="constant", constant_values=value)
    want = np.pad(x, width, mode="constant", constant_values=value)
    np.testing.assert_array_equal(_value(got), want)


def test_pad_refuses_other_modes(rng):
    with pytest.raises(NotImplementedError, match="constant"):
        ooc.pad(ooc.asarray(np.ones((3, 3), np.float32)), 1, mode="reflect")


# ---------------------------------------------------------------- gradients


def _holes(xp, x):
    """``x`` with NaN where it is above 1 (about 1 in 6 of standard normal values)."""
    return xp.where(x > 1.0, xp.nan, x)


def case(name, body, shapes, domain="real"):
    compiled = jax.jit(lambda *xs: body(jnp, *xs))

    def fn(xp, *xs):
        return compiled(*xs) if xp is jnp else body(xp, *xs)

    return GradCase(name, fn, shapes, domain)


CASES = [
    case("nansum", lambda xp, x: xp.nansum(_holes(xp, x), axis=0), ((32, 12),)),
    case("nanmean", lambda xp, x: xp.nanmean(_holes(xp, x), axis=1), ((32, 12),)),
    case("nanmean", lambda xp, x: xp.nanmean(_holes(xp, x)), ((16, 12),)),
    case("nanvar", lambda xp, x: xp.nanvar(_holes(xp, x), axis=0, ddof=1), ((32, 12),)),
    case("nanstd", lambda xp, x: xp.nanstd(_holes(xp, x), axis=1), ((32, 12),)),
    case("nanmax", lambda xp, x: xp.nanmax(_holes(xp, x), axis=0), ((32, 12),)),
    case("nanmin", lambda xp, x: xp.nanmin(_holes(xp, x), axis=1), ((32, 12),)),
    case("nanprod", lambda xp, x: xp.nanprod(_holes(xp, x), axis=1), ((32, 6),), "near1"),
    case("nancumsum", lambda xp, x: xp.nancumsum(_holes(xp, x), axis=0), ((32, 6),)),
    case("nancumprod", lambda xp, x: xp.nancumprod(x, axis=1), ((6, 16),), "near1"),
    case("einsum", lambda xp, a, b: xp.einsum("ij,jk->ik", a, b), ((12, 8), (8, 5))),
    case("einsum", lambda xp, a, b: xp.einsum("ij,ij->i", a, b), ((12, 8), (12, 8))),
    case("einsum", lambda xp, a, b: xp.einsum("...ab,b->...a", a, b), ((3, 12, 8), (8,))),
    case("pad", lambda xp, x: xp.pad(x, ((2, 1), (0, 3)), constant_values=0.5) ** 2, ((12, 8),)),
    case("cumsum", lambda xp, x: xp.cumsum(x, axis=1), ((16, 12),)),
    case("cumsum", lambda xp, x: xp.cumsum(x), ((6, 5),)),  # flattened
    case("cumprod", lambda xp, x: xp.cumprod(x, axis=0), ((12, 6),), "near1"),
    case("std", lambda xp, x: xp.std(x, axis=0, ddof=1), ((24, 6),)),
]


@pytest.mark.parametrize("name", ["cumsum", "cumprod"])
@pytest.mark.parametrize("axis", [None, 0, 1], ids=str)
def test_numpy_running_sums_match_numpy(rng, name, axis):
    x = (1 + 0.1 * rng.standard_normal((20, 7))).astype(np.float32)
    with ooc.MemoryBudget(BUDGET):
        got = getattr(ooc, name)(ooc.asarray(x), axis=axis)
    np.testing.assert_allclose(_value(got), getattr(np, name)(x, axis=axis), rtol=1e-5)


def test_ddof_is_numpys_name_for_correction(rng):
    x = rng.standard_normal((30, 4)).astype(np.float32)
    with ooc.MemoryBudget(BUDGET):
        d = ooc.asarray(x)
        np.testing.assert_allclose(_value(ooc.var(d, axis=0, ddof=1)), x.var(0, ddof=1), rtol=1e-5)
        np.testing.assert_allclose(_value(ooc.std(d, axis=1, ddof=2)), x.std(1, ddof=2), rtol=1e-5)
        with pytest.raises(TypeError, match="not both"):
            ooc.std(d, correction=1, ddof=1)


def test_numpy_methods_of_a_disk_array(rng):
    z = (rng.standard_normal((9, 5)) + 1j * rng.standard_normal((9, 5))).astype(np.complex64)
    x = rng.standard_normal((9, 5)).astype(np.float32)
    with ooc.MemoryBudget(BUDGET):
        dz, dx = ooc.asarray(z), ooc.asarray(x)
        np.testing.assert_array_equal(_value(dz.conj()), z.conj())
        np.testing.assert_array_equal(_value(dz.conjugate()), z.conjugate())
        np.testing.assert_array_equal(_value(dz.real), z.real)
        np.testing.assert_array_equal(_value(dz.imag), z.imag)
        np.testing.assert_array_equal(
            _value(dx.argsort(axis=0, kind="stable")), x.argsort(0, kind="stable")
        )
        s = np.sort(x[:, 0])
        got = ooc.asarray(s).searchsorted(np.float32([-0.5, 0.0, 0.5]), side="right")
        np.testing.assert_array_equal(_value(got), s.searchsorted([-0.5, 0.0, 0.5], side="right"))


@pytest.mark.parametrize("dtype, jit", MODES, ids=MODE_IDS)
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_gradient_matches_jax(case, dtype, jit):
    check(case, dtype, jit)
