"""The fft extension out of core: NumPy's values and dtypes on arrays cut into several
tiles (eagerly and under jax.jit), a clear refusal when one line exceeds the budget,
and jax.numpy.fft's gradients."""

import jax
import numpy as np
import pytest
from gradcases import MODE_IDS, MODES, GradCase, check

from gradpipe import ooc

BUDGET = 4096
COMPLEX = {"float32": np.complex64, "float64": np.complex128}


def _data(dtype, shape=(6, 5, 8), complex_=False):
    rng = np.random.default_rng(3)
    x = rng.standard_normal(shape)
    if complex_:
        x = x + 1j * rng.standard_normal(shape)
        return x.astype(COMPLEX[dtype])
    return x.astype(dtype)


def _runs():
    return [("eager", lambda f: f), ("jit", jax.jit)]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", ["fft", "ifft", "rfft", "irfft", "hfft", "ihfft"])
@pytest.mark.parametrize(
    "n, axis, norm", [(None, -1, "backward"), (7, 1, "ortho"), (4, 0, "forward")]
)
def test_one_dimensional_transforms_follow_numpy(dtype, name, n, axis, norm):
    X = _data(dtype, complex_=name in ("fft", "ifft", "irfft", "hfft"))
    want = getattr(np.fft, name)(X, n=n, axis=axis, norm=norm)
    with ooc.MemoryBudget(BUDGET):
        x = ooc.asarray(X)
        for _, run in _runs():
            got = run(lambda a: getattr(ooc.fft, name)(a, n=n, axis=axis, norm=norm))(x)
            got = got.to_numpy(force=True)
            assert got.dtype == want.dtype, (name, got.dtype, want.dtype)
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", ["fftn", "ifftn", "rfftn", "irfftn"])
@pytest.mark.parametrize(
    "s, axes", [(None, None), ((4, 6), (0, 2)), ((3, 5), None), (None, (-1, 0))]
)
def test_n_dimensional_transforms_follow_numpy(name, s, axes):
    X = _data("float64", complex_=name in ("fftn", "ifftn", "irfftn"))
    np_axes = axes if axes is not None or s is None else tuple(range(-len(s), 0))
    want = getattr(np.fft, name)(X, s=s, axes=np_axes, norm="ortho")
    with ooc.MemoryBudget(BUDGET):
        x = ooc.asarray(X)
        for _, run in _runs():
            got = run(lambda a: getattr(ooc.fft, name)(a, s=s, axes=axes, norm="ortho"))(x)
            np.testing.assert_allclose(got.to_numpy(force=True), want, rtol=1e-10, atol=1e-10)


def test_frequencies_and_shifts_follow_numpy():
    with ooc.MemoryBudget(BUDGET):
        for n in (1, 7, 8):
            np.testing.assert_allclose(
                ooc.fft.fftfreq(n, d=0.25).to_numpy(force=True), np.fft.fftfreq(n, 0.25)
            )
            np.testing.assert_allclose(
                ooc.fft.rfftfreq(n, d=0.25).to_numpy(force=True), np.fft.rfftfreq(n, 0.25)
            )
        assert ooc.fft.fftfreq(6, dtype=ooc.float32).dtype == np.float32
        X = _data("float32")
        x = ooc.asarray(X)
        for axes in (None, 1, (0, 2)):
            got = ooc.fft.fftshift(x, axes=axes).to_numpy(force=True)
            np.testing.assert_array_equal(got, np.fft.fftshift(X, axes=axes))
            back = ooc.fft.ifftshift(ooc.fft.fftshift(x, axes=axes), axes=axes).to_numpy(force=True)
            np.testing.assert_array_equal(back, X)


def test_a_line_longer_than_the_budget_is_refused_with_its_size():
    x = ooc.zeros((2, 20_000))
    with ooc.MemoryBudget(BUDGET), pytest.raises(MemoryError, match="one batch element"):
        ooc.fft.rfft(x)
    assert ooc.fft.rfft(x, axis=0, budget=BUDGET).shape == (2, 20_000)


def test_bad_input_is_refused():
    x = ooc.asarray(np.ones((4, 3), np.float32))
    with pytest.raises(ValueError, match="norm"):
        ooc.fft.fft(x, norm="both")
    with pytest.raises(TypeError, match="rfft needs a real"):
        ooc.fft.rfft(ooc.asarray(np.ones(4, np.complex64)))
    with pytest.raises(ValueError, match="n must be a positive int"):
        ooc.fft.fft(x, n=0)
    with pytest.raises(np.exceptions.AxisError):
        ooc.fft.fft(x, axis=2)
    with pytest.raises(ValueError, match="same length"):
        ooc.fft.fftn(x, s=(2, 2), axes=(0,))


def _parts(xp, y):
    return xp.real(y) + 2 * xp.imag(y)


CASES = [
    GradCase("fft", lambda xp, x: _parts(xp, xp.fft.fft(x, axis=0)), ((6, 5),)),
    GradCase("fft", lambda xp, x: _parts(xp, xp.fft.fft(x, n=7, norm="ortho")), ((6, 5),)),
    GradCase("ifft", lambda xp, x: _parts(xp, xp.fft.ifft(x, n=4)), ((6, 5),)),
    GradCase("rfft", lambda xp, x: _parts(xp, xp.fft.rfft(x, axis=0)), ((6, 5),)),
    GradCase("irfft", lambda xp, x: xp.fft.irfft(xp.fft.rfft(x), n=5), ((6, 5),)),
    GradCase("hfft", lambda xp, x: xp.fft.hfft(xp.fft.ifft(x), norm="forward"), ((6, 5),)),
    GradCase("ihfft", lambda xp, x: _parts(xp, xp.fft.ihfft(x, axis=0)), ((6, 5),)),
    GradCase("fftn", lambda xp, x: _parts(xp, xp.fft.fftn(x, s=(4, 6))), ((3, 6, 5),)),
    GradCase("ifftn", lambda xp, x: _parts(xp, xp.fft.ifftn(x, axes=(0, 2))), ((3, 6, 5),)),
    GradCase("rfftn", lambda xp, x: _parts(xp, xp.fft.rfftn(x)), ((3, 6, 5),)),
    GradCase("irfftn", lambda xp, x: xp.fft.irfftn(xp.fft.rfftn(x), s=(6, 4)), ((3, 6, 5),)),
    GradCase("fftshift", lambda xp, x: xp.fft.fftshift(x, axes=(0, 1)), ((7, 6),)),
    GradCase("ifftshift", lambda xp, x: xp.fft.ifftshift(x), ((7, 6),)),
]


@pytest.mark.parametrize("dtype, jit", MODES, ids=MODE_IDS)
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_fft_gradients_equal_jax(case, dtype, jit):
    check(case, dtype, jit)
