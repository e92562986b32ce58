"""The error a request handler raises to answer with a 4xx status."""

from __future__ import annotations

__all__ = ["HTTPError"]


class HTTPError(Exception):
    """An error answered with ``status`` and a JSON body naming ``path``."""

    def __init__(self, status: int, kind: str, message: str, path: str | None = None):
        super().__init__(message)
        self.status, self.kind, self.message, self.path = status, kind, message, path
