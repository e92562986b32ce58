"""Input that once reached a 5xx (or a plain-text error page) now gets a JSON 4xx that
names the offending field; the OpenAPI document is valid and every $ref resolves."""

import json

import httpx
import msgpack
import numpy as np
import pytest
from serve_settings import MAX_JACOBIAN, TOKEN, json_array

from gradpipe.serve import BINARY, JSON, encode

AUTH = {"Authorization": f"Bearer {TOKEN}"}
GOOD = {
    "x": np.arange(4, dtype=np.float32),
    "w": np.float32(2.0),
    "p": {"a": np.ones(4, np.float32)},
}


def good_json(**changes):
    doc = {"x": json_array([0.0, 1.0, 2.0, 3.0]), "w": json_array(2.0),
           "p": {"a": json_array([1.0, 1.0, 1.0, 1.0])}}  # fmt: skip
    return {**doc, **changes}


def post(url, endpoint, content, content_type=JSON):
    return httpx.post(
        f"{url}/{endpoint}", content=content, headers={**AUTH, "Content-Type": content_type}
    )


def assert_error(response, status, path=None):
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    error = response.json()
    assert set(error) == {"error", "message", "path"} and error["message"]
    if path is not None:
        assert error["path"] == path, error
    return error


# -- integers longer than Python reads ---------------------------------------------

LONG = "7" * 5000


def with_long_int(doc):
    """``doc`` as JSON text with every string "LONG" written as a 5000-digit integer."""
    return json.dumps(doc).replace('"LONG"', LONG)


@pytest.mark.parametrize(
    "body, path",
    [
        (with_long_int({"inputs": good_json()}), None),
        (with_long_int({"inputs": good_json(n="LONG")}), "inputs.n"),
        (with_long_int({"inputs": good_json(), "batch_size": "LONG"}), "batch_size"),
        (with_long_int({"inputs": good_json(x=json_array(["LONG", 1, 2, 3]))}), "inputs.x"),
        (
            with_long_int({"inputs": good_json(x={**json_array([1.0]), "shape": ["LONG"]})}),
            "inputs.x",
        ),
    ],
    ids=["control", "static int", "request field", "in a json buffer", "in a shape"],
)
def test_an_integer_of_thousands_of_digits_gets_422_naming_the_field(server_url, body, path):
    response = post(server_url, "apply", body.encode())
    if path is None:
        assert response.status_code == 200, response.text
        return
    error = assert_error(response, 422, path)
    assert "5000 digits" in error["message"] or "shape" in error["message"]


@pytest.mark.parametrize("n", [2**63, 2**64 - 1, -(2**63) - 1])
@pytest.mark.parametrize("content_type", [JSON, BINARY])
def test_a_static_int_outside_int64_gets_422(server_url, n, content_type):
    if content_type == BINARY and n < -(2**63):
        pytest.skip("msgpack has no integer below -2**63")
    body = encode({"inputs": {**GOOD, "n": n}}, content_type)
    assert_error(post(server_url, "apply", body, content_type), 422)


@pytest.mark.parametrize("shape", [[0, 2**62, 2**62], [0, 2**70], [2**40, 2**40], [2**64]], ids=str)
@pytest.mark.parametrize("dtype", ["float32", "float0"])
def test_a_shape_too_large_for_any_array_gets_422(server_url, shape, dtype):
    x = {"object_type": "array", "dtype": dtype, "shape": shape,
         "data": {"buffer": "", "encoding": "base64"}}  # fmt: skip
    body = json.dumps({"inputs": good_json(x=x)}).encode()
    assert_error(post(server_url, "apply", body), 422, "inputs.x")


# -- /abstract_eval ---------------------------------------------------------------


def abstract(x_shape):
    return {"abstract_inputs": {"x": {"shape": x_shape, "dtype": "float32"},
                                "w": {"shape": [], "dtype": "float32"},
                                "p": {"a": {"shape": [4], "dtype": "float32"}}}}  # fmt: skip


@pytest.mark.parametrize("shape", [[-1], [-4], [1.5], [4.0], [True], ["4"], [None], "4", 4])
def test_abstract_eval_refuses_dimensions_that_are_not_non_negative_ints(server_url, shape):
    body = json.dumps(abstract(shape)).encode()
    error = assert_error(post(server_url, "abstract_eval", body), 422, "x")
    assert "non-negative ints" in error["message"]


def test_abstract_eval_takes_good_dimensions(server_url, local):
    body = json.dumps(abstract([4])).encode()
    response = post(server_url, "abstract_eval", body)
    assert response.status_code == 200
    assert response.json()["outputs"]["y"] == {"shape": [4], "dtype": "float32"}
    # and in process, numpy integers are dimensions too
    out = local.abstract_eval(abstract([np.int64(4)])["abstract_inputs"])
    assert out["y"]["shape"] == [4]


def test_abstract_eval_in_process_names_the_input():
    from served_components import component

    from gradpipe.component import ComponentInputError

    with pytest.raises(ComponentInputError, match="non-negative") as info:
        component.abstract_eval(abstract([2.5])["abstract_inputs"])
    assert info.value.path == "x"


# -- Starlette's own errors ---------------------------------------------------------


@pytest.mark.parametrize(
    "method, endpoint, status, kind",
    [
        ("POST", "nope", 404, "not_found"),
        ("GET", "apply/extra", 404, "not_found"),
        ("GET", "apply", 405, "method_not_allowed"),
        ("PUT", "vjp", 405, "method_not_allowed"),
        ("POST", "health", 405, "method_not_allowed"),
        ("DELETE", "openapi.json", 405, "method_not_allowed"),
    ],
)
def test_404_and_405_answer_in_the_documented_json_shape(
    server_url, method, endpoint, status, kind
):
    response = httpx.request(method, f"{server_url}/{endpoint}", headers=AUTH)
    error = assert_error(response, status)
    assert error["error"] == kind and f"/{endpoint}" in error["message"]
    if status == 405:
        assert "Allow" in response.headers


# -- the Jacobian's size, checked before computing -----------------------------------


def jacobian_request(n, jac_inputs=("x",), jac_outputs=("y",)):
    inputs = {"x": np.ones(n, np.float32), "w": np.float32(2), "p": {"a": np.ones(n, np.float32)}}
    doc = {"inputs": inputs, "jac_inputs": list(jac_inputs), "jac_outputs": list(jac_outputs)}
    return encode(doc, BINARY)


def test_a_jacobian_exactly_at_the_limit_is_computed(server_url):
    n = 512  # y(512) by x(512), float32: exactly MAX_JACOBIAN bytes
    assert 4 * n * n == MAX_JACOBIAN
    response = post(server_url, "jacobian", jacobian_request(n), BINARY)
    assert response.status_code == 200, response.text
    block = msgpack.unpackb(response.content)["jacobian"]["y"]["x"]
    assert block["shape"] == [n, n]


@pytest.mark.parametrize(
    "n, jac_inputs, jac_outputs, nbytes",
    [
        (513, ["x"], ["y"], 4 * 513 * 513),
        (400, ["x", "p.a"], ["y"], 2 * 4 * 400 * 400),
        (400, ["x", "p.a", "w"], ["y", "s"], 4 * (400 + 1) * (400 + 400 + 1)),
    ],
)
def test_a_jacobian_over_the_limit_gets_413_with_its_size(
    server_url, n, jac_inputs, jac_outputs, nbytes
):
    assert nbytes > MAX_JACOBIAN
    response = post(server_url, "jacobian", jacobian_request(n, jac_inputs, jac_outputs), BINARY)
    error = assert_error(response, 413)
    assert error["error"] == "jacobian_too_large"
    assert f"holds {nbytes} bytes" in error["message"]
    assert str(MAX_JACOBIAN) in error["message"] and "--max-jacobian-size" in error["message"]


def test_a_jacobian_under_the_limit_with_unknown_paths_still_names_them(server_url):
    response = post(server_url, "jacobian", jacobian_request(600, ["x"], ["nope"]), BINARY)
    assert_error(response, 422, "nope")


def test_the_jacobian_limit_is_a_server_option():
    from served_components import component

    from gradpipe.serve import create_app
    from gradpipe.serve._cli import _parsers

    args = _parsers()["serve"].parse_args(["m:c", "--max-jacobian-size", "2MiB"])
    assert args.max_jacobian_size == 2 * 2**20
    assert "--max-jacobian-size" in _parsers()["serve"].format_help()
    assert create_app(component, max_jacobian_bytes=10).state.server.max_jacobian_bytes == 10
    with pytest.raises(ValueError, match="max_jacobian_bytes"):
        create_app(component, max_jacobian_bytes=0)


# -- the OpenAPI document -------------------------------------------------------------


def test_the_served_openapi_document_is_valid(server_url):
    from openapi_spec_validator import validate

    document = httpx.get(f"{server_url}/openapi.json", headers=AUTH).json()
    validate(document)


@pytest.mark.parametrize("name", ["component", "nested_component"])
def test_openapi_documents_of_nested_models_are_valid_and_refs_resolve(name):
    import served_components
    from openapi_spec_validator import validate

    from gradpipe.serve._schema import openapi_schema

    document = openapi_schema(getattr(served_components, name), max_batch=8)
    validate(document)
    text = json.dumps(document)
    assert "#/$defs/" not in text
    schemas = document["components"]["schemas"]
    for ref in {r.split('"')[0] for r in text.split('"$ref": "')[1:]}:
        assert ref.startswith("#/components/schemas/") and ref.split("/")[-1] in schemas, ref
