"""gradpipe.serve: components over HTTP, and remote components inside JAX.

- `create_app(component)`: the ASGI app (Starlette) with ``/apply``, ``/jacobian``,
  ``/jvp``, ``/vjp``, ``/abstract_eval``, ``/health``, ``/openapi.json``, ``/stats``.
- `serve(target)`: run it on uvicorn (what ``gradpipe serve MODULE:ATTR`` does).
- `connect(url)`: a `RemoteComponent`, usable from Python, from JAX (``jit``,
  ``grad``, ``jvp``, ``vmap``) and as an `Operator` in pipelines; for a tesseract-core
  runtime at ``url`` a `TesseractRemote`, the same over that protocol
  (`connect_tesseract` takes its options).
- Every server also answers tesseract-core's REST API under ``/tesseract``
  (`TESSERACT_PREFIX`), for the clients of that runtime.

Arrays travel as ``application/x-gradpipe+msgpack`` (raw little-endian buffers) or
``application/json`` (base64), chosen by ``Content-Type`` and ``Accept``.
"""

try:
    import httpx as _httpx  # noqa: F401
    import msgpack as _msgpack  # noqa: F401
    import starlette as _starlette  # noqa: F401
    import uvicorn as _uvicorn  # noqa: F401
except ImportError as _exc:  # pragma: no cover - exercised without the extra
    raise ImportError(
        f"gradpipe.serve needs the HTTP stack, which is not installed ({_exc.name} is "
        "missing). Install the extra: pip install 'gradpipe[serve]'."
    ) from _exc

from ._app import DEFAULT_MAX_BODY_SIZE, create_app
from ._client import Client, RemoteError, UnknownHandleError
from ._connect import connect
from ._encoding import BINARY, JSON, PayloadError, decode, encode
from ._handles import HandleStore
from ._remote import RemoteComponent
from ._server import TOKEN_ENV, load_component, serve
from ._tesseract_api import TESSERACT_PREFIX
from ._tesseract_remote import TesseractRemote, connect_tesseract

__all__ = [
    "BINARY",
    "DEFAULT_MAX_BODY_SIZE",
    "JSON",
    "TESSERACT_PREFIX",
    "TOKEN_ENV",
    "Client",
    "HandleStore",
    "PayloadError",
    "RemoteComponent",
    "RemoteError",
    "TesseractRemote",
    "UnknownHandleError",
    "connect",
    "connect_tesseract",
    "create_app",
    "decode",
    "encode",
    "load_component",
    "serve",
]
