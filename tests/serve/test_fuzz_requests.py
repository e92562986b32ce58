"""Structure-aware fuzzing of every endpoint in both encodings: no input gives a 5xx.

Request bodies are built from the served component's own schema (the leaf specs its
``/openapi.json`` publishes): first a valid request for the endpoint, then a few
mutations — a value swapped for a wrong type, a huge or non-finite number, deep
nesting, a wrong dtype or shape, a bad base64 or raw buffer, a missing or extra
field, a wrong handle — and, sometimes, damage to the encoded bytes (truncation, a
flipped byte, trailing garbage) or to the headers. Thousands of requests go to the one
real server of the session; each must get 200 or a JSON 4xx, the server must answer a
good request afterwards, and its log must hold no exception.
"""

import base64
import json
import math
import os

import httpx
import msgpack
import numpy as np
import pytest
from hypothesis import HealthCheck, given, reject, settings
from hypothesis import strategies as st
from serve_settings import TOKEN, logged_errors

from gradpipe.serve import BINARY, JSON

AUTH = {"Authorization": f"Bearer {TOKEN}"}
ENDPOINTS = ["apply", "jacobian", "jvp", "vjp", "abstract_eval"]
# Per endpoint and encoding: 2,000 fuzzed bodies in all, and 300 header/method cases.
EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", 200))


@pytest.fixture(scope="module")
def bare_client(server_url):
    with httpx.Client(base_url=server_url, timeout=60) as client:
        yield client


@pytest.fixture(scope="module")
def schema(server_url):
    response = httpx.get(f"{server_url}/openapi.json", headers=AUTH)
    return response.json()["x-gradpipe"]


@pytest.fixture(scope="module")
def client(server_url):
    with httpx.Client(base_url=server_url, headers=AUTH, timeout=60) as client:
        yield client


# -- valid requests, from the schema ---------------------------------------------------


def wire_array(array, binary, json_lists=False):
    """An array as it travels: raw bytes in msgpack, base64 text (or lists) in JSON."""
    array = np.asarray(array)
    raw = array.astype(array.dtype.newbyteorder("<")).tobytes()
    if binary:
        data = {"buffer": raw, "encoding": "raw"}
    elif json_lists:
        data = {"buffer": array.tolist(), "encoding": "json"}
    else:
        data = {"buffer": base64.b64encode(raw).decode(), "encoding": "base64"}
    return {"object_type": "array", "dtype": array.dtype.name, "shape": list(array.shape),
            "data": data}  # fmt: skip


def put(tree, path, value):
    """Set the leaf at a dotted path (the test component has no lists or dict fields)."""
    *parents, last = path.split(".")
    for name in parents:
        tree = tree.setdefault(name, {})
    tree[last] = value


@st.composite
def valid_request(draw, endpoint, specs, binary, handle):
    # Few shapes and path choices, so the server compiles a handful of programs, not
    # hundreds: the fuzz is about what surrounds valid values.
    n = draw(st.sampled_from([3, 3, 3, 1]))
    lists = draw(st.booleans())
    inputs, abstract, arrays = {}, {}, {}
    for spec in specs["inputs"]:
        if spec["kind"] == "array":
            shape = [n if d is None else d for d in spec["shape"]]
            values = draw(st.lists(st.floats(-3, 3, width=32), min_size=math.prod(shape),
                                   max_size=math.prod(shape)))  # fmt: skip
            array = np.asarray(values, spec["dtype"]).reshape(shape)
            arrays[spec["path"]] = array
            put(inputs, spec["path"], wire_array(array, binary, lists))
            put(abstract, spec["path"], {"shape": shape, "dtype": spec["dtype"]})
        else:
            value = draw(st.integers(0, 3))
            put(inputs, spec["path"], value)
            put(abstract, spec["path"], value)
    diff_in = draw(st.sampled_from([specs["differentiable_inputs"][:1],
                                    specs["differentiable_inputs"]]))  # fmt: skip
    diff_out = draw(st.sampled_from([specs["differentiable_outputs"][:1],
                                     specs["differentiable_outputs"]]))  # fmt: skip
    out_shapes = {s["path"]: [n if d is None else d for d in s["shape"]] for s in specs["outputs"]}
    if endpoint == "apply":
        doc = {"inputs": inputs, "keep_residuals": draw(st.booleans())}
        if not doc["keep_residuals"] and draw(st.booleans()):
            doc["batch_size"] = draw(st.sampled_from([1, 3]))
            doc["batched_paths"] = draw(st.lists(st.sampled_from(list(arrays)), max_size=2))
    elif endpoint == "jacobian":
        doc = {"inputs": inputs, "jac_inputs": diff_in, "jac_outputs": diff_out}
    elif endpoint == "jvp":
        tangents = {p: wire_array(np.ones_like(arrays[p]), binary) for p in diff_in}
        doc = {"inputs": inputs, "jvp_inputs": diff_in, "jvp_outputs": diff_out,
               "tangents": tangents}  # fmt: skip
    elif endpoint == "vjp":
        cotangents = {p: wire_array(np.ones(out_shapes[p], np.float32), binary) for p in diff_out}
        doc = {"vjp_inputs": diff_in, "vjp_outputs": diff_out, "cotangents": cotangents}
        if draw(st.booleans()):
            doc["handle"] = handle
        else:
            doc["inputs"] = inputs
    else:
        doc = {"abstract_inputs": abstract}
    return doc


# -- mutations --------------------------------------------------------------------------

NUMBERS = st.sampled_from([
    0, -1, 1, 2**31, 2**63, 2**64, -(2**63) - 1, 10**30, 1.5, -0.5, 1e308, -1e308,
    float("nan"), float("inf"), float("-inf"), 5e-324, True, False,
])  # fmt: skip


def deep(depth, leaf):
    for _ in range(depth):
        leaf = [leaf]
    return leaf


@st.composite
def bad_array(draw, binary):
    """An array frame with one thing wrong in it."""
    shape = draw(st.lists(st.integers(0, 4), max_size=3))
    dtypes = ["float32", "float64", "int32", "uint8", "bool", "complex64", "float16", "float0",
              "object", "V8", "<f4", "", "str"]  # fmt: skip
    dtype = draw(st.sampled_from(dtypes))
    itemsize = {"float64": 8, "complex64": 8, "int32": 4, "float32": 4, "float16": 2}.get(dtype, 1)
    size = math.prod(shape) * itemsize
    raw = bytes(draw(st.sampled_from([size, size + 1, max(size - 1, 0), 0, 3])))
    frame = wire_array(np.zeros(1, np.float32), binary)
    frame["dtype"] = dtype
    frame["shape"] = draw(st.one_of(
        st.just(shape), st.just([-1]), st.just([2**70]), st.just([0, 2**62, 2**62]),
        st.just([1.5]), st.just("3"), st.just([True]), st.just([1] * 40), st.just(None),
    ))  # fmt: skip
    encoding = draw(st.sampled_from(["raw", "base64", "json", "hex", None]))
    buffer = draw(st.one_of(
        st.just(raw),
        st.just(base64.b64encode(raw).decode()),
        st.just("not base64!!"),
        st.just("QUJD"),  # valid base64 of the wrong length
        st.just(base64.b64encode(raw).decode()[:-1]),
        st.lists(NUMBERS, max_size=5),
        st.just([[1, 2], [3]]),
        st.just(None),
    ))  # fmt: skip
    if not binary and isinstance(buffer, bytes):
        buffer = list(buffer)
    frame["data"] = {"buffer": buffer, "encoding": encoding}
    if draw(st.booleans()):
        frame.pop(draw(st.sampled_from(["dtype", "shape", "data", "object_type"])))
    if draw(st.booleans()):
        frame["extra"] = 1
    return frame


def junk(binary):
    return st.one_of(
        NUMBERS,
        st.text(max_size=8),
        st.just(None),
        st.just({}),
        st.just([]),
        st.just("ab" * 16),  # handle-shaped
        st.just({"object_type": "array"}),
        st.just({"shape": [2], "dtype": "float32"}),
        st.just({"shape": [-2], "dtype": "float32"}),
        st.lists(st.text(max_size=4), max_size=3),
        st.just(["x[0]", "p[a]", "zz.", '["x"]', "", "p.a.b"]),
        st.integers(1, 900).map(lambda d: deep(d, 1.0)),
        st.integers(1, 200).map(lambda d: deep(d, {"object_type": "array"})),
        bad_array(binary),
    )


def locations(node, path=()):
    """Every (path, value) of a document, containers included, to a depth of 12."""
    yield path, node
    if len(path) >= 12:
        return
    if isinstance(node, dict):
        for key, value in node.items():
            yield from locations(value, (*path, key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from locations(value, (*path, i))


def replace(node, path, value):
    if not path:
        return value
    head, rest = path[0], path[1:]
    if isinstance(node, dict):
        return {**node, head: replace(node[head], rest, value)}
    return [replace(v, rest, value) if i == head else v for i, v in enumerate(node)]


def delete(node, path):
    if len(path) == 1:
        if isinstance(node, dict):
            return {k: v for k, v in node.items() if k != path[0]}
        return [v for i, v in enumerate(node) if i != path[0]]
    head = path[0]
    if isinstance(node, dict):
        return {**node, head: delete(node[head], path[1:])}
    return [delete(v, path[1:]) if i == head else v for i, v in enumerate(node)]


@st.composite
def mutated(draw, doc, binary):
    for _ in range(draw(st.integers(0, 3))):
        places = list(locations(doc))
        path, _ = places[draw(st.integers(0, len(places) - 1))]
        action = draw(st.sampled_from(["replace", "replace", "delete", "add"]))
        if action == "replace" or not path:
            doc = replace(doc, path, draw(junk(binary)))
        elif action == "delete":
            doc = delete(doc, path)
        else:
            target = replace(doc, (), doc)
            for key in path[:-1]:
                target = target[key]
            if isinstance(target, dict):
                doc = replace(doc, path[:-1], {**target, draw(st.text(max_size=6)): 1})
    return doc


def serialize(doc, binary):
    if binary:
        try:
            return msgpack.packb(doc, use_bin_type=True)
        except (OverflowError, ValueError):  # too large or too deep for msgpack to write
            reject()
    return json.dumps(doc, allow_nan=True).encode()


@st.composite
def damaged(draw, body):
    kind = draw(st.sampled_from(["none"] * 6 + ["truncate", "flip", "append", "empty"]))
    if kind == "truncate" and body:
        return body[: draw(st.integers(0, len(body) - 1))]
    if kind == "flip" and body:
        i = draw(st.integers(0, len(body) - 1))
        return body[:i] + bytes([body[i] ^ draw(st.integers(1, 255))]) + body[i + 1 :]
    if kind == "append":
        return body + draw(st.binary(min_size=1, max_size=8))
    if kind == "empty":
        return b""
    return body


# -- the fuzz tests ------------------------------------------------------------------


def check(response, endpoint):
    assert response.status_code < 500, (endpoint, response.status_code, response.text[:500])
    if response.status_code != 200:
        error = response.json()
        assert set(error) == {"error", "message", "path"}, error


@pytest.fixture(scope="module")
def handle(client):
    from gradpipe.serve import encode

    inputs = {"x": np.ones(3, np.float32), "w": np.float32(1), "p": {"a": np.ones(3, np.float32)}}
    body = encode({"inputs": inputs, "keep_residuals": True}, BINARY)
    response = client.post("/apply", content=body, headers={"Content-Type": BINARY})
    return msgpack.unpackb(response.content)["handle"]


@pytest.mark.parametrize("binary", [True, False], ids=["msgpack", "json"])
@pytest.mark.parametrize("endpoint", ENDPOINTS)
def test_fuzzed_bodies_never_get_a_server_error(
    client, schema, handle, server_log, endpoint, binary
):
    content_type = BINARY if binary else JSON

    @settings(max_examples=EXAMPLES, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))  # fmt: skip
    @given(data=st.data())
    def fuzz(data):
        doc = data.draw(valid_request(endpoint, schema, binary, handle))
        doc = data.draw(mutated(doc, binary))
        body = data.draw(damaged(serialize(doc, binary)))
        accept = data.draw(st.sampled_from([None, BINARY, JSON, "*/*", "text/html"]))
        headers = {"Content-Type": content_type, **({"Accept": accept} if accept else {})}
        check(client.post(f"/{endpoint}", content=body, headers=headers), endpoint)

    fuzz()
    assert not logged_errors(server_log)


HEADER_VALUES = st.one_of(
    st.sampled_from([
        BINARY, JSON, f"{JSON}; charset=utf-8", f"{JSON}; charset=latin-1", "app/vnd.x+json",
        f"{BINARY};;;", "text/plain", "", ";", "*/*", "application/x-gradpipe+msgpack, text/html",
        "multipart/form-data; boundary=zz", "application/json\t",
    ]),
    st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126), max_size=20),
)  # fmt: skip


@settings(max_examples=300, deadline=None, database=None,
          suppress_health_check=list(HealthCheck))  # fmt: skip
@given(
    endpoint=st.sampled_from([*ENDPOINTS, "health", "stats", "openapi.json", "nope", ""]),
    method=st.sampled_from(["POST", "GET", "PUT", "DELETE", "PATCH", "OPTIONS", "HEAD"]),
    content_type=st.one_of(st.none(), HEADER_VALUES),
    accept=st.one_of(st.none(), HEADER_VALUES),
    token=st.sampled_from([TOKEN, None, "", "x" * 300, f"{TOKEN} ", f"{TOKEN}\u00e9"]),
    scheme=st.sampled_from(["Bearer", "bearer", "Basic", ""]),
    body=st.one_of(
        st.binary(max_size=64),
        st.sampled_from(
            [
                b"",
                b"{}",
                b"[]",
                b"null",
                b"\x80",
                b"\xff\xfe{}",
                b"{" * 5000,
                b"[" * 100000,
                b'"\xed\xa0\x80"',
                b'{"inputs": {}}',
            ]
        ),
    ),
)
def test_fuzzed_methods_headers_and_raw_bodies_never_get_a_server_error(
    bare_client, server_log, endpoint, method, content_type, accept, token, scheme, body
):
    headers = {}
    if content_type is not None and content_type.strip():
        headers["Content-Type"] = content_type.strip()
    if accept is not None and accept.strip():
        headers["Accept"] = accept.strip()
    if token is not None and f"{scheme} {token}".strip():
        headers["Authorization"] = f"{scheme} {token}".strip().encode()
    response = bare_client.request(method, f"/{endpoint}", content=body, headers=headers)
    assert response.status_code < 500, (endpoint, method, headers, response.text[:300])
    if response.status_code >= 400 and method != "HEAD":
        assert set(response.json()) == {"error", "message", "path"}


def test_the_server_still_answers_after_the_fuzz(client, server_log):
    from gradpipe.serve import encode

    inputs = {"x": np.ones(3, np.float32), "w": np.float32(1), "p": {"a": np.ones(3, np.float32)}}
    body = encode({"inputs": inputs}, BINARY)
    response = client.post("/apply", content=body, headers={"Content-Type": BINARY})
    assert response.status_code == 200
    assert not logged_errors(server_log)
