"""The wire formats, without a server."""

import jax
import msgpack
import numpy as np
import pytest

from gradpipe.serve import BINARY, JSON, PayloadError, decode, encode
from gradpipe.serve._msgpack import MAX_DEPTH, pack_pieces, unpack

DOCS = [
    None, True, 0, 127, 128, -1, -33, 65536, 2**63 - 1, -(2**63), 1.5, -0.0, "", "a" * 32,
    "é" * 40000, [], [1] * 16, [2] * 70000, {}, {f"k{i}": i for i in range(16)},
    b"", b"x" * 256, b"z" * 70000, {"a": [{"b": b"q" * 100000}, None, "é"]},
]  # fmt: skip


def plain(node):
    if isinstance(node, memoryview):
        return bytes(node)
    if isinstance(node, dict):
        return {k: plain(v) for k, v in node.items()}
    if isinstance(node, list):
        return [plain(v) for v in node]
    return node


@pytest.mark.parametrize("doc", DOCS, ids=range(len(DOCS)))
def test_msgpack_pieces_match_the_reference_and_read_back(doc):
    packed = msgpack.packb(doc, use_bin_type=True)
    assert b"".join(pack_pieces(doc)) == packed
    assert plain(unpack(packed)) == msgpack.unpackb(packed, raw=False)


@pytest.mark.parametrize(
    "body",
    [b"", b"\x92\x01", b"\xc6\x00\x00\x10\x00abc", b"\x81\x01\x02", b"\xd4\x05\x00", b"\xc1",
     b"\x01\x02", b"\x91" * (MAX_DEPTH + 2) + b"\x01", b"\xdd\xff\xff\xff\xff"],
)  # fmt: skip
def test_msgpack_reader_refuses_hostile_bodies(body):
    with pytest.raises(ValueError):
        unpack(body)


@pytest.mark.parametrize("content_type", [BINARY, JSON])
def test_arrays_round_trip_exactly(content_type):
    doc = {
        "f32": np.array([1.5, -0.0, np.nan, np.inf], np.float32),
        "scalar": np.float64(2.25),
        "big_endian": np.arange(6, dtype=">i4").reshape(2, 3),
        "empty": np.zeros((0, 3), np.int16),
        "bool": np.array([True, False]),
        "complex": np.array([1 + 2j], np.complex64),
        "float0": np.zeros((2, 3), jax.dtypes.float0),
        "nested": [{"x": np.uint8(7)}, "text", None, 3, 2.5, True],
    }
    back = decode(encode(doc, content_type), content_type)
    for key in ("f32", "scalar", "big_endian", "empty", "bool", "complex"):
        want = np.asarray(doc[key])
        assert back[key].dtype == want.dtype.newbyteorder("=") and back[key].shape == want.shape
        assert back[key].tobytes() == want.astype(want.dtype.newbyteorder("=")).tobytes()
    assert back["float0"].dtype == jax.dtypes.float0 and back["float0"].shape == (2, 3)
    assert back["nested"][0]["x"].shape == () and back["nested"][1:] == ["text", None, 3, 2.5, True]


def test_unknown_dtypes_are_refused_both_ways():
    with pytest.raises(PayloadError):
        encode({"x": np.array(["a"])}, BINARY)
    frame = {"object_type": "array", "dtype": "object", "shape": [1],
             "data": {"buffer": b"\0" * 8, "encoding": "raw"}}  # fmt: skip
    with pytest.raises(PayloadError, match="x"):
        decode(msgpack.packb({"x": frame}), BINARY)


def test_missing_http_stack_names_the_extra():
    import subprocess
    import sys

    code = "import sys; sys.modules['msgpack'] = None; import gradpipe.serve"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode != 0
    assert "ImportError" in done.stderr and "gradpipe[serve]" in done.stderr
