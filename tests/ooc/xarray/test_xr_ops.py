"""xarray's operations on gradpipe-backed data stay out of core: each family runs
under a budget several times smaller than the variable (reading it whole would be
refused), gives DiskArrays, and equals the same xarray code on NumPy-backed data
(values, dims, coordinates, attributes)."""

import uuid

import numpy as np
import pytest
from xrfiles import SMALL, xr

from gradpipe import ooc


def realize(obj, tmp_path):
    """``obj`` (a DataArray or Dataset of gradpipe-backed variables) in memory: read
    directly when small, else streamed to a zarr store under SMALL and read back."""
    ds = obj.to_dataset(name="__v") if isinstance(obj, xr.DataArray) else obj
    small = sum(v.nbytes for v in ds.variables.values()) <= SMALL.nbytes // 2
    if small:
        with SMALL:
            out = ds.compute()
    else:
        path = tmp_path / f"{uuid.uuid4().hex}.zarr"
        with SMALL:
            ds.to_zarr(path, zarr_format=3, consolidated=False)
        out = xr.open_zarr(path, consolidated=False).load()
        for name, v in ds.variables.items():  # what a store keeps in its encoding
            out[name].encoding = v.encoding
    if isinstance(obj, xr.DataArray):
        return out["__v"].rename(obj.name)
    return out


def is_lazy(x) -> bool:
    """Whether ``x`` is still out of core (a DiskArray, or a 0-d JAX value)."""
    return isinstance(x, ooc.DiskArray) or (
        getattr(x, "ndim", None) == 0 and not isinstance(x, np.ndarray)
    )


def check(op, gp, ref, tmp_path, *, rtol=2e-5, atol=1e-3, budget=SMALL):
    with budget:
        got = op(gp)
    variables = [got] if isinstance(got, xr.DataArray) else list(got.data_vars.values())
    for v in variables:
        assert is_lazy(v.data), (v.name, type(v.data))
    want = op(ref)
    got = realize(got, tmp_path)
    xr.testing.assert_allclose(got, want, rtol=rtol, atol=atol)
    assert got.attrs == want.attrs
    return got


def test_the_variable_is_several_times_the_budget(gp):
    assert gp["t"].nbytes >= 7 * SMALL.nbytes
    with SMALL, pytest.raises(MemoryError, match="more than the MemoryBudget"):
        gp["t"].values


ARITHMETIC = {
    "anomaly": lambda d: d["t"] - d["t"].mean("time"),
    "broadcast by name": lambda d: d["t"] * d["p"] + d["elevation"],
    "scalar and ufunc": lambda d: np.exp(d["t"] / 300.0) * 2 - 1,
    "comparison": lambda d: (d["t"] > 285).astype("float32"),
    "dataset arithmetic": lambda d: d[["t", "p"]] * 2,
}


@pytest.mark.parametrize("name", sorted(ARITHMETIC))
def test_arithmetic_and_broadcasting_by_name(gp, ref, tmp_path, name):
    check(ARITHMETIC[name], gp, ref, tmp_path)


def test_attributes_are_kept_when_xarray_is_told_to(gp, ref, tmp_path):
    with xr.set_options(keep_attrs=True):
        got = check(lambda d: (d["t"] + 1).mean("lon"), gp, ref, tmp_path)
    assert got.attrs["units"] == "K"


REDUCTIONS = {
    "mean time": lambda d: d["t"].mean("time"),
    "mean lat lon": lambda d: d["t"].mean(("lat", "lon")),
    "mean all": lambda d: d["t"].mean(),
    "mean no skipna": lambda d: d["p"].mean("time", skipna=False),
    "sum time": lambda d: d["t"].sum("time"),
    "sum min_count": lambda d: d["t"].sum("time", min_count=90),
    "std time": lambda d: d["t"].std("time"),
    "std ddof": lambda d: d["t"].std("lon", ddof=1),
    "var": lambda d: d["p"].var("lat"),
    "max time": lambda d: d["t"].max("time"),
    "min lon": lambda d: d["t"].min("lon"),
    "argmax": lambda d: d["p"].argmax("time"),
    "dataset mean": lambda d: d[["t", "p"]].mean("time", keep_attrs=True),
    "weighted mean": lambda d: d["t"].weighted(np.cos(np.deg2rad(d["lat"]))).mean(("lat", "lon")),
    "weighted sum": lambda d: d["t"].weighted(d["elevation"]).sum("lon"),
}


@pytest.mark.parametrize("name", sorted(REDUCTIONS))
def test_reductions_over_named_dims(gp, ref, tmp_path, name):
    check(REDUCTIONS[name], gp, ref, tmp_path, rtol=1e-4)


def test_a_reduction_reads_each_element_a_few_times(gp):
    before = ooc.io_stats()
    with ooc.MemoryBudget(gp["t"].nbytes // 2):  # several chunks at a time
        m = gp["t"].mean("time").compute()
    read = (ooc.io_stats() - before).bytes_read
    # two passes (the sum and the count of numbers), each decoding every chunk of the
    # file once or twice (a tile that cuts a chunk decodes it whole)
    assert gp["t"].nbytes <= read <= 5 * gp["t"].nbytes
    assert m.shape == (16, 20)


SELECTION = {
    "isel slice": lambda d: d["t"].isel(time=slice(10, 40), lon=slice(None, None, 2)),
    "isel ints": lambda d: d["t"].isel(time=[0, 5, 17], lat=3),
    "sel labels": lambda d: d["t"].sel(time="2001", lat=slice(-30, 30)),
    "sel nearest": lambda d: d["t"].sel(lon=[17.0, 100.0], method="nearest"),
    "where": lambda d: d["t"].where(d["t"] > 285),
    "where other": lambda d: d["t"].where(d["elevation"] > 500, 0.0),
    "xr.where": lambda d: xr.where(d["p"] > 0, d["p"], -d["p"]),
    "transpose": lambda d: d["t"].transpose("lon", "time", "lat"),
    "dot": lambda d: xr.dot(d["t"], d["elevation"], dim="lon"),
    "dot two dims": lambda d: xr.dot(d["t"], d["p"], dim=("time", "lat")),
    "fillna": lambda d: d["t"].fillna(0),
    "clip": lambda d: d["t"].clip(275, 285),
}


@pytest.mark.parametrize("name", sorted(SELECTION))
def test_selection_where_transpose_and_dot(gp, ref, tmp_path, name):
    check(SELECTION[name], gp, ref, tmp_path, rtol=1e-4)


COMBINING = {
    "concat": lambda d: xr.concat(
        [d["t"].isel(time=slice(0, 48)), d["t"].isel(time=slice(48, None))], "time"
    ),
    "concat new dim": lambda d: xr.concat([d["p"], d["p"] * 2], "member"),
    "merge": lambda d: xr.merge([d["t"].rename("a"), (d["p"] * 2).rename("b")]),
    "groupby month mean": lambda d: d["t"].groupby("time.month").mean(),
    "monthly anomaly": lambda d: d["p"].groupby("time.month") - d["p"].groupby("time.month").mean(),
    "resample yearly": lambda d: d["t"].resample(time="YS").mean(),
}


#: groupby and resample stack one result per group (12 months, 8 years): each input
#: of the stack holds a few KiB of buffers, more than SMALL leaves for 12 of them
GROUPS = SMALL


@pytest.mark.parametrize("name", sorted(COMBINING))
def test_concat_merge_groupby_resample(gp, ref, tmp_path, name):
    assert gp["t"].nbytes > GROUPS.nbytes
    # flox, when installed, takes xarray's groupby reductions and handles dask, cubed
    # and NumPy arrays only: xarray's own path (a reduction per group) is out of core
    with xr.set_options(use_flox=False):
        check(COMBINING[name], gp, ref, tmp_path, rtol=1e-4, budget=GROUPS)


MORE = {
    "shift": lambda d: d["t"].shift(time=2),
    "pad": lambda d: d["p"].pad(time=(1, 2)),
    "roll": lambda d: d["t"].roll(lon=3),
    "diff": lambda d: d["t"].diff("time"),
    "cumsum": lambda d: d["p"].cumsum("time"),
    "coarsen": lambda d: d["t"].coarsen(time=12).mean(),
    "count": lambda d: d["t"].count("time"),
    "groupby sum": lambda d: d["p"].groupby("time.season").sum(),
    "groupby std": lambda d: d["t"].groupby("time.season").std(),
    "groupby max": lambda d: d["t"].groupby("time.month").max(),
    "resample sum": lambda d: d["p"].resample(time="QS").sum(),
    "stack unstack": lambda d: d["t"].stack(z=("lat", "lon")).mean("time").unstack("z"),
    "sortby": lambda d: d["t"].sortby("lat", ascending=False),
    "apply_ufunc parallelized": lambda d: xr.apply_ufunc(
        np.sin, d["t"], dask="parallelized", output_dtypes=[np.float32]
    ),
    "apply_ufunc core dim": lambda d: xr.apply_ufunc(
        lambda a: np.nanmax(a, axis=-1) - np.nanmin(a, axis=-1),
        d["t"],
        input_core_dims=[["lon"]],
        dask="parallelized",
        output_dtypes=[np.float32],
    ),
    # a computed array's chunks may cut a core dimension: both fixes that xarray's
    # error names work (gradpipe gives each block whole core dimensions anyway)
    "apply_ufunc core dim allow_rechunk": lambda d: xr.apply_ufunc(
        np.sort,
        (d["t"] * 2.0).transpose("lat", "lon", "time"),
        input_core_dims=[["time"]],
        output_core_dims=[["time"]],
        dask="parallelized",
        dask_gufunc_kwargs={"allow_rechunk": True},
    ),
    "apply_ufunc core dim rechunked": lambda d: xr.apply_ufunc(
        np.sort,
        (d["t"] * 2.0)
        .transpose("lat", "lon", "time")
        .chunk(time=-1, chunked_array_type="gradpipe"),
        input_core_dims=[["time"]],
        output_core_dims=[["time"]],
        dask="parallelized",
    ),
}


@pytest.mark.parametrize("name", sorted(MORE))
def test_more_operations(gp, ref, tmp_path, name):
    with xr.set_options(use_flox=False):  # see test_concat_merge_groupby_resample
        check(MORE[name], gp, ref, tmp_path, rtol=1e-4)


def test_what_xarray_can_only_do_in_memory_is_refused_above_the_budget(gp):
    # (median and quantile run out of core: tests/ooc/xarray/test_xr_x64_off.py)
    with SMALL, pytest.raises(MemoryError, match=r"apply_ufunc\(_interpnd\)"):
        gp["t"].interp(lat=[0.5, 1.5])
