"""Fixtures of the xarray tests: `climate` (see `xrfiles.make_climate`), `files` (it
written by xarray as NetCDF-4 through h5netcdf and as zarr formats 2 and 3), and the
NetCDF-4 file opened on gradpipe (`gp`) and into memory (`ref`)."""

import pytest

xr = pytest.importorskip("xarray")
pytest.importorskip("h5netcdf")

from xrfiles import T_CHUNKS, make_climate, open_gradpipe  # noqa: E402


@pytest.fixture(scope="session")
def climate():
    return make_climate()


@pytest.fixture(scope="session")
def files(tmp_path_factory, climate):
    """``{kind: (path, open_dataset keyword arguments)}`` for the files xarray wrote."""
    d = tmp_path_factory.mktemp("xarray-files")
    enc = {"t": {"chunksizes": T_CHUNKS}, "p": {"chunksizes": (8, 16)}}
    climate.to_netcdf(d / "climate.nc", engine="h5netcdf", encoding=enc)
    zenc = {"t": {"chunks": T_CHUNKS}, "p": {"chunks": (8, 16)}}
    climate.to_zarr(d / "climate-v2.zarr", zarr_format=2, encoding=zenc, consolidated=True)
    climate.to_zarr(d / "climate-v3.zarr", zarr_format=3, encoding=zenc, consolidated=False)
    return {
        "netcdf4-h5netcdf": (d / "climate.nc", {"engine": "h5netcdf"}),
        "zarr-v2": (d / "climate-v2.zarr", {"engine": "zarr"}),
        "zarr-v3": (d / "climate-v3.zarr", {"engine": "zarr", "consolidated": False}),
    }


@pytest.fixture
def gp(files):
    """The NetCDF-4 file opened on gradpipe."""
    path, kwargs = files["netcdf4-h5netcdf"]
    return open_gradpipe(path, **kwargs)


@pytest.fixture
def ref(files):
    """The same file opened by xarray with NumPy-backed (in-memory) variables."""
    path, kwargs = files["netcdf4-h5netcdf"]
    return xr.open_dataset(path, **kwargs).load()
