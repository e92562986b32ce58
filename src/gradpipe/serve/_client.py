"""The HTTP transport of gradpipe's client: one pooled connection set per server."""

from __future__ import annotations

import json
import os
import threading
from typing import Any

import httpx

from ._encoding import BINARY, JSON, decode, encode, media_type

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
        self._lock = threading.Lock()
        self.requests = 0
        self.bytes_sent = 0

    def close(self) -> None:
        """Close the pooled connections."""
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def post(self, endpoint: str, document: dict[str, Any]) -> dict[str, Any]:
        """POST ``document`` to ``/endpoint`` and decode the answer.

        Raises `UnknownHandleError` for 410, `RemoteError` for any other error status.
        """
        body = encode(document, self.content_type)
        with self._lock:
            self.requests += 1
            self.bytes_sent += len(body)
        response = self._http.post(f"/{endpoint}", content=body)
        if response.status_code != 200:
            raise _error(response)
        kind = media_type(response.headers.get("content-type")) or JSON
        return decode(response.content, kind)

    def get(self, endpoint: str) -> Any:
        """GET ``/endpoint`` (``health``, ``openapi.json``, ``stats``) as JSON."""
        response = self._http.get(f"/{endpoint}")
        if response.status_code != 200:
            raise _error(response)
        return response.json()


def _error(response: httpx.Response) -> RemoteError:
    try:
        body = json.loads(response.content)
        kind, message, path = body["error"], body["message"], body.get("path")
    except (ValueError, KeyError, TypeError):
        kind, message, path = "http_error", response.text[:500], None
    cls = UnknownHandleError if response.status_code == 410 else RemoteError
    return cls(response.status_code, kind, message, path)
