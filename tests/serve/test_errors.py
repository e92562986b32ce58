"""The bad-input matrix: each bad request gets the right 4xx, and the server keeps serving."""

import httpx
import msgpack
import numpy as np
import pytest
from serve_settings import MAX_BODY, TOKEN

from gradpipe.serve import BINARY, JSON, encode

GOOD = {
    "x": np.arange(4, dtype=np.float32),
    "w": np.float32(2.0),
    "p": {"a": np.ones(4, np.float32)},
}
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def post(url, endpoint, body, content_type=BINARY, headers=AUTH):
    return httpx.post(
        f"{url}/{endpoint}", content=body, headers={**headers, "Content-Type": content_type}
    )


def raw_array(dtype, shape, data: bytes):
    return {"object_type": "array", "dtype": dtype, "shape": shape,
            "data": {"buffer": data, "encoding": "raw"}}  # fmt: skip


def hand_made(x_array):
    """A msgpack body whose input ``x`` is a hand-written array frame."""
    inputs = msgpack.unpackb(encode(GOOD, BINARY))
    return msgpack.packb({"inputs": {**inputs, "x": x_array}})


def bad_requests():
    good = encode({"inputs": GOOD}, BINARY)
    big = np.zeros(MAX_BODY // 4 + 16, np.float32)
    yield "truncated msgpack", "apply", good[: len(good) // 2], BINARY, AUTH, 422, None
    yield "truncated json", "apply", encode({"inputs": GOOD}, JSON)[:-7], JSON, AUTH, 422, None
    yield "not msgpack", "apply", b"\xc1\xc1\xc1", BINARY, AUTH, 422, None
    yield ("wrong dtype", "apply",
           encode({"inputs": {**GOOD, "x": np.arange(4, dtype=np.complex64)}}, BINARY),
           BINARY, AUTH, 422, "x")  # fmt: skip
    yield ("unknown dtype", "apply",
           hand_made(raw_array("object", [1], b"\0" * 8)),
           BINARY, AUTH, 422, "inputs.x")  # fmt: skip
    yield ("wrong shape", "apply",
           encode({"inputs": {**GOOD, "x": np.zeros((2, 2), np.float32)}}, BINARY),
           BINARY, AUTH, 422, "x")  # fmt: skip
    yield ("unknown input field", "apply",
           encode({"inputs": {**GOOD, "zzz": np.float32(1)}}, BINARY),
           BINARY, AUTH, 422, "zzz")  # fmt: skip
    yield (
        "unknown request field",
        "apply",
        encode({"inputs": GOOD, "inputz": 1}, BINARY),
        BINARY,
        AUTH,
        422,
        "inputz",
    )
    yield ("unknown path", "vjp",
           encode({"inputs": GOOD, "vjp_inputs": ["nope"], "vjp_outputs": ["y"],
                   "cotangents": {"y": np.ones(4, np.float32)}}, BINARY),
           BINARY, AUTH, 422, "nope")  # fmt: skip
    yield ("non-differentiable path", "vjp",
           encode({"inputs": GOOD, "vjp_inputs": ["x"], "vjp_outputs": ["k"],
                   "cotangents": {"k": np.ones((), np.float32)}}, BINARY),
           BINARY, AUTH, 422, "k")  # fmt: skip
    yield ("cotangent of wrong shape", "vjp",
           encode({"inputs": GOOD, "vjp_inputs": ["x"], "vjp_outputs": ["y"],
                   "cotangents": {"y": np.ones(3, np.float32)}}, BINARY),
           BINARY, AUTH, 422, "y")  # fmt: skip
    yield ("declared size larger than body", "apply",
           hand_made(raw_array("float32", [1000], b"\0" * 16)),
           BINARY, AUTH, 422, "inputs.x")  # fmt: skip
    yield ("oversize body", "apply", encode({"inputs": {**GOOD, "x": big}}, BINARY),
           BINARY, AUTH, 413, None)  # fmt: skip
    yield "missing token", "apply", good, BINARY, {}, 401, None
    yield "wrong token", "apply", good, BINARY, {"Authorization": "Bearer nope"}, 401, None
    yield ("unknown handle", "vjp",
           encode({"handle": "ab" * 16, "vjp_inputs": ["x"], "vjp_outputs": ["y"],
                   "cotangents": {"y": np.ones(4, np.float32)}}, BINARY),
           BINARY, AUTH, 410, "handle")  # fmt: skip
    yield "unsupported content type", "apply", good, "text/plain", AUTH, 415, None
    yield "body is a list", "apply", encode([1, 2], JSON), JSON, AUTH, 422, None
    yield "ext type", "apply", b"\x81\xa6inputs\xd4\x05\x00", BINARY, AUTH, 422, None


CASES = list(bad_requests())


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_bad_request_then_good_request(server_url, case):
    _, endpoint, body, content_type, headers, status, path = case
    response = post(server_url, endpoint, body, content_type, headers)
    assert response.status_code == status, response.text
    error = response.json()
    assert error["message"]
    if path is not None:
        assert error["path"] is not None and path in error["path"], error
    good = post(server_url, "apply", encode({"inputs": GOOD}, BINARY))
    assert good.status_code == 200


def test_oversize_declared_length_is_refused_before_reading(server_url):
    # The Content-Length alone decides: the server answers 413 without the body.
    response = post(server_url, "apply", b"\0" * (MAX_BODY + 1))
    assert response.status_code == 413


def test_health_needs_no_token_but_stats_does(server_url):
    assert httpx.get(f"{server_url}/health").status_code == 200
    assert httpx.get(f"{server_url}/stats").status_code == 401
    assert httpx.get(f"{server_url}/openapi.json").status_code == 401


def test_remote_error_names_the_path(remote):
    from gradpipe.serve import RemoteError

    with pytest.raises(RemoteError, match="x") as info:
        remote.apply({**GOOD, "x": np.zeros((2, 2), np.float32)})
    assert info.value.status == 422 and info.value.path == "x"


def test_fuzzed_requests_never_give_a_server_error(server_url):
    """Random mixes of wrong values in every request field: always 4xx or 200, never 5xx."""
    rng = np.random.default_rng(3)
    arr = np.ones(3, np.float32)
    values = [
        None, 1, -1, 2.5, "x", True, [], {}, [1, 2], {"x": 1}, arr, np.zeros((2, 2), np.int8),
        {"shape": [3], "dtype": "float32"}, {"shape": "abc", "dtype": "float32"},
        {"shape": [-1], "dtype": "float32"}, {"shape": [3], "dtype": "nope"},
        {**GOOD, "n": "str"}, {**GOOD, "p": None}, {**GOOD, "p": {"a": None}},
        ["x", 1], ["p.a", "zz[", "x[0]"], "0" * 32, {"y": arr}, {"y": None}, {"x": "abc"},
        {"": arr}, {"y": np.ones(2, np.float64)},
    ]  # fmt: skip
    fields = ["inputs", "abstract_inputs", "jac_inputs", "jac_outputs", "jvp_inputs",
              "jvp_outputs", "tangents", "vjp_inputs", "vjp_outputs", "cotangents", "handle",
              "keep_residuals", "batch_size", "batched_paths"]  # fmt: skip
    endpoints = ["apply", "jacobian", "jvp", "vjp", "abstract_eval"]
    with httpx.Client(base_url=server_url, headers=AUTH) as client:
        for _ in range(150):
            chosen = rng.choice(fields, size=rng.integers(1, 5), replace=False)
            doc = {str(f): values[rng.integers(len(values))] for f in chosen}
            if rng.random() < 0.5:
                doc["inputs"] = GOOD
            content_type = (BINARY, JSON)[rng.integers(2)]
            endpoint = endpoints[rng.integers(len(endpoints))]
            response = client.post(
                f"/{endpoint}",
                content=encode(doc, content_type),
                headers={"Content-Type": content_type},
            )
            assert response.status_code < 500, (endpoint, doc, response.text)


def test_a_client_that_hangs_up_mid_body_does_not_hurt_the_server(server_url):
    import socket
    from urllib.parse import urlparse

    where = urlparse(server_url)
    with socket.create_connection((where.hostname, where.port), timeout=10) as sock:
        sock.sendall(
            b"POST /apply HTTP/1.1\r\nHost: x\r\nContent-Type: " + BINARY.encode()
            + b"\r\nAuthorization: Bearer " + TOKEN.encode()
            + b"\r\nContent-Length: 100000\r\n\r\n" + b"\x81\xa6inputs"
        )  # fmt: skip
    good = post(server_url, "apply", encode({"inputs": GOOD}, BINARY))
    assert good.status_code == 200
