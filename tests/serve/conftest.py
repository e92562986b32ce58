import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from serve_settings import (  # noqa: F401
    HERE,
    MAX_BODY,
    MAX_JACOBIAN,
    TOKEN,
    json_array,
    logged_errors,
    running_server,
)


@pytest.fixture(scope="session")
def server(tmp_path_factory):
    """One real server in a subprocess, on a free loopback port, for the whole session:
    ``(url, path of its log, process)``."""
    log_path = Path(tmp_path_factory.mktemp("server")) / "server.log"
    options = ["--max-body-size", str(MAX_BODY), "--max-jacobian-size", str(MAX_JACOBIAN)]
    with running_server(options, log_path, token=TOKEN) as (url, process):
        yield url, log_path, process


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


@pytest.fixture(scope="session")
def nested_url():
    """A server for the nested component (its models keep pydantic's default for
    extra fields), in a thread of this process."""
    import threading
    import time

    import uvicorn
    from served_components import nested_component

    from gradpipe.serve import create_app

    config = uvicorn.Config(create_app(nested_component), host="127.0.0.1", port=0,
                            log_level="warning")  # fmt: skip
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    port = server.servers[0].sockets[0].getsockname()[1]
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(timeout=10)
