"""A gradpipe server answers tesseract-core's REST API: the peer's own client
(``Tesseract.from_url``, tesseract-jax) gets what the component computes in process,
and bad requests get the peer's kind of error (4xx, ``{"detail": ...}``), never 5xx."""

import base64
import json

import httpx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from served_components import component, forward
from tesseract_peers import PeerClient, PeerError, gradpipe_in_thread

TOKEN = "tesseract-test-token"
X = np.linspace(-1.0, 1.0, 6, dtype=np.float32)
INPUTS = {"x": X, "w": np.float32(1.5), "p": {"a": np.full(6, 0.3, np.float32)}, "n": 2}


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return tmp_path_factory.mktemp("tesseract-files")


@pytest.fixture(scope="module")
def url(files):
    with gradpipe_in_thread(component, files=files, max_body_size=1 << 20) as base:
        yield f"{base}/tesseract"


@pytest.fixture(scope="module")
def peer():
    client = PeerClient()
    yield client
    client.close()


def close(got, want):
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("accept", [None, "json", "json+base64", "json+binref"])
def test_apply_equals_in_process(peer, url, files, accept):
    got = peer.call(url, "apply", inputs=INPUTS, accept=accept, files=files)
    want = component.apply(INPUTS)
    assert set(got) == {"y", "s", "k"}
    for name in want:
        close(got[name], want[name])
    assert np.asarray(got["k"]).dtype == np.int32


def test_jacobian_jvp_vjp_equal_in_process(peer, url):
    jac = peer.call(url, "jacobian", inputs=INPUTS, jac_inputs=["x", "p.a"],
                    jac_outputs=["y", "s"])  # fmt: skip
    want = component.jacobian(INPUTS, ["x", "p.a"], ["y", "s"])
    for o in ("y", "s"):
        for i in ("x", "p.a"):
            close(jac[o][i], want[o][i])
    t = {"x": np.ones(6, np.float32), "w": np.float32(0.5)}
    got = peer.call(url, "jacobian_vector_product", inputs=INPUTS, jvp_inputs=["x", "w"],
                    jvp_outputs=["y", "s"], tangent_vector=t)  # fmt: skip
    want = component.jvp(INPUTS, ["x", "w"], ["y", "s"], t)
    close(got["y"], want["y"])
    close(got["s"], want["s"])
    ct = {"y": np.arange(6, dtype=np.float32)}
    got = peer.call(url, "vector_jacobian_product", inputs=INPUTS, vjp_inputs=["x", "w", "p.a"],
                    vjp_outputs=["y"], cotangent_vector=ct)  # fmt: skip
    want = component.vjp(INPUTS, ["x", "w", "p.a"], ["y"], ct)
    assert set(got) == {"x", "w", "p.a"}
    for name in got:
        close(got[name], want[name])


def test_abstract_eval_and_schemas(peer, url):
    shapes = {"x": {"shape": [4], "dtype": "float32"}, "w": {"shape": [], "dtype": "float32"},
              "p": {"a": {"shape": [4], "dtype": "float32"}}, "n": 3}  # fmt: skip
    assert peer.call(url, "abstract_eval", abstract_inputs=shapes) == component.abstract_eval(
        shapes
    )
    assert set(peer.call(url, "endpoints")) >= {
        "apply", "jacobian", "jacobian_vector_product", "vector_jacobian_product",
        "abstract_eval", "health",
    }  # fmt: skip
    schema = peer.call(url, "openapi")["components"]["schemas"]
    assert set(schema["Apply_InputSchema"]["properties"]) == {"x", "w", "p", "n"}
    assert set(schema["Apply_OutputSchema"]["properties"]) == {"y", "s", "k"}
    assert set(schema["ApplyInputSchema"]["differentiable_arrays"]) == {"x", "w", "p.a"}
    assert schema["ApplyOutputSchema"]["differentiable_arrays"]["y"] == {
        "shape": [None],
        "dtype": "float32",
    }
    assert peer.call(url, "health") == {"status": "ok"}


def test_tesseract_jax_value_and_grad_equals_in_process(peer, url):
    ct = np.linspace(0.5, 2.0, 6, dtype=np.float32)
    got = peer.call(url, "jax", kind="grad", inputs=INPUTS, cotangent=ct)

    def loss(d):
        return jnp.vdot(forward({**d, "n": 2})["y"], ct)

    arrays = {"x": jnp.asarray(X), "w": jnp.float32(1.5), "p": {"a": jnp.asarray(INPUTS["p"]["a"])}}
    value, grads = jax.value_and_grad(loss)(arrays)
    close(got["value"], value)
    close(got["grads"]["x"], grads["x"])
    close(got["grads"]["w"], grads["w"])
    close(got["grads"]["p"]["a"], grads["p"]["a"])


def test_residuals_of_apply_serve_the_following_vjp(peer, url):
    inputs = {**INPUTS, "x": X * 0.5}
    before = component.residual_cache.info().hits
    peer.call(url, "apply", inputs=inputs)
    peer.call(url, "vector_jacobian_product", inputs=inputs, vjp_inputs=["x"], vjp_outputs=["y"],
              cotangent_vector={"y": np.ones(6, np.float32)})  # fmt: skip
    assert component.residual_cache.info().hits == before + 1


def test_bad_input_is_the_peers_validation_error(peer, url):
    with pytest.raises(PeerError) as info:
        peer.call(url, "apply", inputs={**INPUTS, "p": {"a": np.ones(6, np.float32)}, "zz": 1})
    assert info.value.kind == "ValidationError" and "zz" in info.value.message
    with pytest.raises(PeerError) as info:
        peer.call(url, "vector_jacobian_product", inputs=INPUTS, vjp_inputs=["x"],
                  vjp_outputs=["y"], cotangent_vector={"y": np.ones(3, np.float32)})  # fmt: skip
    assert info.value.kind == "ValidationError" and "shape" in info.value.message


ARRAY = {"object_type": "array", "shape": [2], "dtype": "float32",
         "data": {"buffer": [1.0, 2.0], "encoding": "json"}}  # fmt: skip
GOOD = {"inputs": {"x": ARRAY, "w": 1.0, "p": {"a": [1.0, 1.0]}}}


@pytest.mark.parametrize(
    ("body", "kind", "loc"),
    [
        (b'{"inputs":', "json_invalid", ["body", 10]),
        (b"[1]", "model_attributes_type", ["body"]),
        (b"{}", "missing", ["body", "inputs"]),
        (json.dumps({**GOOD, "extra": 1}).encode(), "extra_forbidden", ["body", "extra"]),
        (json.dumps({"inputs": {**GOOD["inputs"], "w": "a"}}).encode(), None,
         ["body", "inputs", "w"]),
        (json.dumps({"inputs": {**GOOD["inputs"], "x": {**ARRAY, "dtype": "float8"}}}).encode(),
         "literal_error", ["body", "inputs", "x", "dtype"]),
        (json.dumps({"inputs": {**GOOD["inputs"], "x": {**ARRAY, "data": {
            "buffer": "AAA", "encoding": "base64"}}}}).encode(),
         "array_decode_error", ["body", "inputs", "x", "data"]),
        (json.dumps({"inputs": {**GOOD["inputs"], "x": {**ARRAY, "data": {
            "buffer": "../../etc/passwd", "encoding": "binref"}}}}).encode(),
         "array_decode_error", ["body", "inputs", "x", "data"]),
        (json.dumps({"inputs": {**GOOD["inputs"], "p": {"a": [1.0, 1.0, 1.0]}}}).encode(),
         None, ["body", "inputs"]),
    ],
)  # fmt: skip
def test_bad_bodies_get_422_with_the_peers_detail(url, body, kind, loc):
    response = httpx.post(
        f"{url}/apply", content=body, headers={"Content-Type": "application/json"}
    )
    assert response.status_code == 422, response.text
    (detail,) = response.json()["detail"]
    assert set(detail) == {"type", "loc", "msg", "input"} and detail["msg"]
    assert detail["loc"][: len(loc)] == loc
    if kind is not None:
        assert detail["type"] == kind


def test_other_errors_get_the_peers_status_and_detail(url):
    post = lambda path, **kw: httpx.post(f"{url}/{path}", **kw)
    body = json.dumps(GOOD).encode()
    response = post("apply", content=body, headers={"Accept": "application/xml"})
    assert response.status_code == 406
    assert response.json()["detail"]["available_formats"] == ["json", "json+base64", "json+binref"]
    assert post("nowhere", content=body).json() == {"detail": "Not Found"}
    response = httpx.get(f"{url}/apply")
    assert response.status_code == 405 and response.json() == {"detail": "Method Not Allowed"}
    response = post("apply", content=b"[" * (2 << 20))
    assert response.status_code == 413 and isinstance(response.json()["detail"], str)
    vjp = {**GOOD, "vjp_inputs": ["x"], "vjp_outputs": ["y"], "cotangent_vector": {"y": [1, 1]}}
    response = post("vector_jacobian_product", content=json.dumps(vjp).encode())
    assert response.status_code == 200
    vjp["vjp_inputs"] = ["x..y"]
    response = post("vector_jacobian_product", content=json.dumps(vjp).encode())
    assert response.status_code == 422 and response.json()["detail"][0]["loc"][:2] == [
        "body", "vjp_inputs"]  # fmt: skip


def test_long_base64_strings_anywhere_in_a_body_are_read_as_json_reads_them(url):
    """Long base64 buffers skip the JSON parser; one that is not an array's (or not
    strict base64, or of the wrong size) still gets the same answer as any other."""
    post = lambda path, body: httpx.post(f"{url}/{path}", content=json.dumps(body).encode())
    text = base64.b64encode(np.arange(2048, dtype=np.float32).tobytes()).decode()
    loose = {"buffer": text, "encoding": "base64"}
    response = post("apply", {**GOOD, "extra": loose})
    assert response.status_code == 422
    assert response.json()["detail"][0]["input"] == loose  # echoed as the text it was
    vjp = {**GOOD, "vjp_inputs": [loose], "vjp_outputs": ["y"], "cotangent_vector": {"y": [1, 1]}}
    response = post("vector_jacobian_product", vjp)
    assert response.status_code == 422 and response.json()["detail"][0]["input"] == loose
    for buffer, needs in ((text, "needs 8 bytes"), (text[:-4] + "AA=A", "base64 encoding")):
        array = {**ARRAY, "data": {"buffer": buffer, "encoding": "base64"}}
        response = post("apply", {"inputs": {**GOOD["inputs"], "x": array}})
        assert response.status_code == 422 and needs in response.json()["detail"][0]["msg"]
    array = {"shape": [2048], "dtype": "float32", "data": loose}
    x = np.arange(2048, dtype=np.float32)
    response = post("apply", {"inputs": {**GOOD["inputs"], "x": array, "p": {"a": x.tolist()}}})
    assert response.status_code == 200, response.text
    want = forward({**INPUTS, "x": x, "w": 1.0, "p": {"a": x}, "n": 0})["y"]
    got = np.frombuffer(base64.b64decode(response.json()["y"]["data"]["buffer"]), np.float32)
    close(got, want)


def test_the_token_and_the_counters_are_the_servers():
    with gradpipe_in_thread(component, token=TOKEN) as base:
        body = json.dumps(GOOD).encode()
        response = httpx.post(f"{base}/tesseract/apply", content=body)
        assert response.status_code == 401 and isinstance(response.json()["detail"], str)
        assert httpx.get(f"{base}/tesseract/health").json() == {"status": "ok"}
        auth = {"Authorization": f"Bearer {TOKEN}"}
        response = httpx.post(f"{base}/tesseract/apply", content=body, headers=auth)
        assert response.status_code == 200
        assert response.headers["content-type"] == "application/json+base64"
        counts = httpx.get(f"{base}/stats", headers=auth).json()["requests"]
        assert counts["tesseract/apply"] == 1 and counts["tesseract/apply:401"] == 1
