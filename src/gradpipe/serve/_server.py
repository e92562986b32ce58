"""Loading a component by ``MODULE:ATTR`` and running it on uvicorn."""

from __future__ import annotations

import importlib
import json
import os
import sys
from typing import TYPE_CHECKING, Any

from ._app import DEFAULT_MAX_BODY_SIZE, DEFAULT_MAX_JACOBIAN_BYTES, create_app
from ._client import TOKEN_ENV
from ._handles import HandleStore
from ._malloc import tune_malloc

if TYPE_CHECKING:
    from starlette.applications import Starlette

__all__ = ["TOKEN_ENV", "app_from_env", "load_component", "serve", "tune_malloc"]

_TARGET_ENV = "GRADPIPE_SERVE_TARGET"
_MAX_BODY_ENV = "GRADPIPE_SERVE_MAX_BODY_SIZE"
_MAX_JACOBIAN_ENV = "GRADPIPE_SERVE_MAX_JACOBIAN_BYTES"
_APP_DIR_ENV = "GRADPIPE_SERVE_APP_DIR"
_HANDLES_ENV = "GRADPIPE_SERVE_HANDLES"
_FILES_ENV = "GRADPIPE_SERVE_FILES"


def load_component(target: str, app_dir: str | None = ".") -> Any:
    """The component named by ``"package.module:attribute"``.

    A `Component` is served as it is; anything else is handed to ``Component(...)``
    (which says what it accepts). ``app_dir`` is put first on ``sys.path``.
    """
    from gradpipe.component import Component

    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"The target must look like 'package.module:attribute', got {target!r}.")
    if app_dir is not None:
        path = os.path.abspath(app_dir)
        if path not in sys.path:
            sys.path.insert(0, path)
    obj: Any = importlib.import_module(module_name)
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ValueError(f"{module_name} has no attribute {attr!r} ({target!r}).") from None
    if isinstance(obj, Component):
        return obj
    try:
        # Always raises: the TypeError names the keyword arguments Component needs.
        return Component(obj)  # type: ignore[call-arg]
    except TypeError as exc:
        raise TypeError(
            f"{target} is a {type(obj).__name__}, not a Component ({exc}). Serve a "
            "Component(fn, inputs=InputModel, outputs=OutputModel)."
        ) from None


def app_from_env() -> Starlette:
    """The app described by environment variables; the factory each worker calls."""
    tune_malloc()
    component = load_component(os.environ[_TARGET_ENV], os.environ.get(_APP_DIR_ENV))
    return create_app(
        component,
        token=os.environ.get(TOKEN_ENV) or None,
        max_body_size=int(os.environ.get(_MAX_BODY_ENV, DEFAULT_MAX_BODY_SIZE)),
        max_jacobian_bytes=int(os.environ.get(_MAX_JACOBIAN_ENV, DEFAULT_MAX_JACOBIAN_BYTES)),
        handles=_handle_store(*json.loads(os.environ.get(_HANDLES_ENV, "[64, 1073741824, 600]"))),
        files=os.environ.get(_FILES_ENV) or None,
    )


def _handle_store(entries: int, nbytes: int, ttl: float) -> HandleStore:
    return HandleStore(max_entries=entries, max_bytes=nbytes, ttl=ttl)


def serve(
    target: str,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    workers: int = 1,
    token: str | None = None,
    max_body_size: int = DEFAULT_MAX_BODY_SIZE,
    app_dir: str = ".",
    log_level: str = "info",
    max_handles: int = 64,
    max_handle_bytes: int = 2**30,
    handle_ttl: float = 600.0,
    max_jacobian_bytes: int = DEFAULT_MAX_JACOBIAN_BYTES,
    files: str | None = None,
) -> None:
    """Serve the component at ``target`` until interrupted.

    **Arguments:**

    - `target`: ``"package.module:attribute"`` naming a `Component`.
    - `host`, `port`: where to listen (loopback by default).
    - `workers`: server processes. Each holds its own residual handles; a vjp that
      reaches another worker gets 410 and the client re-sends the inputs.
    - `token`: require ``Authorization: Bearer <token>``; defaults to ``GRADPIPE_TOKEN``.
    - `max_body_size`: bytes; larger requests get 413.
    - `app_dir`: directory put first on ``sys.path`` to import ``target``.
    - `max_handles`, `max_handle_bytes`, `handle_ttl`: the bounds of the residual
      store of each worker (see `HandleStore`).
    - `max_jacobian_bytes`: a ``/jacobian`` whose answer would hold more bytes
      (known from the shapes before computing) gets 413.
    - `files`: the directory of file references (``json+binref``) of the tesseract
      API at ``/tesseract`` (see `create_app`).

    Each server process tunes glibc's allocator first (`tune_malloc`).
    """
    import uvicorn

    token = token if token is not None else os.environ.get(TOKEN_ENV) or None
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}.")
    limits = (max_handles, max_handle_bytes, handle_ttl)
    store = _handle_store(*limits)  # checks the limits before any worker starts
    if workers == 1:
        tune_malloc()
        component = load_component(target, app_dir)
        app = create_app(
            component,
            token=token,
            max_body_size=max_body_size,
            handles=store,
            max_jacobian_bytes=max_jacobian_bytes,
            files=files,
        )
        uvicorn.run(app, host=host, port=port, log_level=log_level, access_log=False)
        return
    load_component(target, app_dir)  # fail here, not in every worker
    os.environ[_TARGET_ENV] = target
    os.environ[_APP_DIR_ENV] = os.path.abspath(app_dir)
    os.environ[_MAX_BODY_ENV] = str(max_body_size)
    os.environ[_MAX_JACOBIAN_ENV] = str(max_jacobian_bytes)
    os.environ[_HANDLES_ENV] = json.dumps(limits)
    if files is not None:
        os.environ[_FILES_ENV] = os.path.abspath(files)
    if token:
        os.environ[TOKEN_ENV] = token
    uvicorn.run(
        "gradpipe.serve._server:app_from_env",
        factory=True,
        host=host,
        port=port,
        workers=workers,
        log_level=log_level,
        access_log=False,
    )
