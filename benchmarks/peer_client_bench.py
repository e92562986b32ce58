"""The peer's client side of `benchmarks/serve.py`, run by the peer's own Python
(``$PEER_PYTHON``): tesseract-core's ``Tesseract.from_url`` making an apply + vjp
round trip against each URL given (interleaved), and tesseract-jax's
``apply_tesseract`` under ``jax.jit(jax.value_and_grad)`` against the first. Prints
one JSON line: per URL the round-trip times, and for tesseract-jax its times,
requests and request bytes. gradpipe never imports it.

    peer_client_bench.py SIZE REPS URL [URL ...]
"""

import json
import sys
import time

import numpy as np
from tesseract_core import Tesseract


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

    answers = {}
    for t, url in zip(clients, urls):  # warm up, and keep the answers to compare
        for _ in range(2):
            answers[url] = round_trip(t)
    times = {url: [] for url in urls}
    for _ in range(reps):
        for t, url in zip(clients, urls):
            start = time.perf_counter()
            round_trip(t)
            times[url].append(time.perf_counter() - start)
    result = {"round_trip": times,
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
    jax.block_until_ready(step(xj + 1))
    vg_times = []
    for _ in range(reps):
        start = time.perf_counter()
        jax.block_until_ready(step(xj))
        vg_times.append(time.perf_counter() - start)
    result["tesseract_jax"] = {
        "times": vg_times,
        "requests": counts["requests"] - before["requests"],
        "bytes": counts["bytes"] - before["bytes"],
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
