import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

sys.path.insert(0, str(Path(__file__).parent))

from serve_settings import HERE, MAX_BODY, MAX_JACOBIAN, TOKEN, json_array, logged_errors  # noqa: F401


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="session")
def server(tmp_path_factory):
    """One real server in a subprocess, on a free loopback port, for the whole session:
    ``(url, path of its log, process)``."""
    port = _free_port()
    env = {**os.environ, "GRADPIPE_TOKEN": TOKEN, "JAX_PLATFORMS": "cpu"}
    command = [
        sys.executable, "-m", "gradpipe.cli", "serve", "served_components:component",
        "--app-dir", str(HERE), "--port", str(port), "--max-body-size", str(MAX_BODY),
        "--max-jacobian-size", str(MAX_JACOBIAN), "--log-level", "warning",
    ]  # fmt: skip
    log_path = Path(tmp_path_factory.mktemp("server")) / "server.log"
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
    yield url, log_path, process
    errors = logged_errors(log_path)
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
    log.close()
    assert not errors, "the server logged exceptions; see its log under pytest's tmp path"


@pytest.fixture(scope="session")
def server_url(server):
    return server[0]


@pytest.fixture(scope="session")
def server_log(server):
    """The path of the session server's log."""
    return server[1]


@pytest.fixture(scope="session")
def remote(server_url):
    from gradpipe.serve import connect

    remote = connect(server_url, token=TOKEN)
    yield remote
    remote.close()


@pytest.fixture(scope="session")
def local():
    from served_components import component

    return component
