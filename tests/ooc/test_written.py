"""How a new array file's pages are written (`arrays._array_files._written`).

New values go to the file from one buffer kept for the whole write, not from an
array made for each page row: on a sandboxed TPU host the pages of a file written
from new arrays cost six times as much to drop from a map later (the docstring of
`_written` has the figures). An array already in memory is written from itself.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gradpipe import ooc
from gradpipe.ooc.storage._paged_file import PagedFile

SHAPE, PAGE = (23, 5), (4, 5)  # six page rows, the last one shorter


@pytest.fixture
def written(monkeypatch):
    """Every array the file writes are given (kept alive: no address is reused)."""
    seen: list[np.ndarray] = []
    write = PagedFile.write

    def recording(self, region, data):
        seen.append(data)
        return write(self, region, data)

    monkeypatch.setattr(PagedFile, "write", recording)
    return seen


def _values():
    return np.arange(np.prod(SHAPE), dtype=np.float32).reshape(SHAPE) / 7


def _from_row_blocks(tmp_path):
    want = _values()
    # (float64 rows, a new array each call, into a float32 file)
    got = ooc.DiskArray.from_row_blocks(
        SHAPE, np.float32, lambda a, b: want[a:b].astype(np.float64), page_shape=PAGE
    )
    return got, want


def _from_a_memmap(tmp_path):
    want = _values()
    m = np.memmap(tmp_path / "m.bin", np.float32, "w+", shape=SHAPE)
    m[:] = want
    return ooc.DiskArray.from_numpy(m, page_shape=PAGE), want


def _from_big_endian_values(tmp_path):
    want = _values()
    return ooc.DiskArray.from_numpy(want.astype(">f4"), page_shape=PAGE), want


def _saved(tmp_path):
    want = _values()
    src = ooc.DiskArray.from_numpy(want, page_shape=PAGE)
    return src.save(tmp_path / "copy.gpa"), want


def _from_zarr(tmp_path):
    want = _values()
    ooc.to_zarr(ooc.DiskArray.from_numpy(want, page_shape=PAGE), str(tmp_path / "x.zarr"))
    return ooc.from_zarr(str(tmp_path / "x.zarr"), page_shape=PAGE), want


@pytest.mark.parametrize(
    "make",
    [
        _from_row_blocks,
        _from_a_memmap,
        _from_big_endian_values,
        _saved,
        _from_zarr,
    ],
)
def test_new_values_are_written_from_one_buffer(make, tmp_path, written):
    got, want = make(tmp_path)
    pages = [d for d in written if d.shape and d.shape[1:] == want.shape[1:]][-6:]
    assert len(pages) >= 3
    assert all(np.shares_memory(d, pages[0]) for d in pages), "a new array per page row"
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got.to_numpy(), want)


def test_an_array_in_memory_is_written_from_itself(written):
    want = _values()
    got = ooc.DiskArray.from_numpy(want, page_shape=PAGE)
    assert len(written) == 6
    assert all(np.shares_memory(d, want) for d in written), "copied before writing"
    np.testing.assert_array_equal(got.to_numpy(), want)


def test_a_strided_array_in_memory_is_not_copied_whole(written):
    # (`PagedFile.write` copies it a bounded slab at a time: a page row of a wide
    # array may be larger than memory)
    want = _values()
    strided = np.asfortranarray(want)
    got = ooc.DiskArray.from_numpy(strided, page_shape=PAGE)
    assert all(np.shares_memory(d, strided) for d in written)
    np.testing.assert_array_equal(got.to_numpy(), want)


@pytest.mark.parametrize(
    "rows",
    [
        lambda a, b: np.zeros((b - a + 1, 5)),  # a row too many
        lambda a, b: np.zeros((1, b - a, 5)),  # an axis too many
        lambda a, b: [[0.0] * 4] * (b - a),  # a list of rows one too short
    ],
)
def test_rows_of_the_wrong_shape_are_refused_and_leave_no_file(rows, tmp_path):
    with pytest.raises(ValueError):
        ooc.DiskArray.from_row_blocks(SHAPE, np.float32, rows, path=tmp_path / "x.gpa")
    assert list(tmp_path.iterdir()) == []


def test_python_numbers_out_of_the_type_s_range_are_refused(tmp_path):
    with pytest.raises(OverflowError):
        ooc.DiskArray.from_row_blocks((4,), np.uint8, lambda a, b: [300] * (b - a))
    got = ooc.DiskArray.from_row_blocks((4,), np.uint8, lambda a, b: [200] * (b - a))
    np.testing.assert_array_equal(got.to_numpy(), np.full(4, 200, np.uint8))


def test_rows_broadcast_and_cast_as_numpy_casts_arrays(tmp_path):
    got = ooc.DiskArray.from_row_blocks(SHAPE, np.int16, lambda a, b: np.arange(5) * 1.75)
    np.testing.assert_array_equal(
        got.to_numpy(), np.broadcast_to(np.arange(5) * 1.75, SHAPE).astype(np.int16)
    )


def test_a_gradient_that_is_zero_without_a_file_is_saved_as_zeros(tmp_path):
    # (the gradient of a DiskArray the loss does not read is JAX's zero: no file)
    X = ooc.DiskArray.from_numpy(_values(), page_shape=PAGE)
    g = jax.grad(lambda X, w: jnp.sum(w * 2.0))(X, jnp.ones(3))
    saved = g.save(tmp_path / "g.gpa")
    np.testing.assert_array_equal(saved.to_numpy(), np.zeros(SHAPE, np.float32))
