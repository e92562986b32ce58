"""JSON bodies with long base64 buffers: the fast reader gives what `json.loads` gives.

The server cuts long ``"buffer"`` strings out of a body before parsing it; a client
relies on getting the same document, the same bytes and the same errors as a plain
parse, whatever the body holds around or inside those strings.
"""

from __future__ import annotations

import base64
import json
import random

import numpy as np
import pytest

from gradpipe.serve import JSON
from gradpipe.serve._encoding import PayloadError, decode
from gradpipe.serve._json_body import Base64Text, loads
from gradpipe.serve._tesseract_wire import WireError, decode_arrays

LONG = base64.b64encode(bytes(range(256)) * 24).decode()  # 8,192 characters


def outcome(body: bytes):
    try:
        return "ok", json.loads(body)
    except Exception as exc:  # the error itself is compared
        return "error", type(exc), str(exc)


def fast_outcome(body: bytes):
    try:
        return "ok", loads(body)
    except Exception as exc:
        return "error", type(exc), str(exc)


PIECES = [
    '"buffer"', ":", " ", "\n", ",", "{", "}", "[", "]", "1", "NaN", '"x"', '"é"',
    f'"{LONG}"', f'"{LONG[:-1]}"', f'"{LONG}=="', f'"{LONG}\\"', "\\", "\\\\", '"',
    '"a\\"b"', '"buf\\u0066er"', f'"{LONG[:100]}\x01{LONG}"', f'"{LONG[:64]}\\n{LONG}"',
]  # fmt: skip


def test_any_sequence_of_tokens_parses_or_fails_as_json_loads():
    rng = random.Random(15)
    for _ in range(4000):
        body = "".join(rng.choice(PIECES) for _ in range(rng.randint(1, 10))).encode()
        assert fast_outcome(body) == outcome(body), body[:120]


@pytest.mark.parametrize("separators", [(",", ":"), (", ", ": "), (" , ", " :\n ")])
def test_documents_with_buffers_anywhere_read_the_same(separators):
    data = {"buffer": LONG, "encoding": "base64"}
    document = {
        "inputs": {"x": {"shape": [6144], "dtype": "uint8", "data": data}, "name": LONG},
        "list": [LONG, {"buffer": LONG}, {"buffer": "AA=="}],
        "buffer": LONG,
        LONG: {"buffer": f"{LONG}="},  # a long key, and a buffer that is not base64
    }
    body = json.dumps(document, separators=separators).encode()
    got = loads(body)
    assert got == json.loads(body)
    buffer = got["inputs"]["x"]["data"]["buffer"]
    assert isinstance(buffer, Base64Text) and buffer.raw == bytes(range(256)) * 24
    assert not isinstance(got[LONG]["buffer"], Base64Text)  # read as a plain string


def test_duplicate_buffer_keys_keep_the_last_value():
    body = f'{{"buffer": "{LONG}", "buffer": "AA=="}}'.encode()
    assert loads(body) == {"buffer": "AA=="}
    body = f'{{"buffer": "AA==", "buffer": "{LONG}"}}'.encode()
    assert loads(body) == {"buffer": LONG}


def test_utf16_and_invalid_utf8_bodies_fail_or_read_as_json_loads():
    document = {"data": {"buffer": LONG, "encoding": "base64"}}
    utf16 = json.dumps(document).encode("utf-16")
    assert fast_outcome(utf16) == outcome(utf16)
    broken = json.dumps(document).encode()[:-2] + b"\xff}"
    assert fast_outcome(broken) == outcome(broken)


def array_body(buffer: str) -> bytes:
    data = {"buffer": buffer, "encoding": "base64"}
    array = {"object_type": "array", "shape": [6144], "dtype": "uint8", "data": data}
    return json.dumps({"x": array}).encode()


def test_gradpipe_json_decoding_gets_the_array_and_refuses_bad_base64():
    got = decode(array_body(LONG), JSON)["x"]
    assert isinstance(got, np.ndarray)
    np.testing.assert_array_equal(got, np.frombuffer(bytes(range(256)) * 24, np.uint8))
    for bad in (LONG[:-4] + "AA=A", LONG[:40] + "\\n" + LONG[44:], LONG[:-4] + "AA-_"):
        with pytest.raises(PayloadError, match="not valid base64"):
            decode(array_body(bad), JSON)


def test_tesseract_decoding_gets_the_array_and_refuses_bad_base64():
    document = loads(array_body(LONG))
    got = decode_arrays(document, ["body", "inputs"])["x"]
    assert isinstance(got, np.ndarray)
    np.testing.assert_array_equal(got, np.frombuffer(bytes(range(256)) * 24, np.uint8))
    with pytest.raises(WireError, match="base64") as caught:
        decode_arrays(loads(array_body(LONG[:-4] + "AAAA===")), ["body", "inputs"])
    assert caught.value.loc == ["body", "inputs", "x", "data"]


def test_base64_is_equally_strict_with_or_without_pybase64(monkeypatch):
    from gradpipe.serve import _base64

    texts = ["", "QQ==", "QUI=", "QUJD", "AAAA=", "AAAA====", "QQ=", "Q===", "=QQQ", "QQ==QQ==",
             "QU\nJD", "QUJD\n", " QUJD", "QU-_", "QUJ\x00", "QUJé", "QQ=A", "QR=="]  # fmt: skip

    def outcomes():
        found = []
        for text in texts:
            for given in (text, text.encode(), memoryview(text.encode())):
                try:
                    found.append(_base64.b64decode(given))
                except ValueError:
                    found.append(None)
        return found

    fast = outcomes()
    monkeypatch.setattr(_base64, "pybase64", None)
    assert outcomes() == fast
    assert fast[:12] == [b""] * 3 + [b"A"] * 3 + [b"AB"] * 3 + [b"ABC"] * 3
    assert all(value is None for value in fast[12:-3])
    assert fast[-3:] == [b"A"] * 3  # bits left in the last group are dropped (RFC 4648)


def test_a_client_reading_answers_gets_the_arrays_and_every_other_string_unchanged():
    """What `TesseractRemote` does with an answer: `loads(as_text=False)`, then
    `decode_arrays`, which reads the cut buffers and turns the others back into text."""
    body = json.dumps({
        "y": json.loads(array_body(LONG))["x"],
        "note": {"buffer": LONG, "encoding": "base64"},  # not an array: stays a string
        "ref": {"shape": [6144], "dtype": "uint8", "data": {"buffer": LONG, "encoding": "binref"}},
    }).encode()  # fmt: skip
    document = loads(body, as_text=False)
    got = decode_arrays({k: v for k, v in document.items() if k != "ref"}, [])
    np.testing.assert_array_equal(got["y"], np.frombuffer(bytes(range(256)) * 24, np.uint8))
    assert got["note"] == {"buffer": LONG, "encoding": "base64"}
    assert type(got["note"]["buffer"]) is str
    with pytest.raises(WireError, match="file references"):  # binref reads the text, as before
        decode_arrays(document["ref"], ["ref"])
