"""The edges of each request check: the value exactly at a limit passes, one past it is
refused with the documented status, and every loosened check shows (these tests pin
what tools/mutants/serve.toml mutates)."""

import base64
import json

import httpx
import msgpack
import numpy as np
import pydantic
import pytest
from serve_settings import MAX_BODY, TOKEN

from gradpipe.serve import BINARY, JSON, PayloadError, decode, encode
from gradpipe.serve._msgpack import MAX_DEPTH, unpack

AUTH = {"Authorization": f"Bearer {TOKEN}"}


def frame(dtype, shape, buffer, encoding="base64", **extra):
    return {"object_type": "array", "dtype": dtype, "shape": shape,
            "data": {"buffer": buffer, "encoding": encoding}, **extra}  # fmt: skip


def decode_json(doc):
    return decode(json.dumps(doc).encode(), JSON)


# -- array frames ------------------------------------------------------------------


@pytest.mark.parametrize("extra", [0, 1, 4])
def test_a_buffer_of_any_other_length_than_the_shape_needs_is_refused(extra):
    raw = np.arange(3, dtype=np.float32).tobytes() + b"\0" * extra
    doc = {"x": frame("float32", [3], base64.b64encode(raw).decode())}
    if extra == 0:
        assert decode_json(doc)["x"].tolist() == [0.0, 1.0, 2.0]
        return
    with pytest.raises(PayloadError, match="needs 12 bytes") as info:
        decode_json(doc)
    assert info.value.path == "x"


def test_rank_32_is_read_and_rank_33_refused():
    ok = decode_json({"x": frame("uint8", [1] * 32, "AA==")})["x"]
    assert ok.shape == (1,) * 32
    with pytest.raises(PayloadError, match="shape"):
        decode_json({"x": frame("uint8", [1] * 33, "AA==")})


@pytest.mark.parametrize("shape", [[True], [-1], [2, -1], [1.0], ["1"]])
def test_dimensions_must_be_non_negative_ints(shape):
    with pytest.raises(PayloadError, match="non-negative ints") as info:
        decode_json({"x": frame("uint8", shape, "AA==")})
    assert info.value.path == "x"


@pytest.mark.parametrize("text", ["AAA!A", "AA AA", "AA\nAA"])
def test_base64_is_read_strictly(text):
    with pytest.raises(PayloadError, match="base64"):
        decode_json({"x": frame("uint8", [3], text)})


def test_unknown_fields_of_an_array_frame_are_refused():
    with pytest.raises(PayloadError, match="unknown array fields") as info:
        decode_json({"inputs": {"x": frame("uint8", [1], "AA==", strides=[1])}})
    assert info.value.path == "inputs.x"


def test_an_integer_of_exactly_the_digit_limit_is_read():
    import sys

    limit = sys.get_int_max_str_digits()
    at_limit, over = "9" * limit, "9" * (limit + 1)
    body = f'{{"inputs": {{"n": {at_limit}}}, "batch_size": {over}}}'.encode()
    with pytest.raises(PayloadError, match=f"{limit + 1} digits") as info:
        decode(body, JSON)
    assert info.value.path == "batch_size"
    assert decode(f'{{"n": {at_limit}}}'.encode(), JSON)["n"] == int(at_limit)


# -- the msgpack reader -------------------------------------------------------------


def test_msgpack_short_by_one_byte_is_truncated():
    body = msgpack.packb({"a": b"xyz"})
    assert unpack(body)["a"] == b"xyz"
    with pytest.raises(ValueError, match="truncated"):
        unpack(body[:-1])
    with pytest.raises(PayloadError, match="truncated"):
        decode(body[:-1], BINARY)


def test_msgpack_nesting_up_to_the_limit_is_read_and_one_more_refused():
    assert unpack(b"\x91" * MAX_DEPTH + b"\x01") is not None
    with pytest.raises(ValueError, match="nested deeper"):
        unpack(b"\x91" * (MAX_DEPTH + 1) + b"\x01")


@pytest.mark.parametrize("trailing", [b"\x00", b"\xc0\xc0"])
def test_bytes_after_the_msgpack_document_are_refused(trailing):
    with pytest.raises(ValueError, match="follow the document"):
        unpack(msgpack.packb({"a": 1}) + trailing)


# -- body size, over HTTP ------------------------------------------------------------


def post(url, endpoint, content, headers=None):
    return httpx.post(
        f"{url}/{endpoint}",
        content=content,
        headers={**AUTH, "Content-Type": BINARY, **(headers or {})},
    )


@pytest.mark.parametrize("size, status", [(MAX_BODY, 422), (MAX_BODY + 1, 413)])
def test_a_body_of_exactly_max_body_size_is_read(server_url, size, status):
    assert post(server_url, "apply", b"\xc1" * size).status_code == status


@pytest.mark.parametrize("size, status", [(MAX_BODY, 422), (MAX_BODY + 1, 413)])
def test_a_chunked_body_of_exactly_max_body_size_is_read(server_url, size, status):
    def chunks():  # no Content-Length: the server counts while it reads
        for start in range(0, size, 65536):
            yield b"\xc1" * min(65536, size - start)

    assert post(server_url, "apply", chunks()).status_code == status


@pytest.mark.parametrize("content_type", ["application/vnd.api+json", "Application/JSON; q=1"])
def test_json_content_types_are_read_as_json(server_url, content_type):
    inputs = {"x": np.ones(2, np.float32), "w": np.float32(1), "p": {"a": np.ones(2, np.float32)}}
    response = post(
        server_url, "apply", encode({"inputs": inputs}, JSON), {"Content-Type": content_type}
    )
    assert response.status_code == 200, response.text


def test_a_401_carries_the_bearer_challenge(server_url):
    response = httpx.post(f"{server_url}/apply", content=b"{}", headers={"Content-Type": JSON})
    assert response.status_code == 401
    assert response.headers["WWW-Authenticate"] == "Bearer"


def test_vjp_needs_inputs_or_a_handle(server_url):
    doc = {"vjp_inputs": ["x"], "vjp_outputs": ["y"], "cotangents": {}}
    response = post(server_url, "vjp", encode(doc, BINARY))
    assert response.status_code == 422 and response.json()["path"] == "handle"


# -- batching limits, in process -----------------------------------------------------


@pytest.fixture(scope="module")
def small_batch_client(local):
    from starlette.testclient import TestClient

    from gradpipe.serve import create_app

    return TestClient(create_app(local, max_batch=2))


def batched(batch_size, rows=2):
    inputs = {"x": np.ones((rows, 3), np.float32), "w": np.float32(1),
              "p": {"a": np.ones(3, np.float32)}}  # fmt: skip
    return encode({"inputs": inputs, "batch_size": batch_size, "batched_paths": ["x"]}, BINARY)


@pytest.mark.parametrize("size, status", [(2, 200), (3, 422), (0, 422), (True, 422), (2.0, 422)])
def test_batch_size_up_to_max_batch_and_only_ints(small_batch_client, size, status):
    rows = size if type(size) is int and size > 0 else 2
    response = small_batch_client.post(
        "/apply", content=batched(size, rows), headers={"Content-Type": BINARY}
    )
    assert response.status_code == status, response.text
    if status == 422:
        assert response.json()["path"] == "batch_size"


# -- the handle store and the Jacobian's size ------------------------------------------


def test_residuals_of_exactly_the_byte_limit_are_kept():
    from gradpipe.serve import HandleStore

    store = HandleStore(max_entries=4, max_bytes=100)
    assert store.put("exactly", nbytes=100) is not None
    assert store.put("too big", nbytes=101) is None
    assert store.nbytes == 100


def test_the_jacobian_size_counts_the_wider_dtype_of_each_block():
    from gradpipe.component import Array, Component, Differentiable
    from gradpipe.serve._jacobian_size import jacobian_nbytes

    class In(pydantic.BaseModel):
        x: Differentiable[Array[np.float32, (None,)]]

    class Out(pydantic.BaseModel):
        y: Differentiable[Array[np.float16, (None,)]]
        z: Differentiable[Array[np.float32, ()]]

    def f(d):
        return {"y": d["x"].astype(np.float16)[:2], "z": d["x"].sum()}

    component = Component(f, inputs=In, outputs=Out)
    inputs = {"x": np.ones(5, np.float32)}
    assert jacobian_nbytes(component, inputs, ["x"], ["y"]) == 2 * 5 * 4
    assert jacobian_nbytes(component, inputs, ["x"], ["y", "z"]) == (2 * 5 + 5) * 4
    assert jacobian_nbytes(component, inputs, ["x", "nope"], ["y", "[bad"]) == 2 * 5 * 4
