"""Every endpoint over real HTTP, in both encodings, against the local component."""

import httpx
import numpy as np
import pytest
from serve_settings import TOKEN, json_array

from gradpipe.serve import BINARY, JSON, RemoteComponent, decode, encode

RNG = np.random.default_rng(0)
INPUTS = {
    "x": RNG.normal(size=5).astype(np.float32),
    "w": np.float32(0.7),
    "p": {"a": RNG.normal(size=5).astype(np.float32)},
    "n": 2,
}
COT = {"y": RNG.normal(size=5).astype(np.float32), "s": np.float32(1.3)}
TAN = {"x": RNG.normal(size=5).astype(np.float32), "p.a": RNG.normal(size=5).astype(np.float32)}


def close(a, b):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6, atol=1e-6)


@pytest.fixture(scope="module", params=["binary", "json"])
def client(request, server_url):
    remote = RemoteComponent(server_url, token=TOKEN, encoding=request.param)
    yield remote
    remote.close()


def test_apply(client, local):
    got, want = client.apply(INPUTS), local.apply(INPUTS)
    assert set(got) == {"y", "s", "k"}
    for key in want:
        close(got[key], want[key])
    assert got["k"].dtype == np.int32


def test_apply_keep_then_vjp_by_handle(client, local):
    outputs, handle = client.apply_keep(INPUTS)
    assert isinstance(handle, str) and len(handle) == 32
    close(outputs["y"], local.apply(INPUTS)["y"])
    got = client.vjp(None, ["x", "w", "p.a"], ["y", "s"], COT, handle=handle)
    want = local.vjp(INPUTS, ["x", "w", "p.a"], ["y", "s"], COT)
    for key in want:
        close(got[key], want[key])


def test_vjp_from_inputs(client, local):
    got = client.vjp(INPUTS, ["x"], ["y"], {"y": COT["y"]})
    close(got["x"], local.vjp(INPUTS, ["x"], ["y"], {"y": COT["y"]})["x"])


def test_jvp(client, local):
    got = client.jvp(INPUTS, ["x", "p.a"], ["y", "s"], TAN)
    want = local.jvp(INPUTS, ["x", "p.a"], ["y", "s"], TAN)
    for key in want:
        close(got[key], want[key])


def test_jacobian(client, local):
    got = client.jacobian(INPUTS, ["x", "w"], ["y", "s"])
    want = local.jacobian(INPUTS, ["x", "w"], ["y", "s"])
    for out in want:
        for inp in want[out]:
            close(got[out][inp], want[out][inp])
    assert got["y"]["x"].shape == (5, 5)


def test_abstract_eval(client):
    abstract = {
        "x": {"shape": [7], "dtype": "float32"},
        "w": {"shape": [], "dtype": "float32"},
        "p": {"a": {"shape": [7], "dtype": "float32"}},
        "n": 3,
    }
    out = client.abstract_eval(abstract)
    assert out["y"] == {"shape": [7], "dtype": "float32"}
    assert out["k"] == {"shape": [], "dtype": "int32"}


def test_health_and_schema(client):
    assert client.health() == {"status": "ok"}
    schema = client.schema
    assert schema["openapi"].startswith("3.")
    assert {"/apply", "/jacobian", "/jvp", "/vjp", "/abstract_eval"} <= set(schema["paths"])
    ext = schema["x-gradpipe"]
    assert set(ext["differentiable_inputs"]) == {"x", "w", "p.a"}
    assert set(ext["differentiable_outputs"]) == {"y", "s"}
    assert "n" in [s["path"] for s in ext["inputs"]]
    assert "x" in schema["components"]["schemas"]["Inputs"]["properties"]


@pytest.mark.parametrize("request_type", [BINARY, JSON])
@pytest.mark.parametrize("accept", [BINARY, JSON, None])
def test_content_negotiation(server_url, local, request_type, accept):
    headers = {"Content-Type": request_type, "Authorization": f"Bearer {TOKEN}"}
    if accept:
        headers["Accept"] = accept
    body = encode({"inputs": INPUTS}, request_type)
    response = httpx.post(f"{server_url}/apply", content=body, headers=headers)
    assert response.status_code == 200
    answer_type = accept or request_type
    assert response.headers["content-type"].startswith(answer_type)
    close(decode(response.content, answer_type)["outputs"]["y"], local.apply(INPUTS)["y"])


def test_json_nested_lists_accepted(server_url, local):
    """A hand-written JSON request may give arrays as nested lists."""
    body = {"inputs": {"x": json_array([0.5, 1.5]), "w": json_array(2.0),
                       "p": {"a": json_array([1.0, 1.0])}}}  # fmt: skip
    headers = {"Authorization": f"Bearer {TOKEN}"}
    response = httpx.post(f"{server_url}/apply", json=body, headers=headers)
    assert response.status_code == 200, response.text
    want = local.apply({"x": [0.5, 1.5], "w": 2.0, "p": {"a": [1.0, 1.0]}})
    close(decode(response.content, JSON)["outputs"]["y"], want["y"])
