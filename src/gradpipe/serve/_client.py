"""The HTTP transport of gradpipe's client: one pooled connection set per server."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Mapping
from typing import Any

import httpx

from ._encoding import BINARY, JSON, decode, encode_pieces, media_type
from ._rawhttp import RawHTTP

__all__ = ["Client", "RemoteError", "UnknownHandleError", "TOKEN_ENV"]

TOKEN_ENV = "GRADPIPE_TOKEN"


class RemoteError(RuntimeError):
    """The server answered with an error status; ``path`` names the offending value."""

    def __init__(self, status: int, kind: str, message: str, path: str | None):
        where = f" at {path}" if path else ""
        super().__init__(f"HTTP {status} ({kind}){where}: {message}")
        self.status, self.kind, self.message, self.path = status, kind, message, path


class UnknownHandleError(RemoteError):
    """The residual handle is unknown to the server (expired, evicted, other worker)."""


class Client:
    """Pooled requests to one gradpipe server, in the binary or the JSON encoding.

    Thread-safe: one `httpx.Client` (with its connection pool) serves every thread.
    Counts requests and the bytes of request bodies sent, for benchmarks and tests.
    POSTs to a plain ``http://`` URL (no proxy variables set) go through `RawHTTP`,
    its own pool of keep-alive connections, which sends the arrays' memory as it is
    and receives an answer into one buffer; https and proxies go through httpx.

    **Arguments:**

    - `url`: the server's base URL, e.g. ``"http://127.0.0.1:8000"``.
    - `token`: the bearer token; defaults to the ``GRADPIPE_TOKEN`` variable.
    - `encoding`: ``"binary"`` (msgpack, the default) or ``"json"`` (base64).
    - `timeout`: seconds per request.
    - `max_connections`: the size of the connection pool.
    """

    def __init__(
        self,
        url: str,
        *,
        token: str | None = None,
        encoding: str = "binary",
        timeout: float = 300.0,
        max_connections: int = 32,
    ):
        if encoding not in ("binary", "json"):
            raise ValueError(f"encoding must be 'binary' or 'json', got {encoding!r}.")
        self.url = url.rstrip("/")
        self.content_type = BINARY if encoding == "binary" else JSON
        token = token if token is not None else os.environ.get(TOKEN_ENV)
        headers = {"Content-Type": self.content_type, "Accept": self.content_type}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        limits = httpx.Limits(
            max_connections=max_connections, max_keepalive_connections=max_connections
        )
        self._http = httpx.Client(
            base_url=self.url, headers=headers, timeout=timeout, limits=limits
        )
        self._raw = _raw_transport(self.url, headers, timeout, max_connections)
        self._lock = threading.Lock()
        self.requests = 0
        self.bytes_sent = 0

    def close(self) -> None:
        """Close the pooled connections."""
        self._http.close()
        if self._raw is not None:
            self._raw.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def post(self, endpoint: str, document: dict[str, Any]) -> dict[str, Any]:
        """POST ``document`` to ``/endpoint`` and decode the answer.

        Raises `UnknownHandleError` for 410, `RemoteError` for any other error status.
        """
        pieces = encode_pieces(document, self.content_type)
        size = sum(memoryview(p).nbytes for p in pieces)
        with self._lock:
            self.requests += 1
            self.bytes_sent += size
        headers: Mapping[str, str]
        content: bytes | bytearray
        if self._raw is not None:
            answer = self._raw.post(f"/{endpoint}", pieces)
            status, headers, content = answer.status, answer.headers, answer.content
        else:
            response = self._http.post(f"/{endpoint}", content=b"".join(pieces))
            status, headers, content = response.status_code, response.headers, response.content
        if status != 200:
            raise _error(status, content)
        kind = media_type(headers.get("content-type")) or JSON
        return decode(content, kind)

    def get(self, endpoint: str) -> Any:
        """GET ``/endpoint`` (``health``, ``openapi.json``, ``stats``) as JSON."""
        response = self._http.get(f"/{endpoint}")
        if response.status_code != 200:
            raise _error(response.status_code, response.content)
        return response.json()


_PROXY_VARIABLES = ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY")


def _raw_transport(url: str, headers: dict, timeout: float, pool: int) -> RawHTTP | None:
    """`RawHTTP` for a plain ``http://`` URL that httpx would not send to a proxy."""
    parsed = httpx.URL(url)
    if parsed.scheme != "http" or not parsed.host or any(map(os.environ.get, _PROXY_VARIABLES)):
        return None
    port = parsed.port or 80
    return RawHTTP(parsed.host, port, parsed.path, headers, timeout, max_idle=pool)


def _error(status: int, content: bytes | bytearray) -> RemoteError:
    try:
        body = json.loads(content)
        kind, message, path = body["error"], body["message"], body.get("path")
    except (ValueError, KeyError, TypeError):
        kind, message, path = "http_error", bytes(content[:500]).decode("utf-8", "replace"), None
    cls = UnknownHandleError if status == 410 else RemoteError
    return cls(status, kind, message, path)
