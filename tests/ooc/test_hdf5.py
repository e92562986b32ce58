"""HDF5 datasets read in place: `ooc.open_hdf5`."""

import contextlib
import pickle

import h5py
import jax
import numpy as np
import pytest

from gradpipe import ooc
from gradpipe.ooc.storage._hdf5_file import HDF5File
from gradpipe.ooc.storage._paged_file import PagedFile

BUDGET = 16384
SHAPE, CHUNKS = (256, 96), (32, 40)


@pytest.fixture
def h5(tmp_path, rng):
    """A file with a chunked gzip dataset, a contiguous one, a big-endian one and a group."""
    data = rng.standard_normal(SHAPE).astype(np.float32)
    path = tmp_path / "data.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("chunked", data=data, chunks=CHUNKS, compression="gzip")
        f.create_dataset("contiguous", data=data.astype(np.float64))
        f.create_dataset("group/big_endian", data=data.astype(">f8"), chunks=(64, 96))
        f.create_dataset("words", data=np.array([b"a", b"b"]))
    return path, data


@contextlib.contextmanager
def no_scratch_file(monkeypatch):
    created = []
    original = PagedFile.create.__func__
    with monkeypatch.context() as m:
        m.setattr(
            PagedFile,
            "create",
            classmethod(lambda cls, *a, **k: created.append(1) or original(cls, *a, **k)),
        )
        yield
    assert not created, f"{len(created)} scratch files written"


@pytest.mark.parametrize("name", ["chunked", "contiguous", "group/big_endian"])
@pytest.mark.parametrize("jit", [False, True])
def test_reductions_read_the_dataset_in_place(h5, monkeypatch, name, jit):
    path, data = h5
    x = ooc.open_hdf5(path, name)
    assert isinstance(x._file, HDF5File) and x.shape == SHAPE and x.dtype.isnative
    run = jax.jit if jit else (lambda f: f)
    expected = data.astype(x.dtype)
    ooc.reset_io_stats()
    with jax.enable_x64(True), ooc.MemoryBudget(BUDGET), no_scratch_file(monkeypatch):
        total = run(lambda x: ooc.sum(x))(x)
        chained = run(lambda x: ooc.mean(ooc.tanh(x) * 2))(x)
    assert ooc.io_stats().bytes_written == 0
    assert ooc.io_stats().bytes_read >= 2 * data.nbytes
    np.testing.assert_allclose(float(total), expected.sum(dtype=np.float64), rtol=1e-5)
    np.testing.assert_allclose(float(chained), np.mean(np.tanh(expected) * 2), rtol=1e-5)


def test_tiles_follow_the_chunks(h5):
    path, data = h5
    x = ooc.open_hdf5(path, "chunked")
    assert x._file.page_shape == CHUNKS and x._file.whole_chunks
    ooc.reset_io_stats()
    with ooc.MemoryBudget(BUDGET):
        ooc.sum(x)
    assert ooc.io_stats().bytes_read == data.nbytes  # each chunk decoded once
    contiguous = ooc.open_hdf5(path, "contiguous")._file
    assert not contiguous.whole_chunks


def test_io_stats_count_what_hdf5_reads(h5):
    """A filtered chunk is decoded whole by every read that touches it; an unfiltered
    one HDF5 reads in part: io_stats counts the chunks in the first case, the
    region in the second."""
    path, _ = h5
    part = (slice(1, 3), slice(5, 9))  # inside one chunk of each dataset
    for name, counted in [("chunked", 32 * 40 * 4), ("group/big_endian", 2 * 4 * 8)]:
        f = ooc.open_hdf5(path, name)._file
        ooc.reset_io_stats()
        f.read(part)
        assert ooc.io_stats().bytes_read == counted, name


def test_a_matmul_and_a_gradient(h5, rng):
    path, data = h5
    x = ooc.open_hdf5(path, "chunked")
    w = rng.standard_normal((SHAPE[1], 4)).astype(np.float32)
    with ooc.MemoryBudget(BUDGET):
        product = x @ ooc.DiskArray.from_numpy(w)
        g = jax.grad(lambda w: ooc.sum(ooc.square(x @ w)))(ooc.DiskArray.from_numpy(w))
    np.testing.assert_allclose(product.to_numpy(), data @ w, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(g.to_numpy(), 2 * data.T @ (data @ w), rtol=1e-3, atol=1e-3)


def test_reads_go_straight_into_the_buffer_given(h5, monkeypatch):
    path, data = h5
    f = ooc.open_hdf5(path, "chunked")._file
    calls = []
    original = h5py.Dataset.read_direct
    monkeypatch.setattr(
        h5py.Dataset,
        "read_direct",
        lambda ds, dest, *a, **k: calls.append(dest) or original(ds, dest, *a, **k),
    )
    out = np.empty((10, 7), np.float32)
    assert f.read((slice(5, 15), slice(30, 37)), out=out) is out
    assert calls and calls[0] is out
    np.testing.assert_array_equal(out, data[5:15, 30:37])


def test_pickles_as_its_path_and_refuses_writes(h5):
    path, data = h5
    x = ooc.open_hdf5(path, "group/big_endian")
    y = pickle.loads(pickle.dumps(x))
    assert isinstance(y._file, HDF5File) and y.path == str(path)
    np.testing.assert_array_equal(y.to_numpy(), data.astype(np.float64))
    with pytest.raises(TypeError, match="read-only"):
        ooc.update_(x, 0.0)
    with pytest.raises(TypeError, match="read-only"):
        x[0] = 1.0


def test_an_open_dataset_object_is_accepted(h5):
    path, data = h5
    with h5py.File(path, "r") as f:
        x = ooc.open_hdf5(f["chunked"])
    np.testing.assert_array_equal(x[:3].to_numpy(), data[:3])


def test_bad_input_names_what_exists(h5, tmp_path):
    path, _ = h5
    with pytest.raises(KeyError, match=r"'group' .* is a group.*chunked"):
        ooc.open_hdf5(path, "group")
    with pytest.raises(KeyError, match="is nothing"):
        ooc.open_hdf5(path, "nope")
    with pytest.raises(TypeError, match="booleans and numbers"):
        ooc.open_hdf5(path, "words")
    with pytest.raises(FileNotFoundError, match="No HDF5 file"):
        ooc.open_hdf5(tmp_path / "missing.h5", "x")
    with pytest.raises(TypeError, match="name the dataset"):
        ooc.open_hdf5(path)
