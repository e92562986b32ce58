"""Zero-copy tile reads: views of a file's mapped pages, read-only, dropped after use."""

import gc

import jax
import numpy as np
import pytest

from gradpipe import ooc
from gradpipe.ooc.storage import _file_map, _paged_file


def _mapped_resident_bytes(path) -> int:
    """This process's resident bytes of its mappings of ``path`` (/proc/self/smaps)."""
    total, inside = 0, False
    with open("/proc/self/smaps") as fh:
        for line in fh:
            head = line.split()
            if head and "-" in head[0] and len(head) >= 5 and not head[0].endswith(":"):
                inside = len(head) >= 6 and head[5] == str(path)
            elif inside and head[0] == "Rss:":
                total += int(head[1]) * 1024
    return total


def test_a_region_of_whole_rows_is_a_read_only_view_equal_to_a_read(rng, tmp_path):
    X = rng.standard_normal((300, 7)).astype(np.float32)
    a = ooc.DiskArray.from_numpy(X, path=tmp_path / "x.gpa", page_shape=(64, 7))
    f = _paged_file.PagedFile.open(tmp_path / "x.gpa")
    for rows in [slice(0, 300), slice(5, 77), slice(250, 300), slice(299, 300)]:
        v = f.view((rows, slice(0, 7)))
        assert _file_map.is_view(v)
        np.testing.assert_array_equal(v, X[rows])
        np.testing.assert_array_equal(v, f.read((rows, slice(0, 7))))
        with pytest.raises(ValueError, match="read-only"):
            v[0, 0] = 1.0  # a kernel writing into its input fails loudly
        _file_map.release(v)
        np.testing.assert_array_equal(v, X[rows])  # dropped pages are read again
    del a


def test_regions_that_are_not_one_run_of_bytes_are_read_instead(rng, tmp_path):
    X = rng.standard_normal((40, 12)).astype(np.float64)
    ooc.DiskArray.from_numpy(X, path=tmp_path / "x.gpa", page_shape=(8, 4))
    f = _paged_file.PagedFile.open(tmp_path / "x.gpa")
    assert f.view((slice(0, 8), slice(0, 12))) is None  # pages split the rows
    assert f.view((slice(0, 8), slice(0, 3))) is None  # part of a page
    np.testing.assert_array_equal(f.view((slice(8, 16), slice(4, 8))), X[8:16, 4:8])  # a page
    ooc.DiskArray.from_numpy(X, path=tmp_path / "y.gpa", page_shape=(8, 12))
    g = _paged_file.PagedFile.open(tmp_path / "y.gpa")
    assert g.view((slice(0, 8), slice(0, 4))) is None  # part of each row
    assert g.view((slice(3, 3), slice(0, 12))) is None  # empty
    np.testing.assert_array_equal(g.view((slice(3, 19), slice(0, 12))), X[3:19])
    assert not _file_map.is_view(f.read((slice(0, 8), slice(0, 12))))


def test_a_view_keeps_the_values_it_was_made_from_when_the_file_is_replaced(rng, tmp_path):
    X = rng.standard_normal((64, 4)).astype(np.float32)
    a = ooc.DiskArray.from_numpy(X, path=tmp_path / "x.gpa", page_shape=(16, 4))
    w = ooc.DiskArray.open(tmp_path / "x.gpa", writable=True)
    v = w._file.view((slice(0, 64), slice(0, 4)))
    w.update_(w * 2.0)  # a named file is rewritten under a new descriptor
    np.testing.assert_array_equal(v, X)
    np.testing.assert_array_equal(w._file.view((slice(0, 64), slice(0, 4))), 2 * X)
    np.testing.assert_array_equal(ooc.DiskArray.open(tmp_path / "x.gpa").to_numpy(), 2 * X)
    del a


def test_a_view_outlives_its_scratch_file():
    X = np.arange(4096, dtype=np.float32).reshape(512, 8)
    a = ooc.DiskArray.from_numpy(X)
    v = a._file.view((slice(100, 200), slice(0, 8)))
    del a
    gc.collect()  # the scratch file is closed and unlinked; the map keeps its pages
    np.testing.assert_array_equal(v, X[100:200])


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
def test_a_pass_leaves_none_of_its_mapped_pages_resident(rng, tmp_path, jit):
    """Passes read whole-row tiles as views; once the pass ends the file's pages no
    longer count in this process's memory (the budget covers mapped tiles too)."""
    X = rng.standard_normal((8192, 64)).astype(np.float32)  # 2 MiB
    path = tmp_path / "x.gpa"
    ooc.DiskArray.from_numpy(X, path=path, page_shape=(512, 64))
    a = ooc.DiskArray.open(path)
    w = jax.numpy.asarray(rng.standard_normal(64).astype(np.float32))

    def loss(w, a):
        return ooc.sum(ooc.tanh(a) * 0.5 + ooc.square(a @ w)[:, None])

    fn = jax.jit(jax.value_and_grad(loss)) if jit else jax.value_and_grad(loss)
    with ooc.MemoryBudget(256 * 1024):  # 16 or more tiles
        before = ooc.io_stats()
        value, grad = fn(w, a)
        read = (ooc.io_stats() - before).bytes_read
    assert read >= X.nbytes  # the loss's pass reads X (its gradient too: `_one_pass`)
    # (the kernel maps up to 16 pages around a faulting one, so a few pages just
    # outside the tiles, the header's say, may stay: never more than that)
    assert _mapped_resident_bytes(path) <= 16 * 4096
    # float64 references; float32 sums of n terms are within about n u sum|terms|
    x, w64 = X.astype(np.float64), np.asarray(w, np.float64)
    p = x @ w64
    total = np.sum(np.tanh(x) * 0.5) + 64 * np.sum(p**2)
    magnitude = np.sum(np.abs(np.tanh(x) * 0.5)) + 64 * np.sum(p**2)
    assert abs(float(value) - total) <= 1e-4 * magnitude
    want = 2 * 64 * x.T @ p
    scale = 2 * 64 * np.abs(x).T @ np.abs(p)
    assert np.all(np.abs(np.asarray(grad, np.float64) - want) <= 1e-4 * scale)
