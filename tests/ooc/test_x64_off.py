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


# ---------------------------------------------------------------- JAX bounds and fill values


INT_DATA = np.array([[-1, 0], [1, 2], [3, 4], [-1, 0], [1, 2], [3, 4]])  # int64, as NumPy gives


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
def test_clip_of_ints_by_a_traced_float_bound_promotes_and_passes_its_gradient(jit):
    """The bound was cast into the integers: (1.0, 0.0) where jax.numpy gives
    (0.8333, 0.3333). Now the clipped ints are floats, on disk in NumPy's float64."""

    def loss(xp, X, lo):
        return xp.mean(xp.clip(X, lo, None))

    def along(xp, X, lo):  # a reduction along an axis first (it crashed eagerly)
        c = xp.clip(X, lo, None)
        return xp.mean(xp.mean(c, axis=0)) + xp.mean(c)

    lo = jnp.float32(-0.5)
    with ooc.MemoryBudget(BUDGET):
        X = disk(INT_DATA)
        for fn in (loss, along):
            grad = jax.value_and_grad(lambda lo, fn=fn: fn(ooc, X, lo))
            got = (jax.jit(grad) if jit else grad)(lo)
            want = jax.value_and_grad(lambda lo, fn=fn: fn(jnp, jnp.asarray(INT_DATA), lo))(lo)
            assert [g.dtype for g in got] == [w.dtype for w in want] == [np.float32] * 2
            np.testing.assert_allclose(got, want, rtol=1e-6)
        assert np.asarray(want[1]) > 0
        clipped = ooc.clip(X, lo, None)
    assert clipped.dtype == np.float64  # NumPy's int64 with float32, on disk
    np.testing.assert_array_equal(clipped.to_numpy(), np.clip(INT_DATA, np.float32(-0.5), None))


def test_clip_promotes_its_bounds_as_numpy_does():
    """A Python float bound was refused for int data; a float64 bound of float32 data
    was rounded to float32. Results on disk have np.clip's dtype and values."""
    ints = INT_DATA.astype(np.int32)
    halves = np.linspace(-2, 2, 12, dtype=np.float32).reshape(6, 2)
    bounds = np.full((1, 2), 0.3)  # float64
    cases = [
        (ints, 0.5, 3.5),  # float64: NumPy, jax.numpy and xarray promote
        (ints, 0, 3.5),  # bounds of two kinds
        (ints, -1, None),  # int bounds keep the ints
        (INT_DATA.astype(np.uint8), -1, 300),  # out of range: clamped, as NumPy
        (ints > 1, 0.5, None),  # bools too
        (halves, bounds, None),  # a float64 array bound
        (halves.astype(np.float16), np.float32(-0.25), 1),  # a strong NumPy scalar
        (halves, -0.5, 0.7),  # a weak one keeps float32
    ]
    with ooc.MemoryBudget(BUDGET):
        for data, lo, hi in cases:
            want = np.clip(data, lo, hi)
            got = ooc.clip(disk(data), disk(lo) if np.ndim(lo) else lo, hi)
            assert got.dtype == want.dtype, (data.dtype, lo, hi)
            np.testing.assert_array_equal(got.to_numpy(), want)


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
def test_clip_at_ties_and_by_nan_bounds_is_jax_numpys(jit):
    """A tie shared no gradient (x got it all) and a NaN bound was ignored; as
    jnp.clip, each bound reached shares it equally, and NaN bounds give NaN."""
    x = np.array([1.0, 2.0, 3.0, 2.0], np.float32)

    def loss(xp, x, lo, hi):
        return xp.sum(xp.clip(x, lo, hi) * xp.asarray([1.0, 2.0, 3.0, 4.0]))

    grad = jax.grad(lambda x, lo, hi: loss(ooc, x, lo, hi), (0, 1, 2))
    got = (jax.jit(grad) if jit else grad)(disk(x), jnp.float32(2.0), jnp.float32(2.0))
    want = jax.grad(lambda x, lo, hi: loss(jnp, x, lo, hi), (0, 1, 2))(
        jnp.asarray(x), jnp.float32(2.0), jnp.float32(2.0)
    )
    np.testing.assert_allclose(got[0].to_numpy(), want[0])
    np.testing.assert_allclose(got[1:], want[1:])
    nan = ooc.clip(disk(x), jnp.float32(np.nan), 2.5).to_numpy()
    np.testing.assert_array_equal(nan, np.clip(x, np.nan, 2.5))
    assert np.isnan(nan).all()


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
def test_an_int_result_of_a_parameter_used_twice_passes_no_gradient(jit):
    """``b = X > c`` read by two operations: its two float0 cotangents were added
    (TypeError: Called add with a float0) in eager mode."""
    data = np.linspace(-2, 2, 60, dtype=np.float32).reshape(20, 3)

    def loss(xp, X, c):
        b = X > c
        return xp.mean(xp.mean(b, axis=0)) + xp.mean(b) + xp.sum(X * c)

    grad = jax.value_and_grad(lambda c: loss(ooc, disk(data), c))
    with ooc.MemoryBudget(BUDGET):
        got = (jax.jit(grad) if jit else grad)(jnp.float32(0.5))
    want = jax.value_and_grad(lambda c: loss(jnp, jnp.asarray(data), c))(jnp.float32(0.5))
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-5)


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
def test_full_full_like_and_pad_take_a_traced_fill_value(jit):
    """They converted the fill value to NumPy (TracerArrayConversionError); as
    jnp.full, the array holds it in the dtype asked for, and it gets the gradient."""
    data = np.linspace(-2, 2, 12, dtype=np.float32).reshape(4, 3)
    weights = np.arange(20, dtype=np.float32).reshape(4, 5) % 7

    def programs(xp, x, c):
        return [
            xp.sum(xp.full_like(x, c) * weights[:, :3]),
            xp.sum(xp.full((4, 5), c) * weights),
            xp.sum(xp.full_like(x, c, dtype=np.float16)),
            xp.sum(xp.astype(xp.full_like(x, c, dtype=np.int32), np.float32)),  # no gradient
            xp.sum(xp.pad(x, 1, constant_values=c)[:4, :5] * weights),
        ]

    c = jnp.float32(1.25)
    with ooc.MemoryBudget(BUDGET):
        x = disk(data)
        for k in range(5):
            grad = jax.value_and_grad(lambda c, k=k: programs(ooc, x, c)[k])
            got = (jax.jit(grad) if jit else grad)(c)
            # jnp.pad's gradient needs its array differentiated too
            ref = jax.value_and_grad(lambda c, x, k=k: programs(jnp, x, c)[k], (0, 1))
            value, (g_c, _) = ref(c, jnp.asarray(data))
            want = (value, g_c)
            assert [g.dtype for g in got] == [w.dtype for w in want], k
            np.testing.assert_allclose(got, want, rtol=1e-6, err_msg=str(k))


def test_full_keeps_the_dtype_of_a_numpy_or_jax_fill_value():
    """A fill value with a dtype gave the default dtype of its kind (jnp.int8(3):
    a float32 array); as in NumPy and jax.numpy it keeps its dtype (NumPy's on
    disk: np.float64 stays float64); a weakly typed JAX value acts as a number."""
    with ooc.MemoryBudget(BUDGET):
        for value, dtype in [
            (jnp.int8(3), np.int8),
            (np.int8(3), np.int8),
            (jnp.float16(2), np.float16),
            (np.float64(2), np.float64),
            (jnp.asarray(2.0), np.float32),  # weakly typed
            (jnp.asarray(True), np.bool_),
        ]:
            got = ooc.full((5, 3), value)
            assert got.dtype == dtype, value
            np.testing.assert_array_equal(got.to_numpy(), np.full((5, 3), value, dtype))
        with pytest.raises(TypeError, match="bfloat16"):
            ooc.full((5, 3), jnp.asarray(1, jnp.bfloat16))


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
def test_a_traced_python_number_that_numpy_widens_gives_numpys_dtype(jit):
    """``bool_array + c`` with ``c`` a Python float traced by jax.jit or jax.grad: JAX
    holds ``c`` as a weak float32, and the result on disk was float32 where NumPy's
    rule gives float64 (the value stays the float32 one JAX holds); its gradient
    comes back in the float32 JAX holds it in, as jax.grad gives it."""
    cases = [
        (np.array([True, False, True]), 0.75, np.float64),  # bool + float
        (np.arange(-3, 3, dtype=np.int8), -1.5, np.float64),  # int8 + float
        (np.array([True, False, True]), 3, np.int64),  # bool + int
        (np.arange(4, dtype=np.float16), 0.5, np.float16),  # kept: float16 + float
    ]
    with ooc.MemoryBudget(BUDGET):
        for data, c, dtype in cases:
            X = disk(data)
            out = (jax.jit(lambda c, X: X * c) if jit else lambda c, X: X * c)(c, X)
            assert out.dtype == dtype == np.result_type(data, c), (data.dtype, c)
            np.testing.assert_array_equal(out.to_numpy(), data * c)
            if isinstance(c, float):
                seen = []  # the dtype of X * c where jax.grad traces c (eagerly too)

                def loss(c, X=X, seen=seen):
                    seen.append((X * c).dtype)
                    return ooc.sum(ooc.square(X * c + c))

                grad = jax.value_and_grad(loss)
                got = (jax.jit(grad) if jit else grad)(c)
                assert seen == [dtype]
                want = jax.value_and_grad(lambda c: jnp.sum(jnp.square(data * c + c)))(c)
                assert got[1].dtype == want[1].dtype == np.float32
                np.testing.assert_allclose(got, want, rtol=2e-3)


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
def test_full_like_converts_a_traced_bfloat16_fill_value_in_jax(jit):
    """A traced bfloat16 fill value was refused (DiskArrays cannot compute in it);
    converted to the array's dtype in JAX, as jnp.full_like does, it gets its
    bfloat16 gradient."""
    data = np.linspace(-1, 1, 12).reshape(4, 3)  # float64
    c = jnp.asarray(1.5, jnp.bfloat16)

    def loss(xp, x, c):
        return xp.sum(xp.full_like(x, c) * x)

    grad = jax.value_and_grad(lambda c, x: loss(ooc, x, c))
    with ooc.MemoryBudget(BUDGET):
        got = (jax.jit(grad) if jit else grad)(c, disk(data))
    want = jax.value_and_grad(lambda c: loss(jnp, jnp.asarray(data), c))(c)
    assert got[1].dtype == want[1].dtype == jnp.bfloat16
    np.testing.assert_allclose(np.float32(got[1]), np.float32(want[1]), atol=1e-2)
    np.testing.assert_allclose(got[0], data.sum() * 1.5, atol=1e-5)
