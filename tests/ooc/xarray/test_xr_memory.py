"""Peak memory of an xarray workflow on gradpipe: a NetCDF-4 file sixteen times the
budget, opened in place, reduced over time, made into anomalies, weighted-averaged,
grouped by month and written to zarr, stays within the budget plus
`RSS_OVERHEAD_BYTES` above what the process held before (as every out-of-core
operation does; tests/ooc/test_family_memory.py)."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("xarray")
pytest.importorskip("h5netcdf")

SCRIPT = textwrap.dedent(
    """
    import gc, json, sys, numpy as np, pandas as pd, xarray as xr
    from gradpipe import ooc

    path, out = sys.argv[1], sys.argv[2]
    n_time, n_lat, n_lon = 192, 256, 512     # 96 MiB of float32: above budget + overhead
    budget = ooc.MemoryBudget("6MiB")
    ooc.set_default_budget(budget)

    # written by xarray itself, a year of months at a time (never whole in memory)
    time = pd.date_range("2000-01-01", periods=n_time, freq="MS")
    rng = np.random.default_rng(0)
    enc = {"t": {"chunksizes": (4, n_lat, n_lon)}}  # 2 MiB chunks
    shell = xr.Dataset(
        {"t": (("time", "lat", "lon"), ooc.DiskArray.from_row_blocks(
            (n_time, n_lat, n_lon), np.float32,
            lambda a, b: 280 + rng.standard_normal((b - a, n_lat, n_lon), dtype=np.float32)))},
        coords={"time": time, "lat": np.linspace(-80, 80, n_lat), "lon": np.arange(n_lon)},
    )
    shell.to_netcdf(path, engine="h5netcdf", encoding=enc)
    del shell

    def status(key):
        for line in open("/proc/self/status"):
            if line.startswith(key):
                return int(line.split()[1]) * 1024

    xr.set_options(use_flox=False)  # flox takes dask, cubed and NumPy arrays only

    def workflow(ds, out):
        t = ds["t"]
        clim = t.groupby("time.month").mean()
        anomaly = t.groupby("time.month") - clim
        spread = anomaly.std("time")
        area = anomaly.weighted(np.cos(np.deg2rad(ds["lat"]))).mean(("lat", "lon"))
        xr.Dataset({"anomaly": anomaly, "spread": spread, "area": area}).to_zarr(
            out, consolidated=False)

    # one-time costs outside the measurement (JAX compiling each kernel, the codecs'
    # and xarray's setup): the same workflow on two years of the data first
    ds = xr.open_dataset(path, engine="h5netcdf", chunks={}, chunked_array_type="gradpipe")
    workflow(ds.isel(time=slice(0, 24)), out + "-warm")
    np.ones((512, 512), np.float32) @ np.ones((512, 512), np.float32)
    gc.collect()
    base = status("VmRSS:")
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")
    workflow(ds, out)
    peak = status("VmHWM:")
    t = ds["t"]
    print(json.dumps(dict(over=peak - base, budget=budget.nbytes,
                          data=int(t.nbytes), const=ooc.RSS_OVERHEAD_BYTES)))
    """
)


@pytest.mark.slow
@pytest.mark.skipif(not os.path.exists("/proc/self/clear_refs"), reason="needs Linux /proc")
def test_an_xarray_workflow_stays_within_the_budget(tmp_path):
    env = dict(os.environ, GRADPIPE_SCRATCH=str(tmp_path / "scratch"), JAX_PLATFORMS="cpu")
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path / "big.nc"), str(tmp_path / "out.zarr")],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    r = json.loads(out.stdout.strip().splitlines()[-1])
    assert r["data"] >= 16 * r["budget"]
    assert r["data"] > r["budget"] + r["const"]  # reading it whole would exceed the bound
    assert r["over"] <= r["budget"] + r["const"], r

    import xarray as xr

    back = xr.open_zarr(tmp_path / "out.zarr", consolidated=False)
    assert back["anomaly"].shape == (192, 256, 512) and back["spread"].shape == (256, 512)
