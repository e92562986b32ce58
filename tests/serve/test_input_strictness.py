"""Over HTTP, input the caller did not mean is answered 422 naming the field, as in
process: unknown input fields (top level and nested, with models that keep
pydantic's default), values a cast would change (in array frames, JSON number
buffers, cotangents), and static values pydantic would coerce. The server keeps
answering afterwards."""

import httpx
import numpy as np
import pytest
from serve_settings import TOKEN, json_array

from gradpipe.serve import BINARY, JSON, decode, encode

AUTH = {"Authorization": f"Bearer {TOKEN}"}
GOOD = {
    "x": np.arange(4, dtype=np.float32),
    "w": np.float32(2.0),
    "p": {"a": np.ones(4, np.float32)},
}


def post(url, endpoint, document, content_type=BINARY):
    body = encode(document, content_type)
    headers = {**AUTH, "Content-Type": content_type}
    return httpx.post(f"{url}/{endpoint}", content=body, headers=headers, timeout=60)


NESTED = {
    "bands": {"red": np.ones(3, np.float32)},
    "layers": [{"w": np.ones(2, np.float32)}],
    "label": "ab",
}


@pytest.mark.parametrize("content_type", [BINARY, JSON])
@pytest.mark.parametrize(
    "inputs, path",
    [
        ({**NESTED, "lable": "abc"}, "lable"),
        ({**NESTED, "layers": [{"w": np.ones(2, np.float32), "ww": 1.0}]}, "layers[0].ww"),
    ],
)
def test_unknown_input_fields_are_422_naming_them(nested_url, inputs, path, content_type):
    response = post(nested_url, "apply", {"inputs": inputs}, content_type)
    assert response.status_code == 422, response.text
    assert response.json()["path"] == path
    assert "not a field" in response.json()["message"]
    assert post(nested_url, "apply", {"inputs": NESTED}, content_type).status_code == 200


def refused_inputs():
    yield "float64 beyond float32", {**GOOD, "x": np.array([1e40, 0, 0, 0])}, "x"
    yield "complex for real", {**GOOD, "x": np.ones(4, np.complex64)}, "x"
    yield "bools for floats", {**GOOD, "x": np.ones(4, np.bool_)}, "x"
    yield "bool mixed in a list", {**GOOD, "x": [1.0, True, 0.0, 2.0]}, "x"
    yield "strings for floats", {**GOOD, "x": ["1", "2", "3", "4"]}, "x"
    yield "str for a static int", {**GOOD, "n": "2"}, "n"
    yield "float for a static int", {**GOOD, "n": 2.0}, "n"
    yield "bool for a static int", {**GOOD, "n": True}, "n"
    yield "json buffer beyond float32", {**GOOD, "x": json_array([1e40, 0.0, 0.0, 0.0])}, "x"


@pytest.mark.parametrize("content_type", [BINARY, JSON])
@pytest.mark.parametrize("name, inputs, path", list(refused_inputs()))
def test_values_a_cast_would_change_are_422_naming_the_field(
    server_url, name, inputs, path, content_type
):
    response = post(server_url, "apply", {"inputs": inputs}, content_type)
    assert response.status_code == 422, response.text
    assert response.json()["path"].endswith(path), response.json()
    assert post(server_url, "apply", {"inputs": GOOD}, content_type).status_code == 200


@pytest.mark.parametrize(
    "buffer, dtype",
    [([1.5, 0, 0, 0], "int32"), ([300, 0, 0, 0], "int8"), (["1.5", "0", "0", "0"], "float32"),
     ([True, 1.0, 0.0, 0.0], "float32"), ([-1, 0, 0, 0], "uint8")],
)  # fmt: skip
def test_json_number_buffers_must_fit_their_declared_dtype(server_url, buffer, dtype):
    frame = json_array(buffer, dtype)
    response = post(server_url, "apply", {"inputs": {**GOOD, "x": frame}}, JSON)
    assert response.status_code == 422, response.text
    assert response.json()["path"] == "inputs.x"


def test_accepted_casts_answer_as_the_cast_values(server_url, local):
    inputs = {**GOOD, "x": np.array([0.1, 1e-50, 3.0, 16777217], np.float64), "n": 2}
    response = post(server_url, "apply", {"inputs": inputs}, JSON)
    assert response.status_code == 200, response.text
    expected = local.apply({**inputs, "x": inputs["x"].astype(np.float32)})
    got = decode(response.content, JSON)["outputs"]
    assert got["y"].dtype == np.float32
    np.testing.assert_array_equal(got["y"], expected["y"])


def test_a_cotangent_a_cast_would_change_is_422(server_url):
    document = {
        "inputs": GOOD,
        "vjp_inputs": ["x"],
        "vjp_outputs": ["y"],
        "cotangents": {"y": np.array([1e40, 1.0, 1.0, 1.0])},
    }
    response = post(server_url, "vjp", document)
    assert response.status_code == 422, response.text
    assert response.json()["path"] == "y"
    assert "beyond the range" in response.json()["message"]
