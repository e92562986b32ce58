"""Damaged array headers and wrong paths: every refusal names the file and the fault."""

import json
import os
import struct

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gradpipe import ooc
from gradpipe.ooc.storage import _header


def _write_header(path, meta, *, length=None, magic=_header.MAGIC, pad=True, data=64):
    body = json.dumps(meta).encode() if not isinstance(meta, bytes) else meta
    n = len(body) if length is None else length
    raw = magic + struct.pack("<I", n) + body
    if pad:
        raw = raw.ljust(_header.HEADER_BYTES, b"\x00") + b"\x00" * data
    path.write_bytes(raw)
    return path


GOOD = {"version": 1, "shape": [4, 2], "dtype": "<f4", "page_shape": [2, 2]}


@pytest.mark.parametrize(
    "meta, what",
    [
        (b"{not json", "does not parse"),
        (b"\xff\xfe", "does not parse"),
        (b"[1, 2]", "not an object"),
        ({**GOOD, "dtype": "<q9"}, "dtype"),
        ({**GOOD, "dtype": "O"}, "dtype"),
        ({**GOOD, "dtype": 7}, "dtype"),
        ({**GOOD, "page_shape": [0, 2]}, "page_shape"),
        ({**GOOD, "page_shape": [2]}, "does not match"),
        ({**GOOD, "shape": [-4, 2]}, "shape"),
        ({**GOOD, "shape": [4.0, 2]}, "shape"),
        ({**GOOD, "shape": [True, 2]}, "shape"),
        ({**GOOD, "shape": "4,2"}, "shape"),
        ({k: v for k, v in GOOD.items() if k != "dtype"}, "lacks"),
        ({**GOOD, "version": 99}, "version 99"),
    ],
)
def test_a_damaged_header_names_the_file_and_the_fault(tmp_path, meta, what):
    path = _write_header(tmp_path / "bad.gpa", meta)
    with pytest.raises(ValueError, match=what) as info:
        ooc.DiskArray.open(path)
    assert str(path) in str(info.value)


def test_length_field_past_the_header_and_truncated_header(tmp_path):
    past = _header.HEADER_BYTES - len(_header.MAGIC) - 4 + 1  # one byte past the end
    for length in (past, 10**6):
        path = _write_header(tmp_path / "long.gpa", GOOD, length=length)
        with pytest.raises(ValueError, match="length field") as info:
            ooc.DiskArray.open(path)
        assert str(path) in str(info.value)
    good = ooc.DiskArray.from_numpy(np.ones((4, 2), np.float32), path=tmp_path / "good.gpa")
    raw = (tmp_path / "good.gpa").read_bytes()
    del good
    for cut in (3, len(_header.MAGIC) + 2, 40, _header.HEADER_BYTES - 1):
        (tmp_path / "cut.gpa").write_bytes(raw[:cut])
        with pytest.raises(ValueError, match="ends after") as info:
            ooc.DiskArray.open(tmp_path / "cut.gpa")
        assert "cut.gpa" in str(info.value)


def test_wrong_magic_and_a_directory_name_the_path(tmp_path):
    path = _write_header(tmp_path / "x.gpa", GOOD, magic=b"PK\x03\x04\x00\x00\x00\x00")
    with pytest.raises(ValueError, match="not a gradpipe array file") as info:
        ooc.DiskArray.open(path)
    assert str(path) in str(info.value)
    with pytest.raises(IsADirectoryError, match="is a directory") as info:
        ooc.DiskArray.open(tmp_path)
    assert str(tmp_path) in str(info.value)


def test_unreadable_file_names_the_path(tmp_path):
    path = _write_header(tmp_path / "locked.gpa", GOOD)
    path.chmod(0)
    if os.access(path, os.R_OK):  # root, or a user allowed to override permissions
        pytest.skip("this user reads a file without read permission")
    with pytest.raises(PermissionError, match=r"locked\.gpa"):
        ooc.DiskArray.open(path)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_any_corruption_of_a_header_opens_correctly_or_names_the_file(tmp_path, data):
    """Flip, cut or overwrite header bytes: open gives the original array or a
    ValueError naming the file, never another exception or different values."""
    path = tmp_path / "fuzz.gpa"
    want = np.arange(12, dtype=np.float32).reshape(4, 3)
    if not path.exists():
        ooc.DiskArray.from_numpy(want, path=path, page_shape=(2, 2))
    raw = bytearray(path.read_bytes())
    n_meta = struct.unpack_from("<I", raw, len(_header.MAGIC))[0]
    end = len(_header.MAGIC) + 4 + n_meta
    kind = data.draw(st.sampled_from(["flip", "cut", "set"]))
    bad = bytearray(raw)
    if kind == "cut":
        bad = bad[: data.draw(st.integers(0, len(raw) - 1))]
    else:
        i = data.draw(st.integers(0, end + 2))
        if kind == "flip":
            bad[i] ^= 1 << data.draw(st.integers(0, 7))
        else:
            bad[i] = data.draw(st.integers(0, 255))
    damaged = tmp_path / "damaged.gpa"
    damaged.write_bytes(bytes(bad))
    try:
        a = ooc.DiskArray.open(damaged)
    except ValueError as e:
        assert str(damaged) in str(e)
        return
    # opened: the change missed the JSON (padding, or the checksum's mark)
    assert (a.shape, a.dtype) == (want.shape, want.dtype)
    np.testing.assert_array_equal(a.to_numpy(), want)


def test_a_bit_flip_that_leaves_valid_json_is_caught_by_the_checksum(tmp_path):
    path = tmp_path / "a.gpa"
    ooc.DiskArray.from_numpy(np.zeros((4, 3), np.float32), path=path)
    raw = path.read_bytes()
    for old, new in (
        (b"[4, 3]", b"[4, 2]"),
        (b"<f4", b">f4"),
        (b'"page_shape": [4', b'"page_shape": [5'),
    ):
        assert old in raw[:4096]
        path.write_bytes(raw.replace(old, new, 1))
        with pytest.raises(ValueError, match="checksum") as info:
            ooc.DiskArray.open(path)
        assert str(path) in str(info.value)
