"""Opening files written by xarray on gradpipe: variables are DiskArrays read in place
(NetCDF-4 through h5netcdf and netCDF4, zarr formats 2 and 3, a local fsspec URL,
an S3 server on loopback), chunks follow the file's, and everything xarray knows
(values, dims, coordinates, attributes) equals what it reads into memory."""

import pytest
from s3_server import s3_bucket
from xrfiles import T_CHUNKS, open_gradpipe, xr

from gradpipe import ooc
from gradpipe.ooc.storage._hdf5_file import HDF5File
from gradpipe.ooc.storage._zarr_file import ZarrFile

IN_PLACE = {"netcdf4-h5netcdf": HDF5File, "zarr-v2": ZarrFile, "zarr-v3": ZarrFile}


def _assert_same(gp, ref):
    assert isinstance(gp["t"].data, ooc.DiskArray)
    xr.testing.assert_identical(gp.compute(), ref)


@pytest.mark.parametrize("kind", sorted(IN_PLACE))
def test_variables_are_disk_arrays_read_in_place(files, kind):
    path, kwargs = files[kind]
    gp = open_gradpipe(path, **kwargs)
    for name in ("t", "p", "elevation"):
        x = gp[name].data
        assert isinstance(x, ooc.DiskArray), name
        assert isinstance(x._file, IN_PLACE[kind]), (name, type(x._file))
    assert gp["t"].chunksizes["time"][0] == T_CHUNKS[0]  # the file's chunks
    assert gp["t"].data.chunks[0][:2] == (8, 8)
    before = ooc.io_stats()
    ref = xr.open_dataset(path, **kwargs).load()
    _assert_same(gp, ref)
    assert (ooc.io_stats() - before).bytes_read >= gp["t"].nbytes  # read from the file


def test_netcdf4_engine_is_read_in_place_too(files):
    path, _ = files["netcdf4-h5netcdf"]
    gp = open_gradpipe(path, engine="netcdf4")
    assert isinstance(gp["t"].data._file, HDF5File)
    _assert_same(gp, xr.open_dataset(path, engine="netcdf4").load())


def test_a_local_fsspec_url_is_read_in_place(files):
    path, _ = files["zarr-v3"]
    gp = xr.open_zarr(f"file://{path}", chunked_array_type="gradpipe", consolidated=False)
    assert isinstance(gp["t"].data._file, ZarrFile)
    _assert_same(gp, xr.open_zarr(path, consolidated=False).compute())


def test_open_zarr_takes_the_chunked_array_type(files):
    path, _ = files["zarr-v2"]
    gp = xr.open_zarr(path, chunked_array_type="gradpipe")
    assert isinstance(gp["t"].data._file, ZarrFile)
    _assert_same(gp, xr.open_zarr(path).compute())


def test_a_variable_decoded_on_read_is_copied_with_its_decoding(tmp_path, climate):
    packed = climate[["p"]].copy()
    path = tmp_path / "packed.nc"
    packed.to_netcdf(
        path,
        engine="h5netcdf",
        encoding={"p": {"dtype": "int16", "scale_factor": 0.001, "_FillValue": -9999}},
    )
    gp = open_gradpipe(path, engine="h5netcdf")
    x = gp["p"].data
    assert isinstance(x, ooc.DiskArray) and not isinstance(x._file, HDF5File)  # a copy
    xr.testing.assert_identical(gp.compute(), xr.open_dataset(path, engine="h5netcdf").load())


def test_copy_true_copies_even_what_could_be_read_in_place(files):
    path, kwargs = files["netcdf4-h5netcdf"]
    gp = open_gradpipe(path, from_array_kwargs={"copy": True}, **kwargs)
    assert not isinstance(gp["t"].data._file, HDF5File)
    _assert_same(gp, xr.open_dataset(path, **kwargs).load())


def test_unknown_from_array_kwargs_are_refused(files):
    path, kwargs = files["netcdf4-h5netcdf"]
    with pytest.raises(TypeError, match="from_array_kwargs"):
        open_gradpipe(path, from_array_kwargs={"spec": 1}, **kwargs)


def test_chunk_moves_data_in_memory_to_disk(climate):
    da = climate["t"].chunk({"time": 24}, chunked_array_type="gradpipe")
    assert isinstance(da.data, ooc.DiskArray)
    assert da.chunks[0] == (24, 24, 24, 24) and da.data._file.page_shape[0] == 24
    xr.testing.assert_identical(da.compute(), climate["t"])
    # xarray picks dask when more than one chunk manager is installed: name gradpipe
    again = da.chunk({"time": 24}, chunked_array_type="gradpipe")
    assert again.data is da.data  # the same chunks: nothing copied
    other = da.chunk({"time": 32}, chunked_array_type="gradpipe")
    assert other.chunks[0] == (32, 32, 32)
    xr.testing.assert_identical(other.compute(), climate["t"])


def test_irregular_chunks_are_refused(climate):
    with pytest.raises(ValueError, match="not regular"):
        climate["t"].chunk({"time": (40, 56)}, chunked_array_type="gradpipe")


def test_zarr_on_s3_is_read_in_place(climate):
    pytest.importorskip("s3fs")
    with s3_bucket() as (bucket, options):
        url = f"{bucket}/climate.zarr"
        climate.to_zarr(url, storage_options=options, zarr_format=3, consolidated=False)
        gp = xr.open_zarr(
            url, storage_options=options, chunked_array_type="gradpipe", consolidated=False
        )
        assert isinstance(gp["t"].data._file, ZarrFile)
        assert gp["t"].data.path.startswith("s3://")
        with ooc.MemoryBudget(16384):
            m = gp["t"].mean("time")
        assert isinstance(m.data, ooc.DiskArray)
        xr.testing.assert_allclose(m.compute(), climate["t"].mean("time"), rtol=1e-5)


def test_a_lazy_selection_is_read_in_place_then_selected(files):
    path, kwargs = files["netcdf4-h5netcdf"]
    lazy = xr.open_dataset(path, **kwargs)["t"].isel(time=slice(10, 50), lat=slice(2, None, 3))
    da = lazy.chunk(chunked_array_type="gradpipe")
    assert isinstance(da.data, ooc.DiskArray)
    xr.testing.assert_identical(da.compute(), lazy.load())
    picked = xr.open_dataset(path, **kwargs)["t"].isel(time=[3, 1, 40])  # an index array
    da = picked.chunk(chunked_array_type="gradpipe")
    assert isinstance(da.data, ooc.DiskArray)
    xr.testing.assert_identical(da.compute(), picked.load())


def test_netcdf_through_an_fsspec_url_is_copied(files):
    path, kwargs = files["netcdf4-h5netcdf"]
    gp = open_gradpipe(f"file://{path}", **kwargs)  # h5py reads a file object: no path
    x = gp["t"].data
    assert isinstance(x, ooc.DiskArray) and not isinstance(x._file, HDF5File)
    _assert_same(gp, xr.open_dataset(path, **kwargs).load())
