"""With x64 off (JAX's default) gradpipe.ooc works as jax.numpy works.

The rule (the out-of-core guide, "Dtypes"): default dtypes are jax.numpy's under
the flag; a result that becomes a JAX value is what ``jnp.asarray`` makes of
NumPy's (float64 to float32, int64 to int32), with one warning per process;
DiskArray results keep NumPy's dtypes on disk. Every test here sets the flag
itself (``jax.enable_x64``): other modules switch it on in contexts of their own.
The dtype property tests of test_dtypes.py run with x64 off too.
"""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gradpipe import ooc
from gradpipe.ooc.kernels import _x64

BUDGET = 4096  # the minimum: every array below is cut into several tiles


@pytest.fixture(autouse=True)
def x64_off():
    """x64 off, and the once-per-process notice silenced (tested by itself below)."""
    with jax.enable_x64(False), warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="gradpipe.ooc: the", category=UserWarning)
        yield


def disk(x):
    return ooc.DiskArray.from_numpy(np.asarray(x))


def value(x):
    return x.to_numpy(force=True) if isinstance(x, ooc.DiskArray) else np.asarray(x)


def as_jax_would(x):
    """NumPy's ``x`` as ``jnp.asarray`` makes it under the flag in force."""
    return np.asarray(jnp.asarray(x))


def _float64_data():
    rng = np.random.default_rng(3)
    return rng.standard_normal((60, 7)) * 3 + 1  # float64, as NumPy and most files give


# ---------------------------------------------------------------- default dtypes


@pytest.mark.parametrize("x64", [False, True], ids=["x64_off", "x64"])
def test_default_dtypes_are_jax_numpys(x64):
    with jax.enable_x64(x64):
        got = ooc.__array_namespace_info__().default_dtypes()
        assert got == {
            "real floating": jnp.asarray(0.0).dtype,
            "complex floating": jnp.asarray(0j).dtype,
            "integral": jnp.asarray(0).dtype,
            "indexing": jnp.argmax(jnp.zeros(2)).dtype,
        }
    assert got["real floating"] == (np.float64 if x64 else np.float32)


CREATION = [
    lambda xp: xp.asarray(0),
    lambda xp: xp.asarray(1.5),
    lambda xp: xp.asarray(True),
    lambda xp: xp.asarray(2 - 1j),
    lambda xp: xp.asarray([1, 2, 3]),
    lambda xp: xp.asarray([[1, 2.5], [3, 4]]),
    lambda xp: xp.asarray([True, 2]),
    lambda xp: xp.arange(10),
    lambda xp: xp.arange(3, 400, 7),
    lambda xp: xp.arange(1.5, 7.0, 0.5),
    lambda xp: xp.linspace(0, 1, 301),
    lambda xp: xp.linspace(0, 1j, 9),
    lambda xp: xp.zeros((37, 5)),
    lambda xp: xp.ones(40),
    lambda xp: xp.empty((3, 4)),
    lambda xp: xp.full((50,), 2),
    lambda xp: xp.full((50,), 2.5),
    lambda xp: xp.full((5,), True),
    lambda xp: xp.full((4, 4), 1 + 2j),
    lambda xp: xp.eye(13, 30, k=4),
    lambda xp: xp.fft.fftfreq(16, d=0.1),
    lambda xp: xp.fft.rfftfreq(16),
]


@pytest.mark.parametrize("x64", [False, True], ids=["x64_off", "x64"])
@pytest.mark.parametrize("call", CREATION)
def test_creation_without_a_dtype_gives_jax_numpys_dtype(call, x64):
    with jax.enable_x64(x64), ooc.MemoryBudget(BUDGET):
        got, want = call(ooc), call(jnp)
        assert got.dtype == want.dtype and got.shape == want.shape
        if not got.shape:
            assert isinstance(got, jax.Array)
        # computed in 64 bits and rounded once (jax.numpy computes in 32)
        np.testing.assert_allclose(value(got), np.asarray(want), rtol=2e-6, atol=1e-6)


def test_numpy_arrays_keep_their_dtype_on_disk_and_0d_values_become_jax_values():
    x = ooc.asarray(np.arange(12.0))
    assert isinstance(x, ooc.DiskArray) and x.dtype == np.float64
    assert ooc.asarray(np.arange(3, dtype=np.int64)).dtype == np.int64
    assert ooc.full((3,), np.float64(2.0), dtype=ooc.float64).dtype == np.float64
    zero_d = ooc.asarray(np.float64(0.1))
    assert zero_d.dtype == np.float32 and zero_d == jnp.asarray(np.float64(0.1))
    assert ooc.asarray(7, dtype=ooc.int64).dtype == np.int32
    with pytest.raises(OverflowError):  # as jnp.asarray([2**40]) with x64 off
        ooc.asarray([2**40, 1])
    # a function of in-memory NumPy values, computed by NumPy: the JAX value jnp gives
    got, want = ooc.exp(np.float64(0.5)), jnp.exp(np.float64(0.5))
    assert got.dtype == want.dtype == np.float32 and got == jnp.asarray(np.exp(0.5))


# ---------------------------------------------------------------- float64 data


REDUCTIONS = {
    "sum": (ooc.sum, np.sum),
    "mean": (ooc.mean, np.mean),
    "var": (ooc.var, np.var),
    "std": (ooc.std, np.std),
    "max": (ooc.max, np.max),
    "min": (ooc.min, np.min),
    "prod": (
        lambda x: ooc.prod(ooc.abs(x) * 1e-3 + 0.999),
        lambda x: np.prod(np.abs(x) * 1e-3 + 0.999),
    ),
}


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
@pytest.mark.parametrize("name", list(REDUCTIONS))
def test_0d_reductions_of_float64_data_are_float32_jax_values(name, jit):
    """They were refused with a TypeError; now as jnp.asarray(np.sum(data))."""
    data = _float64_data()
    fn, np_fn = REDUCTIONS[name]
    with ooc.MemoryBudget(BUDGET):
        got = (jax.jit(fn) if jit else fn)(disk(data))
    want = jnp.asarray(np_fn(data))
    assert isinstance(got, jax.Array) and got.shape == () and got.dtype == want.dtype
    assert want.dtype == np.float32
    if name in ("max", "min"):  # no arithmetic: the same value, rounded once
        assert got == want
    else:
        np.testing.assert_allclose(got, want, rtol=1e-6)


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
def test_reductions_along_axes_keep_float64_on_disk(jit):
    data = _float64_data()
    with ooc.MemoryBudget(BUDGET):
        x = disk(data)
        for fn, np_fn, kw in [
            (ooc.sum, np.sum, dict(axis=0)),
            (ooc.mean, np.mean, dict(axis=1)),
            (ooc.var, np.var, dict(axis=0)),
            (ooc.max, np.max, dict(axis=1)),
            (ooc.sum, np.sum, dict(keepdims=True)),
            (ooc.std, np.std, dict(keepdims=True)),
        ]:

            def f(a, fn=fn, kw=kw):
                return fn(a, **kw)

            got = (jax.jit(f) if jit else f)(x)
            assert isinstance(got, ooc.DiskArray) and got.dtype == np.float64
            np.testing.assert_allclose(got.to_numpy(), np_fn(data, **kw), rtol=1e-12)
        assert (x * 2.0).dtype == np.float64 and ooc.exp(x).dtype == np.float64


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
def test_gradients_over_float64_data(jit):
    """d/ds and d/dX of ``mean(square(X * s))``: a float32 JAX ``s`` gets a float32
    gradient, the float64 X a float64 DiskArray one, both computed in 64 bits
    (compared with jax.grad in float64 on the same values)."""
    data = _float64_data()
    s = jnp.float32(0.7)

    def loss(X, s):
        return ooc.mean(ooc.square(X * s))

    with jax.enable_x64(True):
        ref = jax.value_and_grad(lambda X, s: jnp.mean(jnp.square(X * s)), (0, 1))
        (want_loss, (want_X, want_s)) = ref(jnp.asarray(data), jnp.float64(s))
    grad = jax.value_and_grad(loss, (0, 1))
    with ooc.MemoryBudget(BUDGET):
        got_loss, (g_X, g_s) = (jax.jit(grad) if jit else grad)(disk(data), s)
        only_s = (jax.jit(jax.grad(loss, 1)) if jit else jax.grad(loss, 1))(disk(data), s)
        only_X = (jax.jit(jax.grad(loss)) if jit else jax.grad(loss))(disk(data), s)
    assert got_loss.dtype == np.float32
    np.testing.assert_allclose(got_loss, want_loss, rtol=1e-6)
    for g in (g_s, only_s):
        assert isinstance(g, jax.Array) and g.dtype == np.float32 and g.shape == ()
        np.testing.assert_allclose(g, np.float32(want_s), rtol=1e-6)
    for g in (g_X, only_X):
        assert isinstance(g, ooc.DiskArray) and g.dtype == np.float64
        np.testing.assert_allclose(g.to_numpy(), want_X, rtol=1e-12)


def test_the_gradient_of_a_rounded_maximum_finds_its_ties():
    """The float32 maximum JAX holds equals no float64 element: the backward pass
    takes the exact one again, so the tied maxima share the gradient."""
    data = _float64_data()
    data[[3, 40], [1, 5]] = 100.1  # two tied maxima, not a float32 value
    g = jax.grad(lambda x: ooc.max(x))(disk(data)).to_numpy()
    want = np.zeros_like(data)
    want[[3, 40], [1, 5]] = 0.5
    np.testing.assert_array_equal(g, want)


# ---------------------------------------------------------------- integer data


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
@pytest.mark.parametrize("dtype", ["int32", "int64", "uint8", "bool"])
def test_the_mean_of_ints_is_a_float32_jax_value(dtype, jit):
    data = (np.arange(1001) * 7919 % 1000).astype(dtype)
    mean = jax.jit(ooc.mean) if jit else ooc.mean
    with ooc.MemoryBudget(BUDGET):
        got = mean(disk(data))
    assert got.dtype == np.float32 == jnp.mean(jnp.asarray(data)).dtype
    assert got == as_jax_would(np.mean(data))  # the float64 mean, rounded once


@pytest.mark.parametrize("dtype", ["int8", "int16", "int32", "uint8", "uint16", "bool"])
@pytest.mark.parametrize("name", ["sum", "prod", "cumulative_sum"])
def test_sums_of_ints_are_in_jax_numpys_default_int(name, dtype):
    data = (np.arange(30).reshape(6, 5) % 3).astype(dtype)
    fn, jnp_fn = getattr(ooc, name), getattr(jnp, name)
    with ooc.MemoryBudget(BUDGET):
        along = fn(disk(data), axis=0)
        want = jnp_fn(jnp.asarray(data), axis=0)
        assert isinstance(along, ooc.DiskArray) and along.dtype == want.dtype
        np.testing.assert_array_equal(along.to_numpy(), want)
        if name != "cumulative_sum":
            total = fn(disk(data))
            assert total.dtype == jnp_fn(jnp.asarray(data)).dtype and total == jnp_fn(data)


def test_int64_data_keeps_int64_on_disk_and_becomes_an_int32_jax_value():
    data = np.arange(2**33, 2**33 + 40, dtype=np.int64).reshape(8, 5)
    with ooc.MemoryBudget(BUDGET):
        cols = ooc.sum(disk(data), axis=0)
        assert cols.dtype == np.int64
        np.testing.assert_array_equal(cols.to_numpy(), data.sum(0))
        total = ooc.sum(disk(data))
    assert total.dtype == np.int32 and total == as_jax_would(data.sum())  # wrapped, as JAX


def test_indices_and_counts_are_in_jax_numpys_index_dtype():
    data = _float64_data()
    keys = np.sort(data[:, 0])
    with ooc.MemoryBudget(BUDGET):
        x, k = disk(data), disk(keys)
        pairs = [
            (ooc.argmax(x), jnp.argmax(data)),
            (ooc.argmin(x, axis=0), jnp.argmin(data, axis=0)),
            (ooc.argsort(x, axis=0), jnp.argsort(data, axis=0)),
            (ooc.searchsorted(k, disk(data[:5, 1])), jnp.searchsorted(keys, data[:5, 1])),
            (ooc.searchsorted(k, 0.5), jnp.searchsorted(keys, 0.5)),
            (ooc.count_nonzero(x > 1), jnp.count_nonzero(data > 1)),
            (ooc.count_nonzero(x > 1, axis=1), jnp.count_nonzero(data > 1, axis=1)),
        ]
        for got, want in pairs:
            assert got.dtype == want.dtype == np.int32
            np.testing.assert_array_equal(value(got), want)


def test_an_index_past_int32_is_refused_rather_than_wrapped():
    with pytest.raises(ValueError, match=r"argsort.*int32.*jax_enable_x64"):
        _x64.index_dtype(2**31, "argsort")
    assert _x64.index_dtype(2**31 - 1, "argsort") == np.int32
    with jax.enable_x64(True):
        assert _x64.index_dtype(2**31, "argsort") == np.int64


# ---------------------------------------------------------------- the notice


def test_the_first_rounding_in_a_process_warns_once(monkeypatch):
    """Once: a training loop would print it every step otherwise. It names the
    flag and ooc.astype, and points at the caller's line."""
    monkeypatch.setattr(_x64, "_warned", False)
    x = disk(_float64_data())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ooc.sum(x)
        ooc.mean(x)
        jax.jit(ooc.sum)(x)
        ooc.sum(disk(np.arange(3, dtype=np.int64)))
    notices = [w for w in caught if issubclass(w.category, UserWarning)]
    assert len(notices) == 1, [str(w.message) for w in notices]
    message = str(notices[0].message)
    for needed in ("float64 result of sum", "float32", "jax_enable_x64", "ooc.astype"):
        assert needed in message
    assert notices[0].filename == __file__
    with warnings.catch_warnings(record=True) as caught:  # 32-bit results: no notice
        warnings.simplefilter("always")
        monkeypatch.setattr(_x64, "_warned", False)
        ooc.sum(ooc.astype(x, ooc.float32))
        with jax.enable_x64(True):
            ooc.sum(x)
    assert not [w for w in caught if issubclass(w.category, UserWarning)]
