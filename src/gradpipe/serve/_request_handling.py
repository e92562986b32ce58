"""The request handling every endpoint of a served component shares, apart from the
operations themselves: the bearer-token check, reading a body within the size limit,
the request and byte counters, decoding, running and encoding an operation on a worker
thread (with its ``Server-Timing``), and a component's refusal turned into a 422."""

from __future__ import annotations

import hmac
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import jax
from starlette.concurrency import run_in_threadpool
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response

from ._encoding import BINARY, JSON, PayloadError, choose_response_type, decode, encode, media_type
from ._errors import HTTPError, error_response
from ._request_fields import check_fields, input_error

__all__ = ["RequestHandling"]


class RequestHandling:
    """What the endpoints of one served component share.

    **Arguments:**

    - `component`: the served `gradpipe.component.Component`.
    - `token`: the bearer token every request but ``/health`` must carry, or ``None``.
    - `max_body_size`: larger request bodies get 413 before they are read in full.
    """

    def __init__(self, component: Any, token: str | None, max_body_size: int) -> None:
        self.component = component
        self.token = token
        self.max_body_size = max_body_size
        self.counts: Counter[str] = Counter()
        self.bytes_in = 0
        self.bytes_out = 0
        self._lock = threading.Lock()

    def _authorize(self, request: Request) -> None:
        if self.token is None:
            return
        header = request.headers.get("authorization", "")
        scheme, _, given = header.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(
            given.strip().encode(), self.token.encode()
        ):
            raise HTTPError(401, "unauthorized", "a valid 'Authorization: Bearer' token is needed.")

    async def _read_body(self, request: Request) -> bytes:
        declared = request.headers.get("content-length")
        if declared is not None:
            if not declared.isdigit():
                raise HTTPError(422, "invalid_request", "Content-Length is not a number.")
            if int(declared) > self.max_body_size:
                raise HTTPError(
                    413,
                    "body_too_large",
                    f"the body has {declared} bytes; this server takes at most "
                    f"{self.max_body_size} (--max-body-size).",
                )
        chunks, size = [], 0
        try:
            async for chunk in request.stream():
                size += len(chunk)
                if size > self.max_body_size:
                    raise HTTPError(
                        413,
                        "body_too_large",
                        f"the body exceeds {self.max_body_size} bytes (--max-body-size).",
                    )
                chunks.append(chunk)
        except ClientDisconnect:
            raise HTTPError(400, "client_disconnected", "the client hung up mid-body.") from None
        return b"".join(chunks)

    def _count(self, name: str, received: int = 0, sent: int = 0) -> None:
        with self._lock:
            self.counts[name] += 1
            self.bytes_in += received
            self.bytes_out += sent

    def endpoint(self, name: str, operation: Callable[[dict], dict]) -> Callable[..., Any]:
        async def handle(request: Request) -> Response:
            received = 0
            try:
                self._authorize(request)
                request_type = media_type(request.headers.get("content-type"))
                if request_type is None:
                    raise HTTPError(
                        415,
                        "unsupported_media_type",
                        f"send Content-Type {BINARY} or {JSON}.",
                    )
                start = time.perf_counter()
                body = await self._read_body(request)
                received = len(body)
                response_type = choose_response_type(request.headers.get("accept"), request_type)
                # Decoding, the operation and encoding (which waits for JAX's results)
                # run on a worker thread, so the event loop keeps serving other clients.
                content, timing = await run_in_threadpool(
                    self._process, name, operation, body, request_type, response_type
                )
                self._count(name, received, len(content))
                timing["read"] = timing["decode_start"] - start
                del timing["decode_start"]
                server_timing = ", ".join(f"{k};dur={v * 1e3:.2f}" for k, v in timing.items())
                headers = {"Server-Timing": server_timing}
                return Response(content, media_type=response_type, headers=headers)
            except HTTPError as exc:
                self._count(f"{name}:{exc.status}", received)
                return error_response(exc)

        return handle

    def _process(
        self, name: str, operation: Callable[[dict], dict], body: bytes, request_type: str,
        response_type: str,
    ) -> tuple[bytes, dict[str, float]]:  # fmt: skip
        t0 = time.perf_counter()
        try:
            document = decode(body, request_type)
        except PayloadError as exc:
            raise HTTPError(422, "malformed_body", str(exc), exc.path or None) from None
        t1 = time.perf_counter()
        result = jax.block_until_ready(operation(check_fields(name, document)))
        t2 = time.perf_counter()
        try:
            content = encode(result, response_type)
        except PayloadError as exc:
            raise HTTPError(422, "unencodable_output", str(exc), exc.path or None) from None
        t3 = time.perf_counter()
        timing = {"decode_start": t0, "decode": t1 - t0, "compute": t2 - t1, "encode": t3 - t2}
        return content, timing

    def _call(self, field: str | None, fn: Callable[[], Any]) -> Any:
        from gradpipe.component import ComponentInputError

        try:
            return fn()
        except HTTPError:
            raise
        except ComponentInputError as exc:
            raise input_error(exc) from None
        except (ValueError, TypeError, KeyError, IndexError, OverflowError) as exc:
            # The component validates its inputs; what still slips through as one of
            # these is a problem with the request's content, not with the server.
            raise input_error(exc, field) from None
