"""Reading into memory within the budget (``compute``, ``load``, ``.values``), refusing
above it before reading anything, and writing gradpipe-backed datasets with
``to_zarr``/``to_netcdf`` tile by tile (xarray's ``store`` path)."""

import numpy as np
import pytest
from xrfiles import SMALL, open_gradpipe, xr

from gradpipe import ooc


def test_compute_load_and_values_read_within_the_budget(gp, ref):
    m = gp["t"].mean("time")
    assert isinstance(m.data, ooc.DiskArray)
    with SMALL:
        got = m.compute()
        assert isinstance(got.data, np.ndarray)
        assert isinstance(m.values, np.ndarray)
        assert isinstance(gp["p"].isel(time=slice(0, 8)).load().data, np.ndarray)
    xr.testing.assert_allclose(got, ref["t"].mean("time"), rtol=1e-5)


@pytest.mark.parametrize(
    "how",
    ["compute", "load", "values", "to_numpy", "np.asarray", "dataset compute"],
)
def test_reading_above_the_budget_is_refused_naming_the_size(gp, how):
    t = gp["t"]
    run = {
        "compute": lambda: t.compute(),
        "load": lambda: t.copy().load(),
        "values": lambda: t.values,
        "to_numpy": lambda: t.to_numpy(),
        "np.asarray": lambda: np.asarray(t),
        "dataset compute": lambda: gp.compute(),
    }[how]
    before = ooc.io_stats()
    with SMALL, pytest.raises(MemoryError, match=r"120\.0 KiB.*MemoryBudget\(16\.0 KiB\)"):
        run()
    assert (ooc.io_stats() - before).bytes_read == 0  # refused before reading


def test_variables_that_fit_alone_but_not_together_are_refused(gp):
    small = gp[["p"]].isel(time=slice(0, 20)).assign(q=gp["p"].isel(time=slice(20, 40)))
    each = 20 * 16 * 8
    with ooc.MemoryBudget(2 * each - 8), pytest.raises(MemoryError, match="MemoryBudget"):
        small.compute()
    with ooc.MemoryBudget(2 * each):
        small.compute()


def test_persist_keeps_disk_arrays(gp):
    with SMALL:
        p = (gp["t"] * 2).persist()
    assert isinstance(p.data, ooc.DiskArray) and p.data.path is not None


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_to_zarr_streams_tiles(gp, ref, tmp_path, zarr_format):
    out = tmp_path / "out.zarr"
    result = (gp[["t", "p"]] - gp[["t", "p"]].mean("time")).assign_attrs(gp.attrs)
    before = ooc.io_stats()
    with SMALL:
        result.to_zarr(out, zarr_format=zarr_format, consolidated=False)
    io = ooc.io_stats() - before  # (the zarr store's writes are xarray's, not counted here)
    assert io.bytes_read >= gp["t"].nbytes + gp["p"].nbytes  # computed and written in tiles
    assert io.tiles_read > 16
    back = xr.open_zarr(out, consolidated=False).load()
    want = (ref[["t", "p"]] - ref[["t", "p"]].mean("time")).assign_attrs(ref.attrs)
    xr.testing.assert_allclose(back, want, rtol=1e-5, atol=1e-3)
    assert back.attrs == want.attrs and back["t"].attrs == want["t"].attrs


def test_to_zarr_follows_the_target_chunks_and_appends(gp, ref, tmp_path):
    out = tmp_path / "appended.zarr"
    first, second = gp[["t"]].isel(time=slice(0, 40)), gp[["t"]].isel(time=slice(40, None))
    with SMALL:
        first.to_zarr(out, encoding={"t": {"chunks": (4, 16, 20)}}, consolidated=False)
        second.to_zarr(out, append_dim="time", consolidated=False)
    back = xr.open_zarr(out, consolidated=False)
    assert back["t"].encoding["chunks"] == (4, 16, 20)
    xr.testing.assert_identical(back.load(), ref[["t"]])


def test_to_zarr_region_writes_part_of_a_store(gp, ref, tmp_path):
    out = tmp_path / "region.zarr"
    ref[["p"]].to_zarr(out, consolidated=False)
    with SMALL:
        # safe_chunks guards parallel writers of one zarr chunk: gradpipe writes serially
        (gp[["p"]].isel(time=slice(16, 32)) * 0).drop_vars(["lat"]).to_zarr(
            out, region={"time": slice(16, 32)}, consolidated=False, safe_chunks=False
        )
    back = xr.open_zarr(out, consolidated=False).load()
    want = ref["p"].copy()
    want[16:32] = 0
    np.testing.assert_array_equal(back["p"].values, want.values)


def test_to_netcdf_streams_tiles(gp, ref, tmp_path):
    out = tmp_path / "out.nc"
    before = ooc.io_stats()
    with SMALL:
        (gp * 1).assign_attrs(gp.attrs).to_netcdf(out, engine="h5netcdf")
    assert (ooc.io_stats() - before).tiles_read > 16
    back = xr.open_dataset(out, engine="h5netcdf").load()
    xr.testing.assert_allclose(back, ref, rtol=1e-6)
    assert back.attrs == ref.attrs


def test_reopened_output_is_read_in_place_again(gp, tmp_path):
    out = tmp_path / "again.nc"
    with SMALL:
        gp.to_netcdf(out, engine="h5netcdf")
    again = open_gradpipe(out, engine="h5netcdf")
    assert type(again["t"].data._file).__name__ == "HDF5File"


def test_a_delayed_write_is_refused(gp, tmp_path):
    with pytest.raises(NotImplementedError, match="compute=False"):
        gp.to_zarr(tmp_path / "delayed.zarr", compute=False, consolidated=False)
