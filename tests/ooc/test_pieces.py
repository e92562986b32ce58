"""Reading and writing regions of paged files piece by piece (vectored I/O) gives
the same bytes as the page-at-a-time path, reads only the region, and survives
short writes, full disks and truncated files with clear errors."""

from __future__ import annotations

import errno
import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gradpipe.ooc.storage import _pieces
from gradpipe.ooc.storage._paged_file import PagedFile


@st.composite
def layouts(draw):
    ndim = draw(st.integers(1, 3))
    shape = tuple(draw(st.integers(1, 19)) for _ in range(ndim))
    pages = tuple(draw(st.integers(1, n + 2)) for n in shape)
    region = []
    for n in shape:
        lo = draw(st.integers(0, n - 1))
        region.append(slice(lo, draw(st.integers(lo + 1, n))))
    dtype = draw(st.sampled_from([np.float32, np.float64, np.int16]))
    return shape, pages, tuple(region), dtype


def _page_path_only(monkeypatch):
    monkeypatch.setattr(_pieces, "MIN_PIECE_BYTES", 1 << 40)
    monkeypatch.setattr(_pieces, "_MANY_CALLS", -1)
    monkeypatch.setattr(_pieces, "MAX_OVERREAD", 1 << 40)


@pytest.mark.parametrize("path", ["pieces", "pages"])
@settings(max_examples=60, deadline=None)
@given(layout=layouts(), seed=st.integers(0, 2**16))
def test_regions_read_and_write_like_numpy(path, layout, seed):
    shape, pages, region, dtype = layout
    rng = np.random.default_rng(seed)
    with pytest.MonkeyPatch.context() as mp:
        if path == "pages":
            _page_path_only(mp)
        x = (rng.standard_normal(shape) * 100).astype(dtype)
        f = PagedFile.create(shape, dtype, pages)
        f.write(None, x)
        np.testing.assert_array_equal(f.read(region), x[region])
        patch = (rng.standard_normal(x[region].shape) * 100).astype(dtype)
        f.write(region, patch)
        x[region] = patch
        np.testing.assert_array_equal(f.read(None), x)
        out = np.empty(x[region].shape, dtype)
        assert f.read(region, out=out) is out
        np.testing.assert_array_equal(out, x[region])
        f.write(region, 7)  # a broadcast scalar
        x[region] = 7
        np.testing.assert_array_equal(f.read(None), x)
        f.discard()


def test_a_region_spanning_pages_reads_only_its_own_bytes(monkeypatch):
    x = np.arange(96 * 96, dtype=np.float32).reshape(96, 96)
    f = PagedFile.create(x.shape, x.dtype, (32, 32))
    f.write(None, x)
    got = []
    real = os.preadv
    monkeypatch.setattr(
        os, "preadv", lambda fd, bufs, off: got.append(real(fd, bufs, off)) or got[-1]
    )
    region = (slice(10, 70), slice(20, 90))
    np.testing.assert_array_equal(f.read(region), x[region])
    assert sum(got) == x[region].nbytes  # no page read whole for a part of it
    f.discard()


def _counting_preadv(monkeypatch) -> list[int]:
    got: list[int] = []
    real = os.preadv
    monkeypatch.setattr(
        os, "preadv", lambda fd, bufs, off: got.append(real(fd, bufs, off)) or got[-1]
    )
    return got


def test_a_small_part_of_a_large_page_is_read_alone_however_short_its_pieces(monkeypatch):
    """Two rows of a quarter of the columns of one 12-row page (a climatology's two
    months for one tile): 1 KiB pieces, 360 of them, rather than the whole page."""
    from gradpipe import ooc

    x = np.arange(12 * 180 * 1024, dtype=np.float32).reshape(12, 180, 1024)
    f = PagedFile.create(x.shape, x.dtype, x.shape)
    f.write(None, x)
    got = _counting_preadv(monkeypatch)
    region = (slice(3, 5), slice(0, 180), slice(256, 512))
    ooc.reset_io_stats()
    np.testing.assert_array_equal(f.read(region), x[region])
    assert sum(got) == x[region].nbytes
    assert ooc.io_stats().bytes_read == x[region].nbytes
    f.discard()


def test_short_pieces_that_follow_each_other_on_disk_are_one_call(monkeypatch):
    """Half the rows of a page of narrow rows: 480 pieces of 128 bytes, all
    neighbours on disk, read by one call and not as the whole page."""
    x = np.arange(64 * 30 * 32, dtype=np.float32).reshape(64, 30, 32)
    f = PagedFile.create(x.shape, x.dtype, (32, 30, 32))
    f.write(None, x)
    got = _counting_preadv(monkeypatch)
    region = (slice(0, 16), slice(0, 30), slice(0, 32))
    np.testing.assert_array_equal(f.read(region), x[region])
    assert got == [x[region].nbytes]
    f.discard()


def test_rows_that_follow_each_other_on_disk_and_in_memory_go_as_one_buffer(monkeypatch):
    """A page of whole rows (a training set written page by page) goes to and from
    its file as one buffer a call, not one a row: written in calls of 1024 one-row
    buffers, a file's memory on a sandboxed TPU host was left in pieces that cost
    5-10x more to drop from a map (issue 33)."""
    x = np.arange(4096 * 256, dtype=np.float32).reshape(4096, 256)
    f = PagedFile.create(x.shape, x.dtype, (1024, 256))
    calls = []
    for name in ("pwritev", "preadv"):
        real = getattr(os, name)

        def counting(fd, buffers, offset, real=real, name=name):
            calls.append((name, len(buffers)))
            return real(fd, buffers, offset)

        monkeypatch.setattr(os, name, counting)
    f.write(None, x)
    np.testing.assert_array_equal(f.read((slice(100, 3000), slice(0, 256))), x[100:3000])
    assert [c for c in calls if c[0] == "pwritev"] == [("pwritev", 1)] * 4  # (a page each)
    assert calls[4:] and all(n == 1 for _, n in calls[4:])
    f.discard()


def test_many_short_rows_in_long_runs_are_read_as_runs_not_whole_pages(monkeypatch):
    """Whole narrow rows over four pages of 65536 rows each: 64-byte pieces, a quarter
    of a million of them, but one run a page, so read as four runs (exactly the
    region's bytes, into the result) rather than four pages staged and copied."""
    from gradpipe import ooc

    x = np.arange(4 * 65536 * 16, dtype=np.float32).reshape(-1, 16)
    f = PagedFile.create(x.shape, x.dtype, (65536, 16))
    f.write(None, x)
    got = _counting_preadv(monkeypatch)
    region = (slice(100, len(x) - 100), slice(0, 16))
    ooc.reset_io_stats()
    np.testing.assert_array_equal(f.read(region), x[region])
    assert ooc.io_stats().bytes_read == x[region].nbytes == sum(got)
    assert len(got) == 4
    f.discard()


def test_io_stats_count_the_whole_pages_the_page_path_reads(monkeypatch):
    from gradpipe import ooc

    _page_path_only(monkeypatch)
    x = np.arange(64 * 64, dtype=np.float32).reshape(64, 64)
    f = PagedFile.create(x.shape, x.dtype, (32, 32))
    f.write(None, x)
    ooc.reset_io_stats()
    np.testing.assert_array_equal(f.read((slice(0, 4), slice(0, 40))), x[:4, :40])
    assert ooc.io_stats().bytes_read == 2 * 32 * 32 * 4  # the two pages it touches
    f.discard()


def test_read_into_refuses_a_wrong_buffer():
    f = PagedFile.create((8, 8), np.float32, (4, 4))
    with pytest.raises(ValueError, match="C-contiguous float32 array of shape \\(8, 4\\)"):
        f.read((slice(0, 8), slice(0, 4)), out=np.empty((8, 8), np.float32)[:, :4])
    with pytest.raises(ValueError, match="float32"):
        f.read((slice(0, 8), slice(0, 4)), out=np.empty((8, 4), np.float64))
    f.discard()


def test_a_full_disk_during_a_vectored_write_names_the_file(monkeypatch):
    def full(fd, buffers, offset):
        raise OSError(errno.ENOSPC, "No space left on device")

    f = PagedFile.create((64, 64), np.float32, (16, 64))
    monkeypatch.setattr(os, "pwritev", full)
    with pytest.raises(OSError, match="Disk full while writing"):
        f.write(None, np.ones((64, 64), np.float32))
    f.discard()


def test_a_file_truncated_after_opening_is_a_clear_error(tmp_path):
    x = np.ones((128, 128), np.float32)
    f = PagedFile.create(x.shape, x.dtype, (32, 128), path=tmp_path / "t.gpa")
    f.write(None, x)
    f.commit()
    g = PagedFile.open(tmp_path / "t.gpa")
    os.truncate(tmp_path / "t.gpa", 4096 + 1000)
    with pytest.raises(OSError, match="truncated"):
        g.read(None)


def test_a_scalar_fill_is_written_a_slab_at_a_time(monkeypatch):
    """A broadcast value is made contiguous in slabs of at most a few MiB, never as
    one region-sized copy."""
    from gradpipe.ooc.storage import _paged_file

    monkeypatch.setattr(_paged_file, "_STAGING_BYTES", 4096)
    sizes = []
    real = _pieces.write_pieces
    monkeypatch.setattr(
        _paged_file,
        "write_pieces",
        lambda fd, data, p, path: sizes.append(data.nbytes) or real(fd, data, p, path),
    )
    f = PagedFile.create((100, 64), np.float32, (16, 64))
    f.write(None, np.float32(2.5))
    np.testing.assert_array_equal(f.read(None), np.full((100, 64), 2.5, np.float32))
    assert max(sizes) <= 4096 and sum(sizes) == 100 * 64 * 4
    sizes.clear()
    f.write((slice(3, 4), slice(0, 64)), np.float32(-1))  # one row: cut along columns
    f.write((slice(0, 100), slice(5, 6)), np.float32(-2))  # one column: cut along rows
    want = np.full((100, 64), 2.5, np.float32)
    want[3], want[:, 5] = -1, -2
    np.testing.assert_array_equal(f.read(None), want)
    f.discard()
    g = PagedFile.create((1, 5000), np.float32, (1, 1024))
    sizes.clear()
    g.write(None, np.float32(4))
    assert max(sizes) <= 4096 and sum(sizes) == 5000 * 4
    np.testing.assert_array_equal(g.read(None), np.full((1, 5000), 4, np.float32))
    g.discard()


@pytest.mark.parametrize("path", ["pieces", "pages"])
@pytest.mark.parametrize("call", ["preadv", "pwritev"])
def test_a_short_vectored_call_is_finished(monkeypatch, call, path):
    """One call moves at most about 2 GiB; what a short one leaves is moved after."""
    if path == "pages":
        _page_path_only(monkeypatch)
        if call == "pwritev":
            call = "pwrite"  # the page path writes one page run per call
    real = getattr(os, call)
    calls = []

    def short(fd, buffers, offset):
        calls.append(1)
        first = buffers if call == "pwrite" else buffers[0]
        if len(calls) == 1:  # the first call moves a third of its first buffer only
            third = memoryview(first).cast("B")[: memoryview(first).nbytes // 3]
            return real(fd, third if call == "pwrite" else [third], offset)
        return real(fd, buffers, offset)

    x = np.arange(64 * 64, dtype=np.float64).reshape(64, 64)
    f = PagedFile.create(x.shape, x.dtype, (16, 64))
    if call.startswith("pwrite"):
        monkeypatch.setattr(os, call, short)
    f.write(None, x)
    monkeypatch.setattr(os, call, short)
    np.testing.assert_array_equal(f.read((slice(5, 60), slice(0, 64))), x[5:60])
    assert len(calls) > 1
    f.discard()
