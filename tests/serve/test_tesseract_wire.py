"""The tesseract mount reads an array only when its buffer agrees with its ``shape``
and ``dtype``, in every encoding, and answers any other with the peer's 422: one
disagreeing array taken as it comes would be computed on (200) with the wrong shape
or wrapped values. The peer's own runtime gets the same requests to show that 422 is
its answer too."""

import base64
import json

import httpx
import numpy as np
import pytest
from served_components import component
from tesseract_peers import gradpipe_in_thread, peer_runtime


def _array(shape, dtype, buffer, encoding="json"):
    return {"object_type": "array", "shape": shape, "dtype": dtype,
            "data": {"buffer": buffer, "encoding": encoding}}  # fmt: skip


def _base64(values, dtype):
    return base64.b64encode(np.asarray(values, dtype).tobytes()).decode()


# name -> (x, the length x would have if read as it comes). The request's ``p.a`` gets
# that length too, so a server that skipped a check would compute with the wrong x.
BAD = {
    # json: nested lists that disagree with the shape
    "json longer than its shape": (_array([2], "float32", [1.0, 2.0, 3.0]), 3),
    "json shorter than its shape": (_array([2], "float32", [1.0]), 1),
    "json scalar for a vector shape": (_array([2], "float32", 1.0), 1),
    "json rows where the shape has none": (_array([2], "float32", [[1.0, 2.0], [3.0, 4.0]]), 2),
    "json ragged rows": (_array([2, 2], "float32", [[1.0, 2.0], [3.0]]), 2),
    "json ragged depth": (_array([2], "float32", [1.0, [2.0]]), 2),
    # json: numbers the declared dtype cannot hold
    "json fractions as int32": (_array([2], "int32", [1.5, 2.0]), 2),
    "json 300 as int8": (_array([2], "int8", [300, 2]), 2),
    "json -1 as uint8": (_array([2], "uint8", [-1, 1]), 2),
    "json 1e39 as float32": (_array([2], "float32", [1e39, 1.0]), 2),
    # base64 and binref: a byte length that is not shape * itemsize
    "base64 too short": (_array([2], "float32", _base64([1], "<f4"), "base64"), 1),
    "base64 too long": (_array([2], "float32", _base64([1, 2, 3], "<f4"), "base64"), 3),
    "base64 not whole items": (
        _array([2], "float32", base64.b64encode(b"\0" * 7).decode(), "base64"),
        2,
    ),
    "base64 float64 bytes as float32": (
        _array([2], "float32", _base64([1, 2], "<f8"), "base64"),
        4,
    ),
    "base64 float32 bytes as float64": (
        _array([2], "float64", _base64([1, 2], "<f4"), "base64"),
        1,
    ),
    "binref file too short": (_array([2], "float32", "one.bin", "binref"), 1),
    "binref offset past the end": (_array([2], "float32", "two.bin:4", "binref"), 1),
}


# Buffers that hold exactly the shape's values, nested otherwise or of another dtype
# that the field casts from: read in the declared shape, as the peer reads them.
GOOD = [
    _array([2], "float32", [[1.0], [2.0]]),
    _array([2], "float32", [[1.0, 2.0]]),
    _array([2], "float64", _base64([1, 2], "<f8"), "base64"),
    _array([2], "float32", "two.bin", "binref"),
]


def _write_files(directory):
    (directory / "one.bin").write_bytes(np.float32([1.0]).tobytes())
    (directory / "two.bin").write_bytes(np.float32([1.0, 2.0]).tobytes())
    return directory


def _apply(base, x, n):
    body = {"inputs": {"x": x, "w": 1.0, "p": {"a": [1.0] * n}}}
    return httpx.post(f"{base}/apply", content=json.dumps(body).encode(),
                      headers={"Content-Type": "application/json"}, timeout=60)  # fmt: skip


@pytest.fixture(scope="module")
def url(tmp_path_factory):
    files = _write_files(tmp_path_factory.mktemp("tesseract-wire"))
    with gradpipe_in_thread(component, files=files) as base:
        yield f"{base}/tesseract"


@pytest.fixture(scope="module")
def runtime_url(tmp_path_factory):
    with peer_runtime(_write_files(tmp_path_factory.mktemp("tesseract-wire-peer"))) as url:
        yield url


@pytest.mark.parametrize("case", list(BAD))
def test_an_array_that_disagrees_with_its_shape_or_dtype_gets_422(url, case):
    x, n = BAD[case]
    response = _apply(url, x, n)
    assert response.status_code == 422, response.text
    (detail,) = response.json()["detail"]
    assert detail["type"] == "array_decode_error", detail
    assert detail["loc"] == ["body", "inputs", "x", "data"]


def test_the_peer_answers_the_same_arrays_alike(runtime_url):
    answers = {case: _apply(runtime_url, x, n) for case, (x, n) in BAD.items()}
    assert {case: r.status_code for case, r in answers.items()} == dict.fromkeys(BAD, 422)
    for response in answers.values():
        assert response.json()["detail"][0]["loc"][:3] == ["body", "inputs", "x"]
    assert [_apply(runtime_url, x, 2).status_code for x in GOOD] == [200] * len(GOOD)


@pytest.mark.parametrize("x", GOOD)
def test_a_buffer_of_the_shapes_size_is_read_in_that_shape(url, x):
    # as the peer does: the values in order, in the declared shape
    response = _apply(url, x, 2)
    assert response.status_code == 200, response.text
    flat = _apply(url, _array([2], "float32", [1.0, 2.0]), 2)
    assert response.json() == flat.json()
