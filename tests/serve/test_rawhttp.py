"""The raw HTTP/1.1 transport of the client, against tiny scripted socket servers."""

import socket
import threading

import numpy as np
import pytest

from gradpipe.serve._client import Client
from gradpipe.serve._encoding import BINARY, decode, encode
from gradpipe.serve._rawhttp import RawHTTP


def _read_request(conn: socket.socket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        data += conn.recv(65536)
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":")[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length")
    )
    while len(body) < length:
        body += conn.recv(65536)
    return body


def _serve(answers, close_after_each=False):
    """A loopback server that answers requests with ``answers(body) -> bytes``."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    seen = []

    def run():
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with conn:
                while True:
                    try:
                        body = _read_request(conn)
                    except (OSError, StopIteration):
                        break
                    seen.append(body)
                    conn.sendall(answers(body))
                    if close_after_each:
                        break

    threading.Thread(target=run, daemon=True).start()
    return listener, seen


def _plain(body: bytes, content_type: str = BINARY) -> bytes:
    head = f"HTTP/1.1 200 OK\r\ncontent-type: {content_type}\r\ncontent-length: {len(body)}\r\n\r\n"
    return head.encode() + body


def test_large_body_round_trip_and_keep_alive():
    listener, seen = _serve(_plain)  # echoes the body
    port = listener.getsockname()[1]
    client = Client(f"http://127.0.0.1:{port}")
    assert client._raw is not None
    x = np.arange(1_000_000, dtype=np.float32)
    for _ in range(3):
        answer = client.post("apply", {"inputs": {"x": x}})
        np.testing.assert_array_equal(answer["inputs"]["x"], x)
    assert len(seen) == 3 and seen[0] == encode({"inputs": {"x": x}}, BINARY)
    assert len(client._raw._idle) == 1  # one connection, kept alive
    client.close()
    listener.close()


def test_connection_closed_by_server_is_replaced():
    listener, seen = _serve(_plain, close_after_each=True)
    port = listener.getsockname()[1]
    raw = RawHTTP("127.0.0.1", port, "", {"Content-Type": BINARY}, timeout=10)
    for i in range(4):
        body = encode({"i": i}, BINARY)
        answer = raw.post("/x", [body])
        assert answer.status == 200 and decode(answer.content, BINARY) == {"i": i}
    assert len(seen) == 4  # each request reached the server exactly once
    raw.close()
    listener.close()


def test_chunked_and_close_delimited_answers():
    payload = encode({"y": np.ones(5, np.float32)}, BINARY)

    def chunked(body):
        parts = [payload[:7], payload[7:]]
        chunks = b"".join(f"{len(p):x}\r\n".encode() + p + b"\r\n" for p in parts)
        head = b"HTTP/1.1 200 OK\r\ncontent-type: " + BINARY.encode()
        return head + b"\r\ntransfer-encoding: chunked\r\n\r\n" + chunks + b"0\r\n\r\n"

    listener, _ = _serve(chunked)
    raw = RawHTTP("127.0.0.1", listener.getsockname()[1], "", {}, timeout=10)
    assert bytes(raw.post("/x", [b"{}"]).content) == payload
    raw.close()
    listener.close()

    def delimited(body):
        return b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\n" + payload

    listener, _ = _serve(delimited, close_after_each=True)
    raw = RawHTTP("127.0.0.1", listener.getsockname()[1], "", {}, timeout=10)
    assert bytes(raw.post("/x", [b"{}"]).content) == payload
    assert not raw._idle
    raw.close()
    listener.close()


def test_proxy_variables_and_https_use_httpx(monkeypatch):
    assert Client("https://127.0.0.1:1")._raw is None
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
    assert Client("http://127.0.0.1:1")._raw is None


def test_refused_connection_raises():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    raw = RawHTTP("127.0.0.1", port, "", {}, timeout=5)
    with pytest.raises(OSError):
        raw.post("/x", [b"{}"])


def test_oversize_body_and_errors_through_the_raw_transport(server_url):
    from serve_settings import MAX_BODY, TOKEN

    from gradpipe.serve._client import RemoteError

    client = Client(server_url, token=TOKEN)
    assert client._raw is not None
    x = np.ones(3, np.float32)
    good = {"inputs": {"x": x, "w": np.float32(2.0), "p": {"a": x}}}
    for size in (MAX_BODY, 16 * MAX_BODY):
        big = {"inputs": {**good["inputs"], "x": np.ones(size // 4 + 1, np.float32)}}
        with pytest.raises(RemoteError) as info:
            client.post("apply", big)
        assert info.value.status == 413
        answer = client.post("apply", good)  # the next request still succeeds
        np.testing.assert_allclose(answer["outputs"]["y"], 2 * np.sin(1.0) + 1.0, rtol=1e-6)
    with pytest.raises(RemoteError) as info:
        Client(server_url, token="wrong").post("apply", good)
    assert info.value.status == 401
    client.close()
