"""The peer's side of the tesseract tests: tesseract-core's own client (a long-lived
`peer_client.py` subprocess) and runtime (``tesseract-runtime serve`` of
`tesseract_api.py`), both run by the Python of the peer's virtual environment
(``$PEER_PYTHON``, default ``.venv-peer/bin/python``; ``make test`` creates it), and
a gradpipe server in a thread of the test's own process."""

import contextlib
import json
import os
import socket
import subprocess
import threading
import time
from pathlib import Path

import httpx
import pytest

HERE = Path(__file__).parent
ROOT = HERE.parent.parent


def peer_python() -> Path:
    """The peer's Python; a failure (not a skip) that says how to create it."""
    python = Path(os.environ.get("PEER_PYTHON", ROOT / ".venv-peer/bin/python"))
    if not (python.exists() and (python.parent / "tesseract-runtime").exists()):
        pytest.fail(
            f"tesseract-core's virtual environment is missing ({python}); create it with "
            "`make .venv-peer/.installed` (make test does), or point PEER_PYTHON at one."
        )
    return python


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class PeerError(Exception):
    """An exception the peer's client raised: ``kind`` is its class name."""

    def __init__(self, kind: str, message: str):
        super().__init__(f"{kind}: {message}")
        self.kind, self.message = kind, message


def _to_wire(value):
    import base64

    import numpy as np

    if isinstance(value, dict):
        return {k: _to_wire(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_to_wire(v) for v in value]
    if hasattr(value, "shape") and hasattr(value, "dtype"):
        array = np.asarray(value)
        return {"__array__": base64.b64encode(array.tobytes()).decode(),
                "dtype": array.dtype.name, "shape": list(array.shape)}  # fmt: skip
    return value


def _from_wire(value):
    import base64

    import numpy as np

    if isinstance(value, dict):
        if "__array__" in value:
            raw = base64.b64decode(value["__array__"])
            return np.frombuffer(raw, value["dtype"]).reshape(value["shape"])
        return {k: _from_wire(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_from_wire(v) for v in value]
    return value


class PeerClient:
    """tesseract-core's ``Tesseract.from_url`` in a subprocess: ``call(url, op, **args)``
    runs ``Tesseract.from_url(url).<op>(**args)`` there."""

    def __init__(self):
        self.process = subprocess.Popen(
            [str(peer_python()), str(HERE / "peer_client.py")],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
            env={**os.environ, "JAX_PLATFORMS": "cpu"},
        )  # fmt: skip
        self._lock = threading.Lock()

    def call(self, url, op, *, accept=None, files=None, **args):
        request = {"url": url, "op": op, "args": _to_wire(args), "accept": accept,
                   "files": None if files is None else str(files)}  # fmt: skip
        with self._lock:
            self.process.stdin.write(json.dumps(request) + "\n")
            self.process.stdin.flush()
            line = self.process.stdout.readline()
        if not line:
            raise RuntimeError("the peer's client exited")
        answer = json.loads(line)
        if "error" in answer:
            raise PeerError(answer["error"], answer["message"])
        return _from_wire(answer["ok"])

    def close(self):
        self.process.stdin.close()
        self.process.wait(timeout=30)


@contextlib.contextmanager
def peer_runtime(files: Path):
    """``tesseract-runtime serve`` of `tesseract_api.py` on a free loopback port, its
    file references under ``files``: yields its URL."""
    runtime = peer_python().parent / "tesseract-runtime"
    port = free_port()
    env = {**os.environ, "TESSERACT_API_PATH": str(HERE / "tesseract_api.py"),
           "TESSERACT_INPUT_PATH": str(files), "TESSERACT_OUTPUT_PATH": str(files),
           "JAX_PLATFORMS": "cpu"}  # fmt: skip
    log = open(files / "runtime.log", "w")
    command = [str(runtime), "serve", "--host", "127.0.0.1", "--port", str(port)]
    process = subprocess.Popen(command, env=env, cwd=files, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"tesseract-runtime exited; see {files / 'runtime.log'}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise RuntimeError("tesseract-runtime did not come up in 120 s")
            time.sleep(0.25)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
        log.close()


@contextlib.contextmanager
def gradpipe_in_thread(component, **options):
    """``create_app(component, **options)`` on uvicorn in a thread: yields its URL."""
    import uvicorn

    from gradpipe.serve import create_app

    config = uvicorn.Config(create_app(component, **options), host="127.0.0.1", port=0,
                            log_level="warning")  # fmt: skip
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
