"""A small HTTP/1.1 client for gradpipe's own POSTs to a plain ``http://`` server.

Why not httpx for these: httpx joins the body into one new ``bytes`` before sending
and reads the answer 64 KiB at a time through h11's buffers, then joins the pieces
again; for multi-megabyte array payloads that is several copies into fresh memory
and a few hundred Python-level steps per request. Here a request goes out in one
vectored ``sendmsg`` straight from the encoder's pieces (the arrays' own memory),
and the answer's body is received with ``recv_into`` into one buffer of its
``Content-Length``, which the decoder then reads without copying.

Only what gradpipe's client needs: ``POST`` with a known body length, responses
framed by ``Content-Length`` (gradpipe servers always send it), chunked or
close-delimited; keep-alive connections in a small pool. A pooled connection the
server has closed meanwhile (uvicorn closes idle ones after 5 s) is detected before
use, and a request that fails on a reused connection before any answer arrived is
sent once more on a fresh one, as other HTTP clients do. Anything else (https,
proxies) goes through httpx.
"""

from __future__ import annotations

import select
import socket
import threading
from collections.abc import Sequence

__all__ = ["RawHTTP", "RawResponse"]

_MAX_HEAD = 64 * 1024
_IOV_MAX = 512


class RawResponse:
    """Status, lower-cased headers and the body of one answer."""

    __slots__ = ("content", "headers", "status")

    def __init__(self, status: int, headers: dict[str, str], content: bytearray):
        self.status, self.headers, self.content = status, headers, content


class _Stale(Exception):
    """The connection was closed by the server before it answered anything."""


class RawHTTP:
    """Pooled keep-alive connections to ``host:port``.

    **Arguments:**

    - `host`, `port`: the server.
    - `prefix`: the URL path the endpoints are under (``""`` for the root).
    - `headers`: sent with every request (``Content-Length`` is added).
    - `timeout`: seconds for connecting and for each socket operation.
    - `max_idle`: idle connections kept for reuse.
    """

    def __init__(
        self,
        host: str,
        port: int,
        prefix: str,
        headers: dict[str, str],
        timeout: float,
        max_idle: int = 32,
    ):
        self.host, self.port, self.prefix = host, port, prefix.rstrip("/")
        self.timeout = timeout
        self.max_idle = max_idle
        authority = f"[{host}]" if ":" in host else host
        lines = [f"Host: {authority}:{port}"] + [f"{k}: {v}" for k, v in headers.items()]
        self._head = "\r\n".join(lines)
        self._idle: list[socket.socket] = []
        self._lock = threading.Lock()

    def close(self) -> None:
        """Close the idle connections."""
        with self._lock:
            idle, self._idle = self._idle, []
        for sock in idle:
            sock.close()

    # -- connections

    def _connect(self) -> socket.socket:
        sock = socket.create_connection((self.host, self.port), timeout=self.timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock

    def _take(self) -> tuple[socket.socket, bool]:
        while True:
            with self._lock:
                sock = self._idle.pop() if self._idle else None
            if sock is None:
                return self._connect(), False
            if _usable(sock):
                return sock, True
            sock.close()

    def _give(self, sock: socket.socket) -> None:
        with self._lock:
            if len(self._idle) < self.max_idle:
                self._idle.append(sock)
                return
        sock.close()

    # -- one request

    def post(self, path: str, pieces: Sequence[bytes | memoryview]) -> RawResponse:
        """POST the concatenation of ``pieces`` to ``prefix + path``."""
        views = [memoryview(p).cast("B") for p in pieces]
        views = [v for v in views if v.nbytes]
        size = sum(v.nbytes for v in views)
        head = (
            f"POST {self.prefix}{path} HTTP/1.1\r\n{self._head}\r\nContent-Length: {size}\r\n\r\n"
        )
        request = [memoryview(head.encode("latin-1")), *views]
        sock, reused = self._take()
        try:
            try:
                response, keep = _exchange(sock, request)
            except _Stale:
                sock.close()
                if not reused:
                    message = "the server closed the connection without answering"
                    raise ConnectionError(message) from None
                sock = self._connect()
                response, keep = _exchange(sock, request)
        except BaseException:
            sock.close()
            raise
        if keep:
            self._give(sock)
        else:
            sock.close()
        return response


def _usable(sock: socket.socket) -> bool:
    """An idle keep-alive connection is usable when nothing is readable on it (a
    readable idle connection means the server closed it, or sent something stray)."""
    try:
        if hasattr(select, "poll"):
            poller = select.poll()
            poller.register(sock, select.POLLIN)
            return not poller.poll(0)
        return not select.select([sock], [], [], 0)[0]
    except (OSError, ValueError):
        return False


def _send(sock: socket.socket, views: list[memoryview]) -> None:
    if not hasattr(sock, "sendmsg"):
        for view in views:
            sock.sendall(view)
        return
    views = list(views)
    while views:
        sent = sock.sendmsg(views[:_IOV_MAX])
        while sent:
            if sent >= views[0].nbytes:
                sent -= views.pop(0).nbytes
            else:
                views[0] = views[0][sent:]
                sent = 0


def _exchange(sock: socket.socket, request: list[memoryview]) -> tuple[RawResponse, bool]:
    """Send one request and read its answer; `_Stale` when the connection turned out
    closed before any byte of an answer came."""
    try:
        _send(sock, request)
    except (BrokenPipeError, ConnectionResetError, ConnectionAbortedError):
        raise _Stale from None
    # The head, and whatever part of the body came with it.
    buf = bytearray()
    while True:
        try:
            chunk = sock.recv(65536)
        except (ConnectionResetError, ConnectionAbortedError):
            if buf:
                raise
            raise _Stale from None
        if not chunk:
            if not buf:
                raise _Stale
            raise ConnectionError("the server closed the connection mid-answer")
        buf += chunk
        end = buf.find(b"\r\n\r\n")
        if end >= 0:
            break
        if len(buf) > _MAX_HEAD:
            raise ConnectionError("the answer's head is too long")
    lines = bytes(buf[:end]).decode("latin-1").split("\r\n")
    version, _, rest = lines[0].partition(" ")
    try:
        status = int(rest.split(" ", 1)[0])
    except ValueError:
        raise ConnectionError(f"not an HTTP answer: {lines[0][:100]!r}") from None
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    keep = version == "HTTP/1.1" and headers.get("connection", "").lower() != "close"
    extra = memoryview(buf)[end + 4 :]
    if "chunked" in headers.get("transfer-encoding", "").lower():
        return RawResponse(status, headers, _read_chunked(sock, bytes(extra))), keep
    length = headers.get("content-length")
    if length is None:  # delimited by the server closing the connection
        body = bytearray(extra)
        while chunk := sock.recv(1 << 20):
            body += chunk
        return RawResponse(status, headers, body), False
    if not length.isdigit():
        raise ConnectionError(f"bad Content-Length {length!r}")
    size = int(length)
    body = bytearray(size)
    got = min(len(extra), size)
    body[:got] = extra[:got]
    if len(extra) > size:  # nothing may follow: requests are not pipelined
        keep = False
    view = memoryview(body)
    while got < size:
        n = sock.recv_into(view[got:])
        if not n:
            raise ConnectionError("the server closed the connection mid-answer")
        got += n
    return RawResponse(status, headers, body), keep


def _read_chunked(sock: socket.socket, data: bytes) -> bytearray:
    pending = bytearray(data)
    body = bytearray()

    def need(count: int) -> None:
        while len(pending) < count:
            chunk = sock.recv(1 << 20)
            if not chunk:
                raise ConnectionError("the server closed the connection mid-answer")
            pending.extend(chunk)

    def line() -> bytes:
        while (end := pending.find(b"\r\n")) < 0:
            need(len(pending) + 1)
        text = bytes(pending[:end])
        del pending[: end + 2]
        return text

    while True:
        size = int(line().split(b";", 1)[0], 16)
        if size == 0:
            while line():  # trailers, up to the empty line
                pass
            return body
        need(size + 2)
        body += pending[:size]
        del pending[: size + 2]
