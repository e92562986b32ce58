"""The ``gradpipe serve`` and ``gradpipe call`` subcommands."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from gradpipe.core import parse_size

__all__ = ["main"]


def _size(text: str) -> int:
    try:
        value = parse_size(text, name="the size")
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    if value < 1:
        raise argparse.ArgumentTypeError("the size must be positive")
    return value


def _parsers() -> dict[str, argparse.ArgumentParser]:
    serve = argparse.ArgumentParser(
        prog="gradpipe serve",
        description="Serve MODULE:ATTR (a Component) with /apply, /jacobian, /jvp, /vjp, "
        "/abstract_eval, /health, /openapi.json and /stats.",
    )
    serve.add_argument("target", metavar="MODULE:ATTR")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument("--workers", type=int, default=1)
    serve.add_argument(
        "--token",
        default=None,
        help="bearer token to require (default: $GRADPIPE_TOKEN; the variable "
        "keeps it out of the process list)",
    )
    serve.add_argument(
        "--max-body-size",
        type=_size,
        default="256MiB",
        help="largest request body, e.g. 64MiB (2^20 bytes each) or 64MB (10^6 bytes "
        "each); a bare number is bytes (default 256MiB)",
    )
    serve.add_argument("--app-dir", default=".", help="directory to import MODULE from")
    serve.add_argument(
        "--max-handles",
        type=int,
        default=64,
        help="residual sets kept for /vjp by handle, per worker (default 64)",
    )
    serve.add_argument(
        "--max-handle-bytes",
        type=_size,
        default="1GiB",
        help="bytes of residuals kept, per worker, e.g. 512MiB (default 1GiB)",
    )
    serve.add_argument(
        "--handle-ttl",
        type=float,
        default=600.0,
        help="seconds an unused residual handle lives (default 600)",
    )
    serve.add_argument(
        "--max-jacobian-size",
        type=_size,
        default="1GiB",
        help="largest /jacobian answer, e.g. 256MiB; the size is known from the shapes and "
        "a larger request gets 413 before anything is computed (default 1GiB)",
    )
    serve.add_argument("--log-level", default="info")

    call = argparse.ArgumentParser(
        prog="gradpipe call",
        description="POST a JSON payload to ENDPOINT and print the JSON answer. Arrays are "
        '{"object_type": "array", "dtype", "shape", "data": {"buffer", "encoding"}} with '
        'encoding "base64" or "json" (nested lists). health, stats and openapi.json are GETs.',
    )
    call.add_argument("url")
    call.add_argument("endpoint")
    call.add_argument(
        "payload", nargs="?", default=None, help="@file.json, - for stdin, or the JSON text itself"
    )
    call.add_argument("--token", default=None, help="bearer token (default: $GRADPIPE_TOKEN)")
    call.add_argument("--timeout", type=float, default=300.0)
    return {"serve": serve, "call": call}


def main(command: str, argv: list[str]) -> int:
    """Run ``gradpipe serve ...`` or ``gradpipe call ...`` with the remaining arguments."""
    args = _parsers()[command].parse_args(argv)
    return run_serve(args) if command == "serve" else run_call(args)


def run_serve(args: argparse.Namespace) -> int:
    from ._handles import HandleStore
    from ._server import load_component, serve

    try:
        load_component(args.target, args.app_dir)
        HandleStore(args.max_handles, args.max_handle_bytes, args.handle_ttl)
    except (ImportError, ValueError, TypeError) as exc:
        print(f"gradpipe serve: {exc}", file=sys.stderr)
        return 2
    serve(
        args.target,
        host=args.host,
        port=args.port,
        workers=args.workers,
        token=args.token,
        max_body_size=args.max_body_size,
        app_dir=args.app_dir,
        log_level=args.log_level,
        max_handles=args.max_handles,
        max_handle_bytes=args.max_handle_bytes,
        handle_ttl=args.handle_ttl,
        max_jacobian_bytes=args.max_jacobian_size,
    )
    return 0


def _payload(spec: str | None) -> bytes:
    if spec is None:
        return b"{}"
    if spec == "-":
        return sys.stdin.buffer.read()
    if spec.startswith("@"):
        return Path(spec[1:]).read_bytes()
    return spec.encode()


def run_call(args: argparse.Namespace) -> int:
    import os

    import httpx

    from ._client import TOKEN_ENV
    from ._encoding import JSON

    token = args.token if args.token is not None else os.environ.get(TOKEN_ENV)
    headers = {"Content-Type": JSON, "Accept": JSON}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    url = f"{args.url.rstrip('/')}/{args.endpoint.lstrip('/')}"
    try:
        if args.endpoint.strip("/") in ("health", "stats", "openapi.json"):
            response = httpx.get(url, headers=headers, timeout=args.timeout)
        else:
            response = httpx.post(
                url, content=_payload(args.payload), headers=headers, timeout=args.timeout
            )
    except (OSError, httpx.HTTPError) as exc:
        print(f"gradpipe call: {url}: {exc}", file=sys.stderr)
        return 2
    try:
        text = json.dumps(response.json(), indent=2)
    except ValueError:
        text = response.text
    if response.status_code != 200:
        print(f"HTTP {response.status_code}: {text}", file=sys.stderr)
        return 1
    print(text)
    return 0
