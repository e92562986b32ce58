"""With JAX's x64 flag off (its default), xarray on gradpipe gives what NumPy-backed
xarray gives: a result that stays on disk has NumPy's dtype and precision, whatever
the flag; only a 0-d result, which becomes a JAX value, follows jax.numpy's
conversion (the xarray guide's "Dtypes"). One test per way this once went wrong
(issue 31, case 6): float64 NumPy weights rounded to float32 in ``xr.dot`` and
``weighted``, quantiles of float64 data in float32, median and quantile of integers
and booleans missing, grouped reductions of a 1-D array narrowed into memory, a
NumPy operand first in ``xr.dot`` loading the other whole, and eager ``jax.grad``
through grouped arithmetic failing."""

import tracemalloc
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest
from xrfiles import xr

from gradpipe import ooc

#: A budget far smaller than the variables below (each is 24 KiB or more).
TINY = ooc.MemoryBudget(8192)


@pytest.fixture(autouse=True)
def x64_off():
    with jax.enable_x64(False), warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # the once-per-process 0-d notice
        yield


@pytest.fixture(scope="module")
def ref():
    """NumPy-backed data: float64 with gaps, float32, int64 and bool, monthly."""
    rng = np.random.default_rng(31)
    time = pd.date_range("2000-01-01", periods=48, freq="MS")
    lat = np.linspace(-60.0, 60.0, 8)
    lon = np.arange(10) * 36.0
    f = 280 + 10 * rng.standard_normal((48, 8, 10)) + 1e-9 * rng.standard_normal((48, 8, 10))
    f[rng.random(f.shape) < 0.05] = np.nan
    dims = ("time", "lat", "lon")
    return xr.Dataset(
        {
            "f": (dims, f, {"units": "K"}),
            "h": (dims, rng.standard_normal((48, 8, 10)).astype(np.float32)),
            "i": (dims, rng.integers(-50, 50, (48, 8, 10))),
            "b": (dims, rng.random((48, 8, 10)) > 0.5),
            "s": ("time", f[:, 0, 0] + 1e-7 * np.arange(48), {"units": "K"}),
            "n": ("time", rng.integers(0, 1000, 48)),
        },
        coords={"time": time, "lat": lat, "lon": lon},
    )


def on_disk(ref):
    """``ref`` moved to disk. Made inside each test, not by a fixture: pytest holds a
    fixture's value until after the session's check that no scratch file is left."""
    return ref.chunk(chunked_array_type="gradpipe")


def assert_same(got, want, *, on_disk=True):
    """``got`` (gradpipe-backed) equals ``want`` (NumPy-backed): dtype, dims,
    coordinates, NaNs and values to float64 rounding; a DiskArray when ``on_disk``."""
    if on_disk:
        assert isinstance(got.data, ooc.DiskArray), type(got.data)
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    got = got.compute()
    xr.testing.assert_allclose(got, want, rtol=1e-13, atol=0)
    assert got.attrs == want.attrs


# ---------------------------------------------------------------- xr.dot and weighted


def test_weighted_mean_with_the_guides_cosine_weights_is_numpys_float64(ref):
    gp = on_disk(ref)
    # float32 data with float64 NumPy weights: NumPy-backed xarray computes in float64
    weights = np.cos(np.deg2rad(ref["lat"]))
    for name in ("h", "f", "i"):
        with TINY:
            got = gp[name].weighted(weights).mean(("lat", "lon"))
        assert_same(got, ref[name].weighted(weights).mean(("lat", "lon")))
        with TINY:
            got = gp[name].weighted(weights).sum_of_weights("lat")
        assert_same(got, ref[name].weighted(weights).sum_of_weights("lat"))


def test_dot_with_numpy_float64_weights_keeps_float64_precision(ref):
    gp = on_disk(ref)
    weights = np.cos(np.deg2rad(ref["lat"]))
    for name in ("i", "f", "h", "b"):
        with TINY:
            got = xr.dot(gp[name], weights, dim="lat")
        assert_same(got, xr.dot(ref[name], weights, dim="lat"))


def test_dot_with_the_numpy_operand_first_stays_on_disk(ref):
    gp = on_disk(ref)
    weights = np.cos(np.deg2rad(ref["lat"]))
    before = ooc.io_stats()
    with TINY:  # reading f whole (30 KiB) would be refused
        got = xr.dot(weights, gp["f"], dim="lat")
    assert_same(got, xr.dot(weights, ref["f"], dim="lat"))
    assert (ooc.io_stats() - before).bytes_read > 0  # computed by reading the file


# ---------------------------------------------------------------- quantile and median


def test_quantile_of_float64_data_is_float64_on_disk(ref):
    gp = on_disk(ref)
    for name, dim in (("f", "time"), ("h", "time"), ("f", ("lat", "lon"))):
        with TINY:
            got = gp[name].quantile([0.1, 0.5, 0.95], dim=dim)
        assert_same(got, ref[name].quantile([0.1, 0.5, 0.95], dim=dim))
        with TINY:
            got = gp[name].quantile(0.3, dim=dim, method="nearest")
        assert_same(got, ref[name].quantile(0.3, dim=dim, method="nearest"))


def test_median_and_quantile_of_int_and_bool_data_agree_with_numpy(ref):
    gp = on_disk(ref)
    with TINY:
        got = gp["i"].median("time")
    assert_same(got, ref["i"].median("time"))
    with TINY:
        got = gp["b"].median("lat")
    assert_same(got, ref["b"].median("lat"))
    with TINY:
        got = gp["i"].quantile([0.25, 0.75], dim=("lat", "lon"))
    assert_same(got, ref["i"].quantile([0.25, 0.75], dim=("lat", "lon")))
    with TINY:
        got = gp["f"].median("time", skipna=False)
    assert_same(got, ref["f"].median("time", skipna=False))
    with pytest.raises(TypeError):  # NumPy cannot interpolate booleans
        ref["b"].quantile(0.5, dim="time")
    with TINY, pytest.raises(TypeError, match="quantile of a bool array"):
        gp["b"].quantile(0.5, dim="time")


# ---------------------------------------------------------------- groupby and resample


@pytest.mark.parametrize(
    "op",
    [
        lambda x: x["s"].groupby("time.month").mean(),
        lambda x: x["s"].groupby("time.season").std(),
        lambda x: x["n"].groupby("time.month").max(),
        lambda x: x["n"].groupby("time.month").sum(),
        lambda x: x["s"].resample(time="YS").mean(),
        lambda x: x["n"].resample(time="QS").min(),
        lambda x: x["s"].groupby("time.month").median(),
        lambda x: x["s"].groupby("time.month").quantile(0.3),
        lambda x: x[["s", "n"]].groupby("time.month").mean()["s"],
        lambda x: x[["s", "n"]].resample(time="YS").max()["n"],
    ],
    ids=[
        "groupby-mean",
        "groupby-std",
        "groupby-max-int",
        "groupby-sum-int",
        "resample-mean",
        "resample-min-int",
        "groupby-median",
        "groupby-quantile",
        "dataset-groupby-mean",
        "dataset-resample-max",
    ],
)
def test_grouped_reductions_of_a_1d_array_are_disk_arrays_in_numpys_dtype(ref, op):
    gp = on_disk(ref)
    with TINY:
        got = op(gp)
    assert_same(got, op(ref))


def test_grouped_counts_of_a_1d_array_are_on_disk_in_the_default_int(ref):
    gp = on_disk(ref)
    with TINY:
        got = gp["s"].groupby("time.month").count()
    want = ref["s"].groupby("time.month").count()
    assert isinstance(got.data, ooc.DiskArray)
    assert got.dtype == np.int32 and want.dtype == np.int64  # the guide's "Dtypes"
    np.testing.assert_array_equal(got.values, want.values)


def test_grouped_arithmetic_with_a_numpy_operand_stays_within_the_budget():
    # xarray chunks the NumPy climatology and expands it to every time step: with
    # dask as its default chunk manager that was a dask array computed whole (3 MiB)
    rng = np.random.default_rng(5)
    time = pd.date_range("2000-01-01", periods=96, freq="MS")
    ref = xr.DataArray(
        rng.standard_normal((96, 64, 64)), dims=("time", "lat", "lon"), coords={"time": time}
    )
    gp = ref.chunk(chunked_array_type="gradpipe")
    climatology = ref.groupby("time.month").mean()  # NumPy-backed, float64
    tracemalloc.start()
    try:
        with ooc.MemoryBudget("128KiB"):
            got = gp.groupby("time.month") - climatology
            spread = got.std("time")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < ref.nbytes / 2, f"{peak} bytes in memory at once"
    want = ref.groupby("time.month") - climatology
    assert_same(got, want)
    assert_same(spread, want.std("time"))


# ---------------------------------------------------------------- clip


def test_clip_of_int_data_with_float_bounds_is_float64(ref):
    gp = on_disk(ref)
    with TINY:
        got = gp["i"].clip(0.5, 3.5)
    assert_same(got, ref["i"].clip(0.5, 3.5))


# ---------------------------------------------------------------- jax.grad


def test_eager_grad_through_grouped_arithmetic_equals_jit(ref):
    gp = on_disk(ref)
    data = gp["h"].data
    coords = {"time": ref["time"]}

    def loss(a, t):
        x = xr.DataArray(t, dims=("time", "lat", "lon"), coords=coords)
        anomaly = x.groupby("time.month") - a * x.groupby("time.month").mean()
        return (anomaly**2).mean().data

    want = jax.grad(loss)(jnp.float32(0.5), jnp.asarray(ref["h"].values))
    with TINY:
        eager = jax.grad(loss)(jnp.float32(0.5), data)
        jitted = jax.jit(jax.grad(loss))(jnp.float32(0.5), data)
    np.testing.assert_allclose(eager, want, rtol=1e-5)
    np.testing.assert_allclose(jitted, want, rtol=1e-5)
