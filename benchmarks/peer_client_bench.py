"""The peer's client side of `benchmarks/serve.py`, run by the peer's own Python
(``$PEER_PYTHON``): tesseract-core's ``Tesseract.from_url`` making an apply + vjp
round trip against each URL given (interleaved), and tesseract-jax's
``apply_tesseract`` under ``jax.jit(jax.value_and_grad)`` against the first. Prints
one JSON line: per URL the round-trip times, the part of each spent inside the HTTP
requests (from sending the encoded body to holding the whole answer; the rest is
the client's own encoding and decoding), and the servers' ``Server-Timing`` totals
where they send one; for tesseract-jax its times, requests and request bytes.
gradpipe never imports it.

    peer_client_bench.py SIZE REPS URL [URL ...]
"""

import json
import sys
import time

import numpy as np
from tesseract_core import Tesseract


def timing(tesseract):
    """Seconds spent inside the HTTP requests of a Tesseract's session (``"http"``),
    and the sums of each part of their ``Server-Timing`` headers, since the caller
    last cleared it."""
    session = tesseract._client._session
    send = session.request
    spent = {}

    def request(*args, **kwargs):
        start = time.perf_counter()
        response = send(*args, **kwargs)
        spent["http"] = spent.get("http", 0.0) + time.perf_counter() - start
        for part in response.headers.get("server-timing", "").split(","):
            name, _, duration = part.strip().partition(";dur=")
            if duration:
                spent[name] = spent.get(name, 0.0) + float(duration) / 1e3
        return response

    session.request = request
    return spent


def counting(tesseract):
    """Count the requests and request-body bytes of a Tesseract's HTTP session."""
    session = tesseract._client._session
    send = session.request
    counts = {"requests": 0, "bytes": 0}

    def request(*args, **kwargs):
        counts["requests"] += 1
        counts["bytes"] += len(kwargs.get("data") or b"")
        return send(*args, **kwargs)

    session.request = request
    return counts


def main():
    size, reps, urls = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3:]
    rng = np.random.default_rng(0)
    x = rng.normal(size=size).astype(np.float32)
    ct = rng.normal(size=size).astype(np.float32)
    clients = [Tesseract.from_url(url).with_encoding(output_format="json+base64") for url in urls]

    def round_trip(t):
        y = t.apply({"x": x})["y"]
        g = t.vector_jacobian_product({"x": x}, ["x"], ["y"], {"y": ct})["x"]
        return y, g

    spent = [timing(t) for t in clients]
    answers = {}
    for t, url in zip(clients, urls):  # warm up, and keep the answers to compare
        for _ in range(2):
            answers[url] = round_trip(t)
    times = {url: [] for url in urls}
    parts = {url: [] for url in urls}  # per round trip: "http" and the Server-Timing parts
    for _ in range(reps):
        for t, url, inside in zip(clients, urls, spent):
            inside.clear()
            start = time.perf_counter()
            round_trip(t)
            times[url].append(time.perf_counter() - start)
            parts[url].append(dict(inside))
    result = {"round_trip": times, "parts": parts,
              "answers_agree": all(
                  np.allclose(answers[u][k], answers[urls[0]][k], rtol=1e-5, atol=1e-5)
                  for u in urls for k in (0, 1))}  # fmt: skip

    import jax
    import jax.numpy as jnp
    from tesseract_jax import apply_tesseract

    tesseract = Tesseract.from_url(urls[0])
    counts = counting(tesseract)
    ctj = jnp.asarray(ct)
    step = jax.jit(
        jax.value_and_grad(lambda v: jnp.vdot(apply_tesseract(tesseract, {"x": v})["y"], ctj))
    )
    xj = jnp.asarray(x)
    jax.block_until_ready(step(xj))
    before = dict(counts)
    jax.block_until_ready(step(xj + 1))  # one step: its requests and bytes
    one_step = {key: counts[key] - before[key] for key in counts}
    vg_times = []
    for _ in range(reps):
        start = time.perf_counter()
        jax.block_until_ready(step(xj))
        vg_times.append(time.perf_counter() - start)
    result["tesseract_jax"] = {"times": vg_times, **one_step}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
