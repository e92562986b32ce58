"""The bounded residual store behind /apply keep_residuals and /vjp handle."""

import threading
import time

import pytest

from gradpipe.serve import HandleStore
from gradpipe.serve._handles import UnknownHandle


class Res:
    def __init__(self, nbytes):
        self.nbytes = nbytes


def test_handles_are_unique_and_give_back_their_residuals():
    store = HandleStore(max_entries=100)
    items = [Res(1) for _ in range(50)]
    handles = [store.put(r) for r in items]
    assert len(set(handles)) == 50 and all(len(h) == 32 for h in handles)
    assert all(store.get(h) is r for h, r in zip(handles, items))
    with pytest.raises(UnknownHandle):
        store.get("0" * 32)


def test_least_recently_used_goes_first_by_entries_and_bytes():
    store = HandleStore(max_entries=2, max_bytes=100)
    a, b = store.put(Res(10)), store.put(Res(10))
    store.get(a)  # b is now the least recently used
    c = store.put(Res(10))
    with pytest.raises(UnknownHandle):
        store.get(b)
    assert store.get(a) and store.get(c)
    d = store.put(Res(95))  # evicts both others to fit the bytes bound
    assert len(store) == 1 and store.nbytes == 95 and store.get(d)
    assert store.put(Res(101)) is None  # never fits: not kept, no handle


def test_unused_entries_expire():
    store = HandleStore(ttl=0.05)
    handle = store.put(Res(1))
    time.sleep(0.1)
    with pytest.raises(UnknownHandle):
        store.get(handle)
    assert len(store) == 0 and store.nbytes == 0


def test_thread_safe():
    store = HandleStore(max_entries=16, max_bytes=10**6)
    errors = []

    def work():
        try:
            for _ in range(500):
                r = Res(7)
                h = store.put(r)
                try:
                    assert store.get(h) is r
                except UnknownHandle:
                    pass  # evicted by another thread: allowed, never a wrong entry
        except Exception as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(store) <= 16 and store.nbytes == 7 * len(store)


def test_an_evicted_handle_is_a_410_not_a_wrong_answer(local):
    import warnings

    import numpy as np

    from gradpipe.serve import BINARY, create_app, decode, encode

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from starlette.testclient import TestClient

    client = TestClient(create_app(local, handles=HandleStore(max_entries=1)))
    headers = {"Content-Type": BINARY}

    def post(endpoint, doc):
        return client.post(f"/{endpoint}", content=encode(doc, BINARY), headers=headers)

    ones = np.ones(3, np.float32)
    inputs = [{"x": v * ones, "w": np.float32(1), "p": {"a": ones}} for v in (1.0, 2.0)]
    h1, h2 = (decode(post("apply", {"inputs": i, "keep_residuals": True}).content, BINARY)["handle"]
              for i in inputs)  # fmt: skip
    vjp = {"vjp_inputs": ["x"], "vjp_outputs": ["y"], "cotangents": {"y": np.ones(3, np.float32)}}
    assert post("vjp", {**vjp, "handle": h1}).status_code == 410
    answer = decode(post("vjp", {**vjp, "handle": h2}).content, BINARY)["vjp"]["x"]
    want = local.vjp(inputs[1], ["x"], ["y"], {"y": np.ones(3, np.float32)})["x"]
    np.testing.assert_allclose(answer, np.asarray(want))
