"""Settings and helpers the gradpipe.serve tests share with their conftest."""

import contextlib
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

HERE = Path(__file__).parent
TOKEN = "test-token-0123"
MAX_BODY = 1 << 20
# float32 y(512) by x(512) is exactly this many bytes: the largest Jacobian served.
MAX_JACOBIAN = 1 << 20


def json_array(values, dtype="float32"):
    """A hand-written JSON array frame, with the numbers as a nested list."""
    import numpy as np

    shape = list(np.shape(values))
    return {"object_type": "array", "dtype": dtype, "shape": shape,
            "data": {"buffer": values, "encoding": "json"}}  # fmt: skip


def logged_errors(log_path):
    """The lines of a server log that tell of an exception."""
    with open(log_path) as log:
        return [line for line in log if "Traceback" in line or "Exception" in line]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def running_server(options, log_path, token=None, target="served_components:component"):
    """``gradpipe serve`` in a subprocess on a free loopback port: ``(url, process)``.
    On exit it stops the server and fails if the server logged an exception."""
    port = _free_port()
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    env.pop("GRADPIPE_TOKEN", None)
    if token:
        env["GRADPIPE_TOKEN"] = token
    command = [
        sys.executable, "-m", "gradpipe.cli", "serve", target, "--app-dir", str(HERE),
        "--port", str(port), "--log-level", "warning", *options,
    ]  # fmt: skip
    log = open(log_path, "w+")
    process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 90
    while True:
        if process.poll() is not None:
            log.seek(0)
            raise RuntimeError(f"the server exited: {log.read()}")
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            process.kill()
            raise RuntimeError("the server did not come up in 90 s")
        time.sleep(0.2)
    try:
        yield url, process
    finally:
        errors = logged_errors(log_path)
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
        log.close()
    assert not errors, f"the server logged exceptions; see {log_path}"
