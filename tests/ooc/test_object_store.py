"""zarr arrays on fsspec stores, in place: ``file://``, ``memory://`` and ``s3://``
(an S3-compatible server started by the test on loopback)."""

import uuid

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import zarr
from s3_server import s3_bucket

from gradpipe import ooc
from gradpipe.ooc.storage._zarr_file import ZarrFile

BUDGET = 16384


@pytest.fixture(scope="module")
def s3():
    """An S3 server on loopback with one bucket; yields the bucket's URL and the
    storage options that reach it."""
    with s3_bucket() as bucket:
        yield bucket


def _loss(xp, x, w):
    return xp.mean(xp.square(xp.tanh(x @ w) - 0.5))


def round_trip(url: str, options, rng):
    """Write an array to ``url``, compute on it in place, write a gradient back and
    read it; returns (data, weights, gradient read back)."""
    data = rng.standard_normal((160, 24)).astype(np.float32)
    w0 = rng.standard_normal((24, 2)).astype(np.float32)
    with ooc.MemoryBudget(BUDGET):
        ooc.to_zarr(
            ooc.DiskArray.from_numpy(data),
            f"{url}/x.zarr",
            chunks=(40, 24),
            storage_options=options,
            compressors=zarr.codecs.ZstdCodec(),
        )
        x = ooc.open_zarr(f"{url}/x.zarr", storage_options=options)
        assert isinstance(x._file, ZarrFile) and x._file.page_shape == (40, 24)
        ooc.reset_io_stats()
        total = ooc.sum(ooc.tanh(x))
        assert ooc.io_stats().bytes_written == 0
        np.testing.assert_allclose(float(total), np.tanh(data).sum(), rtol=1e-4)
        w = ooc.DiskArray.from_numpy(w0)
        g = jax.jit(jax.grad(lambda w: _loss(ooc, x, w)))(w)
        ooc.to_zarr(g, f"{url}/g.zarr", storage_options=options)
        back = ooc.open_zarr(f"{url}/g.zarr", storage_options=options)
        return data, w0, back.to_numpy()


def _expected_grad(data, w0):
    return np.asarray(jax.grad(lambda w: _loss(jnp, jnp.asarray(data), w))(jnp.asarray(w0)))


def test_s3_round_trip(s3, rng):
    url, options = s3
    data, w0, g = round_trip(url, options, rng)
    np.testing.assert_allclose(g, _expected_grad(data, w0), rtol=1e-5, atol=1e-6)
    import s3fs

    listing = s3fs.S3FileSystem(**options).find(url[len("s3://") :])
    assert any(k.endswith("x.zarr/c/3/0") for k in listing), listing  # chunks are objects


def test_s3_array_updated_in_place(s3, rng):
    url, options = s3
    old = rng.standard_normal((30, 10)).astype(np.float32)
    z = zarr.create_array(
        zarr.storage.FsspecStore.from_url(f"{url}/w.zarr", storage_options=options),
        shape=old.shape,
        chunks=(8, 5),
        dtype="f4",
    )
    z[...] = old
    w = ooc.open_zarr(f"{url}/w.zarr", mode="r+", storage_options=options)
    step = jax.jit(lambda w: ooc.update_(w, w * 0.5 + 1.0))
    with ooc.MemoryBudget(4096):
        w = step(w)
        w[0, :] = -3.0
    expected = old * 0.5 + 1.0
    expected[0] = -3.0
    reopened = ooc.open_zarr(f"{url}/w.zarr", storage_options=options)
    np.testing.assert_array_equal(reopened.to_numpy(), expected)


def test_memory_url_round_trip(rng):
    url = f"memory://gradpipe-{uuid.uuid4().hex[:8]}"
    data, w0, g = round_trip(url, None, rng)
    np.testing.assert_allclose(g, _expected_grad(data, w0), rtol=1e-5, atol=1e-6)


def test_file_url_round_trip_through_the_local_store(tmp_path, rng):
    data, w0, g = round_trip(f"file://{tmp_path}", None, rng)
    np.testing.assert_allclose(g, _expected_grad(data, w0), rtol=1e-5, atol=1e-6)
    x = ooc.open_zarr(f"file://{tmp_path}/x.zarr", mode="r+")
    # written by rename, chunk by chunk: zarr's LocalStore, not fsspec's in-place writes
    assert isinstance(x._file.array.store, zarr.storage.LocalStore)
    assert x.path == str(tmp_path / "x.zarr")


def test_an_unknown_bucket_is_a_clear_error(s3):
    _, options = s3
    with pytest.raises(FileNotFoundError, match="No zarr array"):
        ooc.open_zarr("s3://no-such-bucket-here/x.zarr", storage_options=options)
