"""A named file written through any handle is never read stale (issue: never a
stale or narrowed value, cases 1 and 3).

Each test names the case it guards. The descriptor a rewrite frees is the one the
next rewrite gets, so a cache keyed by descriptor number, or a second handle kept
on the old file, reads the values from before the write.
"""

import gc
import os

import numpy as np
import pytest

from gradpipe import ooc
from gradpipe.ooc.storage import _rewriting


@pytest.fixture
def data(rng):
    return rng.standard_normal((300, 40)).astype(np.float32)


@pytest.fixture
def named(tmp_path, data):
    path = tmp_path / "x.gpa"
    with ooc.MemoryBudget("1MiB"):
        ooc.DiskArray.from_numpy(data, path=path)
        yield path


def test_case1_a_file_rewritten_twice_is_read_fresh_and_written_back_fresh(named, data):
    x = ooc.DiskArray.open(named, writable=True)
    np.testing.assert_allclose(ooc.sum(x, axis=0).to_numpy(), data.sum(0), rtol=1e-5)
    ooc.update_(x, 2.0)
    ooc.update_(x, 3.0)
    np.testing.assert_array_equal(ooc.sum(x, axis=0).to_numpy(), np.full(40, 900.0))
    ooc.update_(x, x * 2.0)
    np.testing.assert_array_equal(ooc.DiskArray.open(named).to_numpy(), np.full((300, 40), 6.0))


def test_case1_a_set_item_then_update_is_read_fresh(named):
    x = ooc.DiskArray.open(named, writable=True)
    ooc.sum(x, axis=0).to_numpy()  # maps the file
    x[...] = 1.0
    ooc.update_(x, 4.0)
    gc.collect()
    np.testing.assert_array_equal(ooc.sum(x, axis=0).to_numpy(), np.full(40, 1200.0))


def test_a_second_handle_reads_what_the_first_wrote(named):
    writer = ooc.DiskArray.open(named, writable=True)
    reader = ooc.DiskArray.open(named)
    ooc.sum(reader, axis=0).to_numpy()
    ooc.update_(writer, 5.0)
    np.testing.assert_array_equal(reader.to_numpy(), np.full((300, 40), 5.0))
    np.testing.assert_array_equal(ooc.sum(reader, axis=0).to_numpy(), np.full(40, 1500.0))
    writer[:10] = -1.0
    assert ooc.min(reader).item() == -1.0


def test_a_lazy_result_of_a_second_handle_keeps_the_values_it_was_made_from(named, data):
    writer = ooc.DiskArray.open(named, writable=True)
    reader = ooc.DiskArray.open(named)
    fused = reader * 2.0  # computed when read
    waiting = ooc.sum(reader, axis=0)  # waits until read
    ooc.update_(writer, 0.0)
    np.testing.assert_allclose(fused.to_numpy(), data * 2.0)
    np.testing.assert_allclose(waiting.to_numpy(), data.sum(0), rtol=1e-5)


def test_from_numpy_over_an_open_path_is_what_its_handles_read(named):
    x = ooc.DiskArray.open(named)
    ooc.DiskArray.from_numpy(np.full((300, 40), 9.0, np.float32), path=named)
    np.testing.assert_array_equal(x.to_numpy(), np.full((300, 40), 9.0))


def test_a_handle_whose_file_was_replaced_by_another_shape_refuses_to_read(named):
    x = ooc.DiskArray.open(named)
    ooc.DiskArray.from_numpy(np.zeros((3, 4), np.float32), path=named)
    with pytest.raises(ValueError, match="Open the file again"):
        x.to_numpy()


# -- case 3: an interrupt inside update_ leaves handle and file agreeing ----------


def _interrupt_after(monkeypatch, name):
    """Make ``_rewriting``'s ``name`` (e.g. ``fsync_dir``) raise KeyboardInterrupt
    once, after doing its work."""
    real = getattr(_rewriting, name) if hasattr(_rewriting, name) else None
    calls = []

    def interrupted(*args, **kwargs):
        out = real(*args, **kwargs)
        if not calls:
            calls.append(1)
            raise KeyboardInterrupt
        return out

    monkeypatch.setattr(_rewriting, name, interrupted)


def _interrupt_replace_after_success(monkeypatch):
    real = os.replace
    calls = []

    def replace(src, dst):
        real(src, dst)
        if not calls and ".partial-" in str(src):
            calls.append(1)
            raise KeyboardInterrupt

    monkeypatch.setattr(_rewriting.os, "replace", replace)


@pytest.mark.parametrize("where", ["fsync_dir", "os.replace"])
def test_case3_an_interrupt_after_the_rename_leaves_the_handle_on_the_new_data(
    named, monkeypatch, where
):
    x = ooc.DiskArray.open(named, writable=True)
    with monkeypatch.context() as m:
        if where == "os.replace":
            _interrupt_replace_after_success(m)
        else:
            _interrupt_after(m, where)
        with pytest.raises(KeyboardInterrupt):
            ooc.update_(x, 2.0)
    on_disk = ooc.DiskArray.open(named).to_numpy()
    np.testing.assert_array_equal(x.to_numpy(), on_disk)  # they agree
    np.testing.assert_array_equal(on_disk, np.full((300, 40), 2.0))  # the rename happened
    ooc.update_(x, x + 1.0)
    np.testing.assert_array_equal(ooc.DiskArray.open(named).to_numpy(), np.full((300, 40), 3.0))


def test_case3_an_interrupt_before_the_rename_leaves_the_old_data(named, data, monkeypatch):
    x = ooc.DiskArray.open(named, writable=True)
    with monkeypatch.context() as m:
        m.setattr(_rewriting.os, "fsync", _raise_keyboard_interrupt)
        with pytest.raises(KeyboardInterrupt):
            ooc.update_(x, 2.0)
    np.testing.assert_array_equal(x.to_numpy(), data)
    np.testing.assert_array_equal(ooc.DiskArray.open(named).to_numpy(), data)
    assert not [p for p in os.listdir(named.parent) if ".partial-" in p]


def _raise_keyboard_interrupt(*args):
    raise KeyboardInterrupt


def test_a_lazy_result_of_a_second_zarr_handle_keeps_its_values(tmp_path, data):
    zarr = pytest.importorskip("zarr")
    store = str(tmp_path / "x.zarr")
    z = zarr.open(store, mode="w", shape=data.shape, chunks=(50, 40), dtype="f4")
    z[...] = data
    with ooc.MemoryBudget("1MiB"):
        writer = ooc.open_zarr(store, mode="r+")
        reader = ooc.open_zarr(store)
        fused, waiting = reader * 2.0, ooc.sum(reader, axis=0)
        ooc.update_(writer, 1.0)
        np.testing.assert_allclose(fused.to_numpy(), data * 2.0)
        np.testing.assert_allclose(waiting.to_numpy(), data.sum(0), rtol=1e-5)
        fused = reader * 2.0
        writer[:5] = 3.0
        np.testing.assert_array_equal(fused.to_numpy(), np.full(data.shape, 2.0))
        np.testing.assert_array_equal(reader.to_numpy()[:6, 0], [3, 3, 3, 3, 3, 1])


@pytest.mark.parametrize("source", ["a lazy result of it", "the array itself", "a chain over it"])
def test_to_zarr_over_an_open_zarr_array_keeps_what_was_read(tmp_path, data, source):
    """Writing a zarr array over one that DiskArrays read: what they read lazily
    keeps its values, and a source that reads the target is read before it is
    overwritten."""
    zarr = pytest.importorskip("zarr")
    store = str(tmp_path / "x.zarr")
    z = zarr.open(store, mode="w", shape=data.shape, chunks=(50, 40), dtype="f4")
    z[...] = data
    with ooc.MemoryBudget("1MiB"):
        reader = ooc.open_zarr(store)
        lazy, waiting = reader * 2.0, ooc.sum(reader, axis=0)
        if source == "a lazy result of it":
            written, expected = ooc.zeros_like(reader), np.zeros_like(data)
        elif source == "the array itself":
            written, expected = reader, data
        else:
            written, expected = (reader * 2.0) + 1.0, data * 2.0 + 1.0
        ooc.to_zarr(written, store, mode="w")
        np.testing.assert_allclose(zarr.open(store, mode="r")[...], expected)
        np.testing.assert_allclose(lazy.to_numpy(), data * 2.0)
        np.testing.assert_allclose(waiting.to_numpy(), data.sum(0), rtol=1e-5)
