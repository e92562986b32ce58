"""The error a request handler raises to answer with a 4xx status, and the JSON
answers ``{"error", "message", "path"}`` every error gets, Starlette's own included."""

from __future__ import annotations

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

__all__ = ["HTTPError", "error_response", "internal_error", "starlette_error"]


class HTTPError(Exception):
    """An error answered with ``status`` and a JSON body naming ``path``."""

    def __init__(self, status: int, kind: str, message: str, path: str | None = None):
        super().__init__(message)
        self.status, self.kind, self.message, self.path = status, kind, message, path


def error_response(exc: HTTPError) -> JSONResponse:
    body = {"error": exc.kind, "message": exc.message, "path": exc.path}
    headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
    return JSONResponse(body, status_code=exc.status, headers=headers)


_STARLETTE_KINDS = {404: "not_found", 405: "method_not_allowed"}


async def starlette_error(request: Request, exc: Exception) -> Response:
    """Errors Starlette answers itself (no route, wrong method), in the JSON shape."""
    assert isinstance(exc, HTTPException)
    if exc.status_code == 404:
        message = f"there is no endpoint {request.url.path}; see /openapi.json."
    elif exc.status_code == 405:
        allowed = exc.headers.get("Allow", "") if exc.headers else ""
        message = f"{request.url.path} does not take {request.method}; it takes {allowed}."
    else:
        message = str(exc.detail)
    kind = _STARLETTE_KINDS.get(exc.status_code, "http_error")
    body = {"error": kind, "message": message, "path": None}
    return JSONResponse(body, status_code=exc.status_code, headers=exc.headers)


async def internal_error(request: Request, exc: Exception) -> Response:
    """A bug, not bad input: still answered in the JSON shape (and logged)."""
    body = {"error": "internal_error", "message": f"{type(exc).__name__}", "path": None}
    return JSONResponse(body, status_code=500)
