"""Serving benchmark: apply + vjp of a 1e6-float32 input over loopback HTTP.

Measured side by side in one run, same function, same machine:

- gradpipe, binary (msgpack, raw buffers): ``/apply`` keeping residuals, then ``/vjp``
  naming the handle (what `RemoteComponent` does under ``jax.grad``).
- gradpipe, JSON + base64: the same two requests in the interoperable encoding.
- the peer, tesseract-core's runtime (``tesseract-runtime serve``, JAX recipe,
  ``json+base64``): ``/apply`` then ``/vector_jacobian_product``, which re-sends the
  inputs. It runs from its own venv (``$PEER_PYTHON``, default
  ``.venv-peer/bin/python``); gradpipe never depends on it.
- two labelled variants: a gradpipe server that keeps at most 4 residual sets
  (``--max-handles 4``; the default keeps 64, up to 1 GiB), and a second peer server
  given the allocator settings `gradpipe serve` applies to itself (``SAME_MALLOC``).

Then, without HTTP: the jitted forward pass alone (the compute the design's anchor
quotes, ~13 ms) and ``apply_keep`` + ``vjp_from`` in-process; and the median
``Server-Timing`` of the binary requests (body read, decode, compute, encode).

Also the request bytes that ``jax.value_and_grad`` sends through a `RemoteComponent`,
against the input plus the cotangent.

And the tesseract protocol both ways (`benchmarks/peer_client_bench.py`, in the
peer's venv): the peer's own client (``Tesseract.from_url``) making the apply + vjp
round trip against gradpipe's ``/tesseract`` API and against the peer's server, and
against a server that does no work (`benchmarks/idle_server.py`: stored answers on
gradpipe's HTTP stack), the floor no server can go below with that client; and
``jax.jit(jax.value_and_grad)`` through gradpipe's `TesseractRemote` against
tesseract-jax's ``apply_tesseract``, both calling the peer's server, with requests
and request bytes. ``--tesseract`` measures these rows only.

    .venv/bin/python benchmarks/serve.py [--size 1000000] [--reps 15] [--tesseract]

The module also defines ``component``, which the gradpipe server imports.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import jax
import jax.numpy as jnp
import numpy as np
import pydantic

from gradpipe.component import Array, Component, Differentiable

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


class Inputs(pydantic.BaseModel):
    x: Differentiable[Array[np.float32, (None,)]]


class Outputs(pydantic.BaseModel):
    y: Differentiable[Array[np.float32, (None,)]]


def forward(x):
    return jnp.tanh(x) * jnp.sin(3.0 * x) + 0.5 * x * x  # same as peer_serve_api.py


component = Component(lambda d: {"y": forward(d["x"])}, inputs=Inputs, outputs=Outputs)


# -- servers ----------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait(url: str, process: subprocess.Popen, what: str) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{what} exited with {process.returncode}")
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.25)
    raise RuntimeError(f"{what} did not come up in 120 s")


def start_gradpipe(*extra: str) -> tuple[str, subprocess.Popen]:
    port = _free_port()
    command = [sys.executable, "-m", "gradpipe.cli", "serve", "serve:component",
               "--app-dir", str(HERE), "--port", str(port), "--max-body-size", "1GiB",
               "--log-level", "warning", *extra]  # fmt: skip
    process = subprocess.Popen(command, env={**os.environ, "GRADPIPE_TOKEN": ""})
    url = f"http://127.0.0.1:{port}"
    _wait(url, process, "gradpipe serve")
    return url, process


# What `gradpipe serve` sets in its own process with mallopt (`tune_malloc`), as
# glibc's environment variables: given to a second peer server to show how much of
# the difference is the allocator setting alone.
SAME_MALLOC = {
    "MALLOC_MMAP_THRESHOLD_": str(32 * 2**20),
    "MALLOC_TRIM_THRESHOLD_": str(256 * 2**20),
}


def start_peer(workdir: str, extra_env: dict | None = None) -> tuple[str, subprocess.Popen]:
    """The peer's server; it writes a ``run_<uuid>/logs`` folder per request into
    ``workdir`` (a temporary folder, removed afterwards)."""
    python = Path(os.environ.get("PEER_PYTHON", ROOT / ".venv-peer/bin/python"))
    runtime = python.parent / "tesseract-runtime"
    if not runtime.exists():
        raise SystemExit(f"{runtime} is missing: install tesseract-core[runtime] in that venv.")
    port = _free_port()
    env = {**os.environ, "TESSERACT_API_PATH": str(HERE / "peer_serve_api.py"),
           "TESSERACT_OUTPUT_FORMAT": "json+base64", "TESSERACT_OUTPUT_PATH": workdir,
           "TESSERACT_INPUT_PATH": workdir, **(extra_env or {})}  # fmt: skip
    command = [str(runtime), "serve", "--host", "127.0.0.1", "--port", str(port)]
    process = subprocess.Popen(command, env=env, cwd=workdir, stdout=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    _wait(url, process, "tesseract-runtime serve")
    return url, process


def start_idle(source: str, size: int) -> tuple[str, subprocess.Popen]:
    """`idle_server.py`: ``source``'s answers, stored, on gradpipe's HTTP stack."""
    port = _free_port()
    command = [sys.executable, str(HERE / "idle_server.py"), source, str(port), str(size)]
    process = subprocess.Popen(command)
    url = f"http://127.0.0.1:{port}"
    _wait(url, process, "idle_server.py")
    return url, process


# -- one apply + vjp round trip each ------------------------------------------------------


def gradpipe_round_trip(remote, x, ct):
    outputs, handle = remote.apply_keep({"x": x})
    grads = remote.vjp({"x": x}, ["x"], ["y"], {"y": ct}, handle=handle)
    return outputs["y"], grads["x"]


def peer_round_trip(client: httpx.Client, x, ct):
    from gradpipe.serve import JSON, decode, encode

    def post(endpoint, document):
        response = client.post(endpoint, content=encode(document, JSON))
        response.raise_for_status()
        return decode(response.content, JSON)

    y = post("/apply", {"inputs": {"x": x}})["y"]
    grads = post("/vector_jacobian_product", {
        "inputs": {"x": x}, "vjp_inputs": ["x"], "vjp_outputs": ["y"],
        "cotangent_vector": {"y": ct},
    })  # fmt: skip
    return y, grads["x"]


def server_timings(remote, x, ct, reps: int) -> dict[str, dict[str, float]]:
    """Median ``Server-Timing`` parts of the binary ``/apply`` and ``/vjp`` requests,
    and their round trip as the client sees it ("total")."""
    from gradpipe.serve._encoding import BINARY, decode, encode_pieces

    raw = remote.client._raw
    if raw is None:
        return {}
    rows: dict[str, list[dict[str, float]]] = {"/apply": [], "/vjp": []}

    def post(endpoint, document):
        start = time.perf_counter()
        answer = raw.post(endpoint, encode_pieces(document, BINARY))
        result = decode(answer.content, BINARY)
        parts = dict(item.split(";dur=") for item in answer.headers["server-timing"].split(", "))
        row = {k: float(v) for k, v in parts.items()}
        row["total"] = (time.perf_counter() - start) * 1e3
        rows[endpoint].append(row)
        return result

    for _ in range(reps):
        handle = post("/apply", {"inputs": {"x": x}, "keep_residuals": True})["handle"]
        post("/vjp", {"handle": handle, "vjp_inputs": ["x"], "vjp_outputs": ["y"],
                      "cotangents": {"y": ct}})  # fmt: skip
    return {
        endpoint: {k: statistics.median(r[k] for r in found) for k in found[0]}
        for endpoint, found in rows.items()
    }


def classic_rows(url, few_url, peer_urls, x, ct, want_y, want_g, reps) -> None:
    """The apply + vjp round trips of gradpipe's own API and of the peer's server
    (with httpx and gradpipe's JSON encoder), the in-process times, the binary
    requests' Server-Timing and the bytes `jax.value_and_grad` sends; printed."""
    from gradpipe.serve import RemoteComponent

    binary = RemoteComponent(url, encoding="binary")
    binary_few = RemoteComponent(few_url, encoding="binary")
    json_ = RemoteComponent(url, encoding="json")
    headers = {"Content-Type": "application/json", "Accept": "application/json+base64"}
    peer = httpx.Client(base_url=peer_urls[0], headers=headers, timeout=300)
    peer2 = httpx.Client(base_url=peer_urls[1], headers=headers, timeout=300)
    methods = {
        "gradpipe binary (msgpack)": lambda: gradpipe_round_trip(binary, x, ct),
        "gradpipe binary, --max-handles 4": lambda: gradpipe_round_trip(binary_few, x, ct),
        "gradpipe JSON+base64": lambda: gradpipe_round_trip(json_, x, ct),
        "peer tesseract-runtime (json+base64)": lambda: peer_round_trip(peer, x, ct),
        "peer, with gradpipe's malloc settings": lambda: peer_round_trip(peer2, x, ct),
    }
    times: dict[str, list[float]] = {name: [] for name in methods}
    for name, run in methods.items():  # warm up (compilation) and check the answers
        for _ in range(2):
            y, g = run()
        np.testing.assert_allclose(y, want_y, rtol=1e-5, atol=1e-5, err_msg=name)
        np.testing.assert_allclose(g, want_g, rtol=1e-5, atol=1e-5, err_msg=name)
    for _ in range(reps):  # interleaved, so drifts of the machine hit all alike
        for name, run in methods.items():
            start = time.perf_counter()
            run()
            times[name].append(time.perf_counter() - start)

    local = {"x": x}
    local_times, forward_times = [], []
    jitted, xj = jax.jit(forward), jnp.asarray(x)
    jax.block_until_ready(jitted(xj))
    for _ in range(reps):
        start = time.perf_counter()
        outs, res = component.apply_keep(local)
        jax.block_until_ready((outs, component.vjp_from(res, ["x"], ["y"], {"y": ct})))
        local_times.append(time.perf_counter() - start)
        start = time.perf_counter()
        jax.block_until_ready(jitted(xj))
        forward_times.append(time.perf_counter() - start)

    timings = server_timings(binary, x, ct, reps)

    # value_and_grad through a RemoteComponent: bytes of request bodies sent.
    def loss(x):
        return jnp.vdot(binary({"x": x})["y"], jnp.asarray(ct))

    vg = jax.jit(jax.value_and_grad(loss))
    jax.block_until_ready(vg(xj))  # compiles, and asks /abstract_eval once
    sent_before, requests_before = binary.client.bytes_sent, binary.client.requests
    jax.block_until_ready(vg(xj + 1))
    sent = binary.client.bytes_sent - sent_before
    requests = binary.client.requests - requests_before
    vg_times = []
    for _ in range(reps):
        start = time.perf_counter()
        jax.block_until_ready(vg(xj))
        vg_times.append(time.perf_counter() - start)

    peer_median = statistics.median(times["peer tesseract-runtime (json+base64)"])
    print(f"\napply + vjp round trip, {x.size:,} float32 on loopback, "
          f"median of {reps} (2 cores)\n")  # fmt: skip
    peer_min = min(times["peer tesseract-runtime (json+base64)"])
    print(f"| {'method':<40} | median ms | vs peer | min ms | vs peer |")
    print(f"|{'-' * 42}|-----------|---------|--------|---------|")
    times["(in-process apply_keep + vjp_from)"] = local_times
    times["(in-process jit(forward) alone)"] = forward_times
    for name, values in times.items():
        median, least = statistics.median(values), min(values)
        print(f"| {name:<40} | {median * 1e3:9.1f} | {median / peer_median:6.2f}x "
              f"| {least * 1e3:6.1f} | {least / peer_min:6.2f}x |")  # fmt: skip
    print("\ngradpipe binary, median Server-Timing (ms): " + "; ".join(
        f"{request} " + ", ".join(f"{k} {v:.1f}" for k, v in parts.items())
        for request, parts in timings.items()))  # fmt: skip
    payload = x.nbytes + ct.nbytes
    print(f"\njit(value_and_grad) through RemoteComponent: {requests} requests, {sent:,} bytes sent "
          f"= {sent / payload:.3f}x (input + cotangent = {payload:,} bytes), "
          f"median {statistics.median(vg_times) * 1e3:.1f} ms under jit")  # fmt: skip


def tesseract_rows(url, idle_url, peer_url, x, ct, want_g, reps) -> None:
    """The tesseract protocol both ways against the peer's server; printed."""
    from gradpipe.serve import TesseractRemote

    median = statistics.median
    peer_side = peer_client_side([peer_url, f"{url}/tesseract", idle_url], x.size, reps)
    tess = TesseractRemote(peer_url)

    def tess_loss(x):
        return jnp.vdot(tess({"x": x})["y"], jnp.asarray(ct))

    xj = jnp.asarray(x)
    tvg = jax.jit(jax.value_and_grad(tess_loss))
    _, grad = jax.block_until_ready(tvg(xj))
    np.testing.assert_allclose(grad, want_g, rtol=1e-5, atol=1e-5)
    tess_before = (tess.client.requests, tess.client.bytes_sent)
    jax.block_until_ready(tvg(xj + 1))
    tess_requests = tess.client.requests - tess_before[0]
    tess_sent = tess.client.bytes_sent - tess_before[1]
    tess_times = []
    for _ in range(reps):
        start = time.perf_counter()
        jax.block_until_ready(tvg(xj))
        tess_times.append(time.perf_counter() - start)
    tess.close()

    def ms(kind: str, where: str) -> float:
        if kind == "round_trip":
            return median(peer_side[kind][where]) * 1e3
        return median(parts.get(kind, 0.0) for parts in peer_side["parts"][where]) * 1e3

    gp, peer, idle = f"{url}/tesseract", peer_url, idle_url
    tj = peer_side["tesseract_jax"]
    print(f"\nthe tesseract protocol, median of {reps} (answers agree: "
          f"{peer_side['answers_agree']}):\n")  # fmt: skip
    print("| measure | gradpipe | peer | ratio |")
    print("|---|---|---|---|")
    print(f"| the peer's client (Tesseract.from_url), apply + vjp: gradpipe's /tesseract vs "
          f"tesseract-runtime | {ms('round_trip', gp):.1f} ms | {ms('round_trip', peer):.1f} ms "
          f"| {ms('round_trip', gp) / ms('round_trip', peer):.2f}x |")  # fmt: skip
    print(f"| the same, inside the HTTP requests (the rest is the client's own encoding and "
          f"decoding) | {ms('http', gp):.1f} ms | {ms('http', peer):.1f} ms "
          f"| {ms('http', gp) / ms('http', peer):.2f}x |")  # fmt: skip
    print(f"| jit(value_and_grad) calling tesseract-runtime: gradpipe TesseractRemote vs "
          f"tesseract-jax | {median(tess_times) * 1e3:.1f} ms, {tess_requests} requests, "
          f"{tess_sent:,} bytes | {median(tj['times']) * 1e3:.1f} ms, {tj['requests']} "
          f"requests, {tj['bytes']:,} bytes | {median(tess_times) / median(tj['times']):.2f}x |")  # fmt: skip
    print(f"\nthe floor, the peer's client against a server that does no work (idle_server.py): "
          f"round trip {ms('round_trip', idle):.1f} ms = "
          f"{ms('round_trip', idle) / ms('round_trip', peer):.2f}x the peer's, "
          f"{ms('http', idle):.1f} ms inside the requests")  # fmt: skip
    print(f"above the floor: gradpipe {ms('round_trip', gp) - ms('round_trip', idle):.1f} ms, "
          f"the peer {ms('round_trip', peer) - ms('round_trip', idle):.1f} ms")  # fmt: skip
    print("gradpipe's Server-Timing, both requests (ms): " + ", ".join(
        f"{part} {ms(part, gp):.1f}" for part in ("read", "decode", "compute", "encode", "total")))  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", type=int, default=1_000_000)
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument("--tesseract", action="store_true", help="the tesseract rows only")
    args = parser.parse_args()

    rng = np.random.default_rng(0)
    x = rng.normal(size=args.size).astype(np.float32)
    ct = rng.normal(size=args.size).astype(np.float32)
    want_y = np.asarray(forward(x))
    want_g = np.asarray(jax.vjp(forward, jnp.asarray(x))[1](jnp.asarray(ct))[0])

    servers = []
    peer_dir = tempfile.TemporaryDirectory(prefix="gradpipe-bench-peer-")
    try:
        url, process = start_gradpipe()
        servers.append(process)
        peer_url, peer_process = start_peer(peer_dir.name)
        servers.append(peer_process)
        if not args.tesseract:
            few_url, few_process = start_gradpipe("--max-handles", "4")
            servers.append(few_process)
            peer2_url, peer2_process = start_peer(peer_dir.name, SAME_MALLOC)
            servers.append(peer2_process)
            classic_rows(url, few_url, [peer_url, peer2_url], x, ct, want_y, want_g, args.reps)
        idle_url, idle_process = start_idle(f"{url}/tesseract", args.size)
        servers.append(idle_process)
        tesseract_rows(url, idle_url, peer_url, x, ct, want_g, args.reps)
    finally:
        for process in servers:
            process.terminate()
            process.wait(timeout=30)
        peer_dir.cleanup()


def peer_client_side(urls: list[str], size: int, reps: int) -> dict:
    """Run `peer_client_bench.py` in the peer's venv: the peer's client against each
    of ``urls`` (interleaved), and tesseract-jax against the first."""
    import json

    python = Path(os.environ.get("PEER_PYTHON", ROOT / ".venv-peer/bin/python"))
    command = [str(python), str(HERE / "peer_client_bench.py"), str(size), str(reps), *urls]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


if __name__ == "__main__":
    main()
