"""tesseract-core's REST API, served by a gradpipe server under ``/tesseract``.

A client of the tesseract runtime (``Tesseract.from_url(url + "/tesseract")``,
tesseract-jax's ``apply_tesseract``, or plain HTTP) talks to a gradpipe component as
it would to ``tesseract-runtime serve``:

- ``POST /tesseract/apply`` ``{"inputs"}`` → the outputs;
  ``/jacobian`` ``{"inputs", "jac_inputs", "jac_outputs"}`` →
  ``{output path: {input path: array}}``; ``/jacobian_vector_product``
  ``{"inputs", "jvp_inputs", "jvp_outputs", "tangent_vector"}`` →
  ``{output path: array}``; ``/vector_jacobian_product`` ``{"inputs", "vjp_inputs",
  "vjp_outputs", "cotangent_vector"}`` → ``{input path: array}``;
  ``/abstract_eval`` ``{"inputs": shapes and dtypes}`` → output shapes and dtypes.
- ``GET /tesseract/health`` ``{"status": "ok"}``; ``GET /tesseract/openapi.json``
  (the schemas; see `_tesseract_schema`).

Responses encode arrays as the ``Accept`` header asks: ``application/json``
(nested lists), ``application/json+base64`` (the default) or
``application/json+binref`` (files under the server's ``files`` directory, which a
client on the same machine reads; only when the server has one). Requests may use
any of the three encodings (binref only with ``files``).

Errors take the peer's shape: ``{"detail": [{"type", "loc", "msg", "input"}]}`` with
422 for anything wrong with the request's content (the peer's client turns it into
a pydantic ``ValidationError``), ``{"detail": "..."}`` for 401, 404, 405, 406, 413.

The endpoints are the server's own: the same component, token, body limit,
Jacobian limit, request counters (as ``tesseract/apply`` ...) and residual cache (an
``apply`` keeps the residuals a following ``vector_jacobian_product`` on the same
inputs reuses).
"""

from __future__ import annotations

import json
import os
import re
import time
import uuid
from pathlib import Path
from typing import Any, cast

import jax
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Mount, Route

from ._errors import HTTPError
from ._json_body import loads as load_json
from ._json_body import with_text
from ._tesseract_schema import tesseract_openapi
from ._tesseract_wire import FileWriter, WireError, decode_arrays, encode_arrays, to_gradpipe_path

__all__ = ["TESSERACT_PREFIX", "tesseract_mount"]

TESSERACT_PREFIX = "/tesseract"
_METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]
_FORMATS = {"json": "json", "json+base64": "base64", "json+binref": "binref"}
_DEFAULT_FORMAT = "json+base64"
_RUN_ID = re.compile(r"[A-Za-z0-9_.-]{1,128}")

# endpoint -> (required fields, path-list fields, vector field and its gradpipe name)
_FIELDS: dict[str, tuple[tuple[str, ...], tuple[str, ...], tuple[str, str] | None]] = {
    "apply": (("inputs",), (), None),
    "abstract_eval": (("inputs",), (), None),
    "jacobian": (("inputs", "jac_inputs", "jac_outputs"), ("jac_inputs", "jac_outputs"), None),
    "jacobian_vector_product": (
        ("inputs", "jvp_inputs", "jvp_outputs", "tangent_vector"),
        ("jvp_inputs", "jvp_outputs"),
        ("tangent_vector", "tangents"),
    ),
    "vector_jacobian_product": (
        ("inputs", "vjp_inputs", "vjp_outputs", "cotangent_vector"),
        ("vjp_inputs", "vjp_outputs"),
        ("cotangent_vector", "cotangents"),
    ),
}


class _Invalid(Exception):
    """A 422 in the peer's shape: a list of ``{"type", "loc", "msg", "input"}``."""

    def __init__(self, kind: str, loc: list[Any], message: str, value: Any = None):
        self.detail = [{"type": kind, "loc": loc, "msg": message, "input": with_text(value)}]


def _detail(status: int, detail: Any, headers: dict | None = None) -> JSONResponse:
    return JSONResponse({"detail": detail}, status_code=status, headers=headers)


def _loc(path: str | None) -> list[Any]:
    """A gradpipe path (``inputs.layers[0].w``) as the peer's location list."""
    if not path:
        return ["body"]
    parts: list[Any] = ["body"]
    for name, index in re.findall(r'([A-Za-z_][A-Za-z0-9_]*)|\[("(?:[^"\\]|\\.)*"|[^\]]*)\]', path):
        if name:
            parts.append(name)
        elif index.isdigit():
            parts.append(int(index))
        else:
            parts.append(json.loads(index) if index.startswith('"') else index)
    return parts


def _negotiate(accept: str | None, formats: list[str]) -> str:
    """The output format ``Accept`` asks for, as the peer reads it; 406 if none fits."""
    if not accept:
        return _DEFAULT_FORMAT
    ranges = []
    for order, item in enumerate(accept.split(",")):
        media, *params = item.split(";")
        options = {}
        for param in params:
            key, _, value = param.partition("=")
            options[key.strip().lower()] = value.strip().strip('"')
        try:
            quality = float(options.get("q", 1.0))
        except ValueError:
            quality = 0.0
        ranges.append((-quality, order, media.strip().lower(), options))
    for _, _, media, options in sorted(ranges):
        if not media:
            continue
        chosen = _DEFAULT_FORMAT if media in ("*/*", "application/*") else media.rpartition("/")[2]
        if (
            chosen in formats
            and options.get("gpu_transport", "none") == "none"
            and options.get("compression", "none") == "none"
        ):
            return chosen
    raise HTTPError(406, "not_acceptable", json.dumps({
        "message": f"Cannot produce any encoding accepted by {accept!r}",
        "available_formats": formats, "available_gpu_transports": ["none"],
        "available_compressions": ["none"],
    }))  # fmt: skip


class _TesseractAPI:
    def __init__(self, server: Any, files: Path | None):
        self.server = server
        self.files = files
        self.formats = [f for f in _FORMATS if f != "json+binref" or files is not None]
        self._schema: dict[str, Any] | None = None

    # -- requests

    def route(self, name: str) -> Route:
        async def handle(request: Request) -> Response:
            if request.method != "POST":
                return _detail(405, "Method Not Allowed", {"Allow": "POST"})
            received = 0
            try:
                self.server._authorize(request)
                output = _negotiate(request.headers.get("accept"), self.formats)
                run_id = request.query_params.get("run_id") or str(uuid.uuid4())
                if not _RUN_ID.fullmatch(run_id):
                    raise _Invalid("string_pattern_mismatch", ["query", "run_id"],
                                   "run_id may hold letters, digits, '_', '.' and '-' only",
                                   run_id)  # fmt: skip
                start = time.perf_counter()
                body = await self.server._read_body(request)
                received = len(body)
                read = time.perf_counter() - start
                content, timing = await run_in_threadpool(self._process, name, body, output, run_id)
            except _Invalid as exc:
                self.server._count(f"tesseract/{name}:422", received)
                return _detail(422, exc.detail)
            except HTTPError as exc:
                self.server._count(f"tesseract/{name}:{exc.status}", received)
                if exc.status == 422:
                    path = exc.path or ""
                    if path.split(".")[0].split("[")[0] not in _FIELDS[name][0]:
                        path = f"inputs.{path}" if path else "inputs"
                    return _detail(422, [{"type": exc.kind, "loc": _loc(path),
                                          "msg": exc.message, "input": None}])  # fmt: skip
                detail: Any = json.loads(exc.message) if exc.status == 406 else exc.message
                headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
                return _detail(exc.status, detail, headers)
            self.server._count(f"tesseract/{name}", received, len(content))
            timing = {"read": read, **timing, "total": time.perf_counter() - start}
            server_timing = ", ".join(f"{k};dur={v * 1e3:.2f}" for k, v in timing.items())
            return Response(content, media_type=f"application/{output}",
                            headers={"Server-Timing": server_timing})  # fmt: skip

        return Route(f"/{name}", handle, methods=_METHODS)

    def _process(
        self, name: str, body: bytes, output: str, run_id: str
    ) -> tuple[bytes, dict[str, float]]:
        """The response body of one request, and the seconds its decoding, computing
        and encoding took."""
        t0 = time.perf_counter()
        try:
            # Array buffers stay bytes (Base64Buffer): every value of the body goes
            # through decode_arrays or, in an error, with_text.
            document = load_json(body, as_text=False)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            where = getattr(exc, "pos", getattr(exc, "start", 0))
            raise _Invalid("json_invalid", ["body", where], "JSON decode error",
                           {"error": str(exc)}) from None  # fmt: skip
        except (RecursionError, ValueError) as exc:
            raise _Invalid("json_invalid", ["body"], f"JSON decode error ({exc})") from None
        if not isinstance(document, dict):
            raise _Invalid("model_attributes_type", ["body"],
                           "Input should be a valid dictionary or object to extract fields "
                           "from")  # fmt: skip
        required, path_lists, vector = _FIELDS[name]
        for field in document:
            if field not in required:
                raise _Invalid("extra_forbidden", ["body", field],
                               "Extra inputs are not permitted", document[field])  # fmt: skip
        for field in required:
            if field not in document:
                raise _Invalid("missing", ["body", field], "Field required")
        if not isinstance(document["inputs"], dict):
            raise _Invalid("model_attributes_type", ["body", "inputs"],
                           "Input should be a valid dictionary or object to extract fields "
                           "from")  # fmt: skip
        try:
            inputs = decode_arrays(document["inputs"], ["body", "inputs"], self.files)
            names: dict[str, str] = {}  # gradpipe path -> the caller's tesseract path
            lists = {field: self._paths(document[field], field, names) for field in path_lists}
            vectors = None
            if vector is not None:
                given = document[vector[0]]
                if not isinstance(given, dict):
                    raise _Invalid("dict_type", ["body", vector[0]], "Input should be a valid "
                                   "dictionary")  # fmt: skip
                vectors = {
                    self._path(path, [vector[0], path], names):
                    decode_arrays(value, ["body", vector[0], path], self.files)
                    for path, value in given.items()
                }  # fmt: skip
        except WireError as exc:
            raise _Invalid(exc.kind, exc.loc, exc.message, exc.value) from None
        t1 = time.perf_counter()
        result = jax.block_until_ready(self._compute(name, inputs, lists, vectors, names))
        t2 = time.perf_counter()
        # json+binref is in self.formats, so negotiable, only when files is not None.
        writer = FileWriter(cast(Path, self.files), run_id) if output == "json+binref" else None
        try:
            content = encode_arrays(result, _FORMATS[output], writer)
        except (TypeError, ValueError) as exc:
            raise HTTPError(422, "unencodable_output", f"an output cannot be sent: {exc}") from None
        finally:
            if writer is not None:
                writer.close()
        timing = {"decode": t1 - t0, "compute": t2 - t1, "encode": time.perf_counter() - t2}
        return content, timing

    def _path(self, path: Any, loc: list[Any], names: dict[str, str]) -> str:
        if not isinstance(path, str):
            raise _Invalid("string_type", ["body", *loc], "Input should be a valid string", path)
        try:
            translated = to_gradpipe_path(path)
        except ValueError as exc:
            raise _Invalid("value_error", ["body", *loc], str(exc), path) from None
        names.setdefault(translated, path)
        return translated

    def _paths(self, paths: Any, field: str, names: dict[str, str]) -> list[str]:
        if not isinstance(paths, list):
            raise _Invalid("list_type", ["body", field], "Input should be a valid list", paths)
        return [self._path(p, [field, i], names) for i, p in enumerate(paths)]

    def _compute(
        self, name: str, inputs: dict, lists: dict[str, list[str]], vectors: dict | None,
        names: dict[str, str],
    ) -> Any:  # fmt: skip
        server = self.server

        def back(tree: dict) -> dict:
            return {names.get(path, path): value for path, value in tree.items()}

        if name == "apply":
            return server.apply({"inputs": inputs})["outputs"]
        if name == "abstract_eval":
            return server.abstract_eval({"abstract_inputs": inputs})["outputs"]
        if name == "jacobian":
            doc = {"inputs": inputs, **lists}
            return {
                names.get(o, o): back(row) for o, row in server.jacobian(doc)["jacobian"].items()
            }
        if name == "jacobian_vector_product":
            return back(server.jvp({"inputs": inputs, **lists, "tangents": vectors})["jvp"])
        return back(server.vjp({"inputs": inputs, **lists, "cotangents": vectors})["vjp"])

    # -- GET endpoints and the rest

    async def health(self, request: Request) -> Response:
        if request.method != "GET":
            return _detail(405, "Method Not Allowed", {"Allow": "GET"})
        return JSONResponse({"status": "ok"})

    async def openapi(self, request: Request) -> Response:
        if request.method != "GET":
            return _detail(405, "Method Not Allowed", {"Allow": "GET"})
        try:
            self.server._authorize(request)
        except HTTPError as exc:
            return _detail(401, exc.message, {"WWW-Authenticate": "Bearer"})
        if self._schema is None:
            self._schema = tesseract_openapi(self.server.component, self.formats)
        return JSONResponse(self._schema)

    async def not_found(self, request: Request) -> Response:
        return _detail(404, "Not Found")


def tesseract_mount(server: Any, files: str | os.PathLike[str] | None = None) -> Mount:
    """The tesseract API of ``server`` (an `_app._Server`) as a Starlette `Mount` at
    ``/tesseract``; ``files`` is the directory of file references (json+binref)."""
    api = _TesseractAPI(server, None if files is None else Path(files))
    routes = [api.route(name) for name in _FIELDS]
    routes += [
        Route("/health", api.health, methods=_METHODS),
        Route("/openapi.json", api.openapi, methods=_METHODS),
        Route("/{rest:path}", api.not_found, methods=_METHODS),
    ]
    return Mount(TESSERACT_PREFIX, routes=routes)
