"""The paged file format: header, atomic writes, clear errors, scratch cleanup."""

import errno
import gc
import os
import subprocess
import sys

import numpy as np
import pytest

from gradpipe import ooc
from gradpipe.ooc.storage import _header, _paged_file


def test_round_trip_with_odd_pages(rng, tmp_path):
    X = rng.standard_normal((37, 23)).astype(np.float64)
    a = ooc.DiskArray.from_numpy(X, path=tmp_path / "x.gpa", page_shape=(8, 5))
    np.testing.assert_array_equal(a.to_numpy(), X)
    b = ooc.DiskArray.open(tmp_path / "x.gpa")
    assert b.shape == (37, 23) and b.dtype == np.float64
    np.testing.assert_array_equal(b.to_numpy(), X)
    f = _paged_file.PagedFile.open(tmp_path / "x.gpa")
    assert f.page_shape == (8, 5)
    np.testing.assert_array_equal(f.read((slice(3, 30), slice(4, 21))), X[3:30, 4:21])


def test_header_names_shape_dtype_page_and_version(tmp_path):
    ooc.DiskArray.from_numpy(np.zeros((3, 4), np.float32), path=tmp_path / "h.gpa")
    raw = (tmp_path / "h.gpa").read_bytes()
    assert raw.startswith(_header.MAGIC)
    assert b'"version": 1' in raw[:4096] and b'"shape": [3, 4]' in raw[:4096]
    assert b'"page_shape"' in raw[:4096] and b"<f4" in raw[:4096]


def test_a_tile_equal_to_a_page_is_one_contiguous_read(tmp_path):
    X = np.arange(64 * 64, dtype=np.float32).reshape(64, 64)
    f = ooc.DiskArray.from_numpy(X, page_shape=(16, 16))._file
    reads = []
    real = os.preadv
    try:
        os.preadv = lambda fd, bufs, off: reads.append(off) or real(fd, bufs, off)
        np.testing.assert_array_equal(f.read((slice(16, 32), slice(32, 48))), X[16:32, 32:48])
    finally:
        os.preadv = real
    assert len(reads) == 1


def test_missing_and_truncated_files_give_clear_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="No gradpipe array file"):
        ooc.DiskArray.open(tmp_path / "nope.gpa")
    ooc.DiskArray.from_numpy(np.ones((100, 100), np.float32), path=tmp_path / "t.gpa")
    with open(tmp_path / "t.gpa", "r+b") as fh:
        fh.truncate(4096 + 1000)
    with pytest.raises(ValueError, match="truncated"):
        ooc.DiskArray.open(tmp_path / "t.gpa")
    (tmp_path / "junk.gpa").write_bytes(b"hello")
    with pytest.raises(ValueError, match="not a gradpipe array file"):
        ooc.DiskArray.open(tmp_path / "junk.gpa")


def test_interrupted_write_leaves_no_partial_array(tmp_path, monkeypatch):
    calls = []
    real = _paged_file.PagedFile.write

    def failing_write(self, region, data):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt("simulated failure part-way")
        return real(self, region, data)

    monkeypatch.setattr(_paged_file.PagedFile, "write", failing_write)
    with pytest.raises(KeyboardInterrupt):
        ooc.DiskArray.from_numpy(
            np.ones((64, 8), np.float32), path=tmp_path / "p.gpa", page_shape=(8, 8)
        )
    assert list(tmp_path.iterdir()) == []


def test_interrupted_operation_leaves_no_output_file(rng, monkeypatch):
    a = ooc.DiskArray.from_numpy(rng.standard_normal((32, 32)).astype(np.float32))
    before = set(ooc.get_scratch_dir().iterdir())
    real = ooc.ops._matmul.MatMul.forward_into
    calls = []

    def boom(self, out, x, y, accumulate):
        calls.append(1)
        if len(calls) == 3:
            raise RuntimeError("simulated failure")
        return real(self, out, x, y, accumulate)

    monkeypatch.setattr(ooc.ops._matmul.MatMul, "forward_into", boom)
    with pytest.raises(RuntimeError, match="simulated"), ooc.MemoryBudget(8192):
        ooc.matmul(a, a)
    # no file more; one fewer is an earlier test's garbage, collected meanwhile
    assert set(ooc.get_scratch_dir().iterdir()) <= before


def test_full_disk_is_a_clear_error_and_leaves_nothing(tmp_path, monkeypatch):
    def no_space(fd, offset, size):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "posix_fallocate", no_space)
    with pytest.raises(OSError, match="Not enough disk space"):
        ooc.DiskArray.from_numpy(np.ones((10, 10), np.float32), path=tmp_path / "f.gpa")
    assert list(tmp_path.iterdir()) == []


def test_scratch_files_are_removed_when_arrays_are_collected():
    a = ooc.DiskArray.from_numpy(np.ones((10, 10), np.float32))
    path = a.path
    assert os.path.exists(path)
    del a
    gc.collect()
    assert not os.path.exists(path)


def test_named_files_survive_collection(tmp_path):
    a = ooc.DiskArray.from_numpy(np.ones((4, 4), np.float32), path=tmp_path / "keep.gpa")
    del a
    gc.collect()
    assert (tmp_path / "keep.gpa").exists()


def test_scratch_dir_from_env_var_is_cleaned_at_exit(tmp_path):
    code = (
        "import numpy as np; from gradpipe import ooc;"
        "a = ooc.DiskArray.from_numpy(np.ones((50, 50), np.float32));"
        "b = ooc.matmul(a, a); keep = [a, b]; print(ooc.get_scratch_dir())"
    )
    env = dict(os.environ, GRADPIPE_SCRATCH=str(tmp_path), JAX_PLATFORMS="cpu")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().startswith(str(tmp_path))
    assert list(tmp_path.iterdir()) == []


def test_set_scratch_dir_api(tmp_path):
    old = ooc.get_scratch_dir().parent
    ooc.set_scratch_dir(tmp_path)
    try:
        a = ooc.DiskArray.zeros((3, 3))
        assert a.path.startswith(str(tmp_path))
        del a
        gc.collect()
    finally:
        ooc.set_scratch_dir(old)
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == []


def test_to_numpy_refuses_above_budget_unless_forced():
    a = ooc.DiskArray.full((100, 100), 3.0)
    with pytest.raises(MemoryError, match=r"39\.1 KiB"):
        a.to_numpy(budget=ooc.MemoryBudget(8192))
    assert a.to_numpy(budget=8192, force=True).sum() == 30000.0


def test_zarr_and_memmap_round_trips(rng, tmp_path):
    X = rng.standard_normal((37, 11)).astype(np.float32)
    mm = np.memmap(tmp_path / "x.raw", dtype=np.float32, mode="w+", shape=X.shape)
    mm[:] = X
    a = ooc.DiskArray.from_memmap(mm)
    np.testing.assert_array_equal(ooc.to_memmap(a, tmp_path / "y.raw"), X)
    z = ooc.to_zarr(a, str(tmp_path / "x.zarr"))
    np.testing.assert_array_equal(z[:], X)
    b = ooc.from_zarr(str(tmp_path / "x.zarr"))
    np.testing.assert_array_equal(b.to_numpy(), X)


def test_zarr_missing_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "zarr", None)
    with pytest.raises(ImportError, match=r"gradpipe\[zarr\]"):
        ooc.from_zarr("nowhere.zarr")


def _sync_log(monkeypatch):
    """Record fsyncs (by path) and renames, in order."""
    log = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd):
        log.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        real_fsync(fd)

    def replace(src, dst):
        log.append(("rename", os.fspath(dst)))
        real_replace(src, dst)

    monkeypatch.setattr(_paged_file.os, "fsync", fsync)
    monkeypatch.setattr(_paged_file.os, "replace", replace)
    return log


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc")
def test_named_files_are_synced_before_and_after_their_rename(tmp_path, monkeypatch):
    """Without these, a power cut can leave a named file of zeros, or no name at all."""
    path = str(tmp_path / "d.gpa")
    log = _sync_log(monkeypatch)
    ooc.DiskArray.from_numpy(np.ones((4, 4), np.float32), path=path)
    rename = log.index(("rename", path))
    assert any(k == "fsync" and p.startswith(path + ".partial-") for k, p in log[:rename])
    assert ("fsync", str(tmp_path)) in log[rename:]
    log.clear()
    ooc.DiskArray.open(path, writable=True).update_(2.0)  # through a shadow copy
    rename = log.index(("rename", path))
    assert any(k == "fsync" and p.startswith(path + ".partial-") for k, p in log[:rename])
    assert ("fsync", str(tmp_path)) in log[rename:]


def test_a_file_one_byte_short_is_refused(tmp_path):
    ooc.DiskArray.from_numpy(np.ones((10, 10), np.float32), path=tmp_path / "s.gpa")
    size = os.path.getsize(tmp_path / "s.gpa")
    os.truncate(tmp_path / "s.gpa", size - 1)
    with pytest.raises(ValueError, match="truncated"):
        ooc.DiskArray.open(tmp_path / "s.gpa")


def test_an_update_that_fails_part_way_changes_nothing(tmp_path, monkeypatch):
    path = tmp_path / "u.gpa"
    ooc.DiskArray.from_numpy(np.zeros((64, 64), np.float32), path=path, page_shape=(8, 64))
    w = ooc.DiskArray.open(path, writable=True)
    real, calls = _paged_file.PagedFile.write, []

    def failing_write(self, region, data):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt("simulated failure part-way")
        return real(self, region, data)

    monkeypatch.setattr(_paged_file.PagedFile, "write", failing_write)
    with ooc.MemoryBudget(8192), pytest.raises(KeyboardInterrupt):
        w.update_(1.0)
    monkeypatch.setattr(_paged_file.PagedFile, "write", real)
    assert np.all(w.to_numpy() == 0) and np.all(ooc.DiskArray.open(path).to_numpy() == 0)
    assert [p.name for p in tmp_path.iterdir()] == ["u.gpa"]
    w.update_(3.0)  # the array still works, and writes its own file
    assert np.all(ooc.DiskArray.open(path).to_numpy() == 3)


def test_update_through_a_symlink_rewrites_its_target(tmp_path):
    (tmp_path / "data").mkdir()
    real = tmp_path / "data" / "w.gpa"
    ooc.DiskArray.zeros((4, 4), path=real)
    link = tmp_path / "w.gpa"
    link.symlink_to(real)
    ooc.DiskArray.open(link, writable=True).update_(5.0)
    assert link.is_symlink()
    np.testing.assert_array_equal(ooc.DiskArray.open(real).to_numpy(), np.full((4, 4), 5.0))


def _refused_even_when_absent(unlink):
    # gVisor (a sandbox's kernel) answers EACCES to removing a file that is not
    # there from a directory the user cannot write; Linux answers ENOENT
    def refusing(path, *args, **kwargs):
        if not os.access(os.path.dirname(os.fspath(path)) or ".", os.W_OK):
            raise PermissionError(errno.EACCES, "Permission denied", os.fspath(path))
        return unlink(path, *args, **kwargs)

    return refusing


def _skip_where_this_user_writes(directory):
    # root, or a user allowed to override permissions (a sandbox's), writes there
    try:
        (directory / "probe").touch()
    except PermissionError:
        return
    pytest.skip("this user writes in a read-only directory")


@pytest.mark.parametrize("system", ["linux", "gvisor"])
def test_an_array_made_in_a_read_only_directory_names_it(tmp_path, monkeypatch, system):
    if system == "gvisor":
        monkeypatch.setattr(os, "unlink", _refused_even_when_absent(os.unlink))
    (tmp_path / "ro").mkdir()
    (tmp_path / "ro").chmod(0o555)
    try:
        _skip_where_this_user_writes(tmp_path / "ro")
        for make in (
            lambda p: ooc.DiskArray.zeros((4, 4), path=p),
            lambda p: ooc.DiskArray.from_numpy(np.ones((4, 4)), path=p),
        ):
            with pytest.raises(PermissionError, match=r"'.*ro' is not writable"):
                make(tmp_path / "ro" / "w.gpa")
    finally:
        (tmp_path / "ro").chmod(0o755)
    assert list((tmp_path / "ro").iterdir()) == []


@pytest.mark.parametrize("system", ["linux", "gvisor"])
def test_update_in_a_read_only_directory_names_it(tmp_path, monkeypatch, system):
    if system == "gvisor":
        monkeypatch.setattr(os, "unlink", _refused_even_when_absent(os.unlink))
    (tmp_path / "ro").mkdir()
    path = tmp_path / "ro" / "w.gpa"
    ooc.DiskArray.zeros((4, 4), path=path)
    w = ooc.DiskArray.open(path, writable=True)
    (tmp_path / "ro").chmod(0o555)
    try:
        _skip_where_this_user_writes(tmp_path / "ro")
        with pytest.raises(PermissionError, match="not writable"):
            w.update_(1.0)
    finally:
        (tmp_path / "ro").chmod(0o755)
    np.testing.assert_array_equal(w.to_numpy(), np.zeros((4, 4)))


def test_an_interrupted_to_memmap_leaves_no_file(tmp_path, monkeypatch):
    """A raw memmap has no header: a half-written one would read as valid data."""
    a = ooc.DiskArray.from_numpy(np.ones((64, 64), np.float32))
    real, calls = _paged_file.PagedFile.read, []

    def failing_read(self, region=None, out=None):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt("simulated failure part-way")
        return real(self, region, out)

    monkeypatch.setattr(_paged_file.PagedFile, "read", failing_read)
    with pytest.raises(KeyboardInterrupt):
        ooc.to_memmap(a, tmp_path / "m.raw", budget=8192)
    assert list(tmp_path.iterdir()) == []
    monkeypatch.setattr(_paged_file.PagedFile, "read", real)
    np.testing.assert_array_equal(ooc.to_memmap(a, tmp_path / "m.raw"), np.ones((64, 64)))
    assert [p.name for p in tmp_path.iterdir()] == ["m.raw"]
