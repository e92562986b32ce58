"""The ASGI application that serves one `Component` over HTTP.

Endpoints (all ``POST`` except the ``GET`` ones):

- ``/apply``: ``{"inputs", "keep_residuals"?, "batch_size"?, "batched_paths"?}`` →
  ``{"outputs", "handle"?}``.
- ``/jacobian``: ``{"inputs", "jac_inputs", "jac_outputs"}`` → ``{"jacobian"}``.
- ``/jvp``: ``{"inputs", "jvp_inputs", "jvp_outputs", "tangents"}`` → ``{"jvp"}``.
- ``/vjp``: ``{"inputs" | "handle", "vjp_inputs", "vjp_outputs", "cotangents"}`` →
  ``{"vjp"}``.
- ``/abstract_eval``: ``{"abstract_inputs"}`` → ``{"outputs"}``.
- ``GET /health``, ``GET /openapi.json`` (the schema), ``GET /stats`` (request
  counters).
- ``/tesseract/...``: the same component through tesseract-core's REST API (see
  `_tesseract_api`).

Errors are JSON ``{"error", "message", "path"}``: 401 (token), 404/405 (and any other
error Starlette itself answers), 410 (unknown or expired handle — answer it by
re-sending the inputs), 413 (body too large, or a Jacobian larger than
``max_jacobian_bytes``), 415 (content type), 422 (anything wrong with the request's
content). Bad input never gives a 500.
"""

from __future__ import annotations

import json
import os
from functools import partial
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from ._batching import split_batch, stack
from ._encoding import JSON
from ._errors import HTTPError, error_response, internal_error, starlette_error
from ._handles import HandleStore, UnknownHandle
from ._jacobian_size import jacobian_nbytes
from ._malloc import release_free_memory
from ._paths import keyed_prefixes
from ._request_fields import FIELDS
from ._request_handling import RequestHandling
from ._schema import leaf_specs, openapi_schema
from ._tesseract_api import tesseract_mount

__all__ = ["DEFAULT_MAX_BODY_SIZE", "DEFAULT_MAX_JACOBIAN_BYTES", "create_app"]

DEFAULT_MAX_BODY_SIZE = 256 * 2**20
DEFAULT_MAX_JACOBIAN_BYTES = 2**30
_MIN_TRIM_STEP = 8 * 2**20

# -- the application --------------------------------------------------------------


class _Server(RequestHandling):
    """One served component: its five operations and the ``GET`` endpoints, on top of
    the request handling they share (token, body, counters, errors)."""

    def __init__(
        self,
        component: Any,
        token: str | None,
        max_body_size: int,
        handles: HandleStore,
        max_batch: int,
        max_jacobian_bytes: int,
    ):
        super().__init__(component, token, max_body_size)
        self.handles = handles
        self.max_batch = max_batch
        self.max_jacobian_bytes = max_jacobian_bytes
        self._schema: dict[str, Any] | None = None
        self._trimmed_at = 0

    # -- the five operations

    def apply(self, doc: dict) -> dict:
        comp, inputs = self.component, doc["inputs"]
        keep = doc.get("keep_residuals", False)
        size = doc.get("batch_size")
        if not isinstance(keep, bool):
            raise HTTPError(
                422, "invalid_field", "keep_residuals must be a bool.", "keep_residuals"
            )
        if size is not None:
            if type(size) is not int or not 1 <= size <= self.max_batch:
                raise HTTPError(
                    422,
                    "invalid_field",
                    f"batch_size must be an int in [1, {self.max_batch}].",
                    "batch_size",
                )
            if keep:
                raise HTTPError(
                    422,
                    "invalid_field",
                    "keep_residuals is not supported with batch_size.",
                    "keep_residuals",
                )
            keyed = keyed_prefixes(spec["path"] for spec in leaf_specs(comp.input_spec()))
            elements = split_batch(inputs, doc.get("batched_paths") or [], size, keyed)
            return {
                "outputs": stack([self._call("inputs", partial(comp.apply, e)) for e in elements])
            }
        if not keep:
            return {"outputs": self._call("inputs", lambda: comp.apply(inputs))}
        outputs, residuals = self._call("inputs", lambda: comp.apply_keep(inputs))
        handle = self.handles.put(residuals)
        self._release_after_churn()
        return {"outputs": outputs, "handle": handle}

    def _release_after_churn(self) -> None:
        # Kept residuals pin the heap between them; once the store is half full, every
        # max_bytes / 16 of residuals kept, free memory goes back to the system (see
        # release_free_memory). Below half, held and pinned memory together stay under
        # the limit, and the warm heap is left alone (it saves page faults).
        handles = self.handles
        step = max(handles.max_bytes // 16, _MIN_TRIM_STEP)
        with self._lock:
            due = (
                handles.nbytes >= handles.max_bytes // 2
                and handles.kept_bytes - self._trimmed_at >= step
            )
            if due:
                self._trimmed_at = self.handles.kept_bytes
        if due:
            release_free_memory()

    def jacobian(self, doc: dict) -> dict:
        args = (doc["inputs"], doc["jac_inputs"], doc["jac_outputs"])
        nbytes = self._call(None, lambda: jacobian_nbytes(self.component, *args))
        if nbytes > self.max_jacobian_bytes:
            raise HTTPError(
                413,
                "jacobian_too_large",
                f"the Jacobian asked for holds {nbytes} bytes; this server computes at most "
                f"{self.max_jacobian_bytes} (--max-jacobian-size). Ask for fewer outputs or "
                "inputs at a time, or use /jvp or /vjp.",
                "jac_outputs",
            )
        return {
            "jacobian": self._call(
                None,
                lambda: self.component.jacobian(
                    doc["inputs"], doc["jac_inputs"], doc["jac_outputs"]
                ),
            )
        }

    def jvp(self, doc: dict) -> dict:
        return {
            "jvp": self._call(
                None,
                lambda: self.component.jvp(
                    doc["inputs"], doc["jvp_inputs"], doc["jvp_outputs"], doc["tangents"]
                ),
            )
        }

    def vjp(self, doc: dict) -> dict:
        comp = self.component
        args = (doc["vjp_inputs"], doc["vjp_outputs"], doc["cotangents"])
        if ("handle" in doc) == ("inputs" in doc):
            raise HTTPError(
                422, "invalid_request", "/vjp takes exactly one of 'inputs', 'handle'.", "handle"
            )
        if "inputs" in doc:
            return {"vjp": self._call(None, lambda: comp.vjp(doc["inputs"], *args))}
        handle = doc["handle"]
        if not isinstance(handle, str):
            raise HTTPError(422, "invalid_field", "handle must be a string.", "handle")
        try:
            residuals = self.handles.get(handle)
        except UnknownHandle:
            raise HTTPError(
                410,
                "unknown_handle",
                "this handle is unknown or has expired; send the inputs instead.",
                "handle",
            ) from None
        return {"vjp": self._call(None, lambda: comp.vjp_from(residuals, *args))}

    def abstract_eval(self, doc: dict) -> dict:
        return {
            "outputs": self._call(
                "abstract_inputs", lambda: self.component.abstract_eval(doc["abstract_inputs"])
            )
        }

    # -- GET endpoints

    async def health(self, request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def schema(self, request: Request) -> Response:
        try:
            self._authorize(request)
        except HTTPError as exc:
            return error_response(exc)
        if self._schema is None:
            self._schema = openapi_schema(self.component, max_batch=self.max_batch)
        return Response(json.dumps(self._schema), media_type=JSON)

    async def stats(self, request: Request) -> Response:
        try:
            self._authorize(request)
        except HTTPError as exc:
            return error_response(exc)
        with self._lock:
            body = {
                "requests": dict(self.counts),
                "bytes_received": self.bytes_in,
                "bytes_sent": self.bytes_out,
                "handles": len(self.handles),
                "handle_bytes": self.handles.nbytes,
            }
        return JSONResponse(body)


def create_app(
    component: Any,
    *,
    token: str | None = None,
    max_body_size: int = DEFAULT_MAX_BODY_SIZE,
    handles: HandleStore | None = None,
    max_batch: int = 4096,
    max_jacobian_bytes: int = DEFAULT_MAX_JACOBIAN_BYTES,
    files: str | os.PathLike | None = None,
) -> Starlette:
    """An ASGI app serving ``component``'s five endpoints, health, schema and stats.

    **Arguments:**

    - `component`: a `gradpipe.component.Component`.
    - `token`: when given, every endpoint but ``/health`` needs
      ``Authorization: Bearer <token>`` (else 401).
    - `max_body_size`: larger request bodies get 413 before they are read in full.
    - `handles`: where forward requests keep residuals (a default `HandleStore`).
    - `max_batch`: the largest ``batch_size`` a batched ``/apply`` may ask for.
    - `max_jacobian_bytes`: a ``/jacobian`` whose blocks would hold more bytes (known
      from the shapes, before computing) gets 413.
    - `files`: a directory for the file references (``json+binref``) of the
      tesseract API at ``/tesseract``: requests may name files in it, and responses
      are written under it when a client asks for them. Without it that API takes
      and answers only JSON and base64 buffers.

    **Returns:** a Starlette application; run it with uvicorn, or `gradpipe serve`.
    """
    if max_body_size < 1:
        raise ValueError(f"max_body_size must be a positive number of bytes, got {max_body_size}.")
    if max_jacobian_bytes < 1:
        raise ValueError(
            f"max_jacobian_bytes must be a positive number of bytes, got {max_jacobian_bytes}."
        )
    server = _Server(
        component,
        token,
        max_body_size,
        handles if handles is not None else HandleStore(),
        max_batch,
        max_jacobian_bytes,
    )
    routes: list[BaseRoute] = [
        Route(f"/{name}", server.endpoint(name, getattr(server, name)), methods=["POST"])
        for name in FIELDS
    ]
    routes += [
        Route("/health", server.health, methods=["GET"]),
        Route("/openapi.json", server.schema, methods=["GET"]),
        Route("/stats", server.stats, methods=["GET"]),
        tesseract_mount(server, files),
    ]
    app = Starlette(
        routes=routes,
        exception_handlers={HTTPException: starlette_error, Exception: internal_error},
    )
    app.state.server = server
    return app
