"""The ``gradpipe serve`` and ``gradpipe call`` subcommands."""

from __future__ import annotations

import argparse
import difflib
import json
import sys
from pathlib import Path
from typing import Any

from gradpipe.core import parse_size

from ._encoding import JSON, PayloadError, decode
from ._readable import readable

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
    from gradpipe._cli_common import HelpFormatter

    serve = argparse.ArgumentParser(
        prog="gradpipe serve",
        description="Serve MODULE:ATTR (a Component) with /apply, /jacobian, /jvp, /vjp, "
        "/abstract_eval, /health, /openapi.json and /stats.",
        formatter_class=HelpFormatter,
    )
    serve.add_argument(
        "target", metavar="MODULE:ATTR", help="the Component to serve, e.g. mymodel:component"
    )
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on")
    serve.add_argument("--port", type=int, default=8000, help="port to listen on")
    serve.add_argument("--workers", type=int, metavar="N", default=1, help="worker processes")
    serve.add_argument(
        "--token",
        default=None,
        help="bearer token to require (default: $GRADPIPE_TOKEN, or none; the variable "
        "keeps it out of the process list)",
    )
    serve.add_argument(
        "--max-body-size",
        metavar="SIZE",
        type=_size,
        default="256MiB",
        help="largest request body, e.g. 64MiB (2^20 bytes each) or 64MB (10^6 bytes "
        "each); a bare number is bytes",
    )
    serve.add_argument(
        "--app-dir", default=".", metavar="DIR", help="directory to import MODULE from"
    )
    serve.add_argument(
        "--max-handles",
        metavar="N",
        type=int,
        default=64,
        help="residual sets kept for /vjp by handle, per worker",
    )
    serve.add_argument(
        "--max-handle-bytes",
        metavar="SIZE",
        type=_size,
        default="1GiB",
        help="bytes of residuals kept, per worker, e.g. 512MiB",
    )
    serve.add_argument(
        "--handle-ttl",
        metavar="SECONDS",
        type=float,
        default=600.0,
        help="seconds an unused residual handle lives",
    )
    serve.add_argument(
        "--max-jacobian-size",
        metavar="SIZE",
        type=_size,
        default="1GiB",
        help="largest /jacobian answer, e.g. 256MiB; the size is known from the shapes and "
        "a larger request gets 413 before anything is computed",
    )
    serve.add_argument(
        "--log-level",
        metavar="LEVEL",
        default="info",
        choices=("critical", "error", "warning", "info", "debug", "trace"),
        help="uvicorn's log level",
    )

    call = argparse.ArgumentParser(
        prog="gradpipe call",
        description="Call ENDPOINT of the gradpipe server at URL and print the answer. "
        "POST endpoints take a JSON PAYLOAD; health, stats and openapi.json are GETs. "
        "Arrays are printed as "
        '{"object_type": "array", "dtype", "shape", "data": {"buffer": [nested lists], '
        '"encoding": "json"}}, which a payload may hold too. Without ENDPOINT (or with '
        "--list), lists the server's endpoints and its component's inputs and outputs.",
        formatter_class=HelpFormatter,
    )
    call.add_argument("url", help="the server, e.g. http://127.0.0.1:8000")
    call.add_argument(
        "endpoint",
        nargs="?",
        default=None,
        help="apply, jvp, vjp, jacobian, abstract_eval, health, stats or openapi.json "
        "(default: list them)",
    )
    call.add_argument(
        "payload",
        nargs="?",
        default=None,
        help="@file.json, - for stdin, or the JSON text itself (default: {})",
    )
    call.add_argument(
        "--list", action="store_true", help="list the endpoints, inputs and outputs, and exit"
    )
    call.add_argument(
        "--raw",
        action="store_true",
        help="print the answer as the server sent it (array buffers in base64)",
    )
    call.add_argument(
        "--token", default=None, help="bearer token (default: $GRADPIPE_TOKEN, or none)"
    )
    call.add_argument(
        "--timeout", type=float, metavar="SECONDS", default=300.0, help="seconds to wait"
    )
    return {"serve": serve, "call": call}


def main(command: str, argv: list[str]) -> int:
    """Run ``gradpipe serve ...`` or ``gradpipe call ...`` with the remaining arguments."""
    args = _parsers()[command].parse_intermixed_args(argv)
    return run_serve(args) if command == "serve" else run_call(args)


def run_serve(args: argparse.Namespace) -> int:
    from gradpipe._cli_common import import_hint

    from ._handles import HandleStore
    from ._server import load_component, serve

    try:
        import gradpipe.component  # noqa: F401 - its missing extra, said before the module's
    except ImportError as exc:
        raise SystemExit(f"gradpipe serve: {exc}") from None
    try:
        load_component(args.target, args.app_dir)
        HandleStore(args.max_handles, args.max_handle_bytes, args.handle_ttl)
    except ImportError as exc:
        module_name = args.target.partition(":")[0]
        raise SystemExit(f"gradpipe serve: {import_hint(module_name, args.app_dir, exc)}") from None
    except (ValueError, TypeError) as exc:
        raise SystemExit(f"gradpipe serve: {exc}") from None
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
        path = Path(spec[1:])
        if not path.is_file():
            raise SystemExit(f"gradpipe call: the payload file {str(path)!r} does not exist.")
        return path.read_bytes()
    return spec.encode()


GETS = ("health", "stats", "openapi.json")


def run_call(args: argparse.Namespace) -> int:
    import os

    import httpx

    from ._client import TOKEN_ENV
    from ._request_fields import FIELDS

    token = args.token if args.token is not None else os.environ.get(TOKEN_ENV)
    headers = {"Content-Type": JSON, "Accept": JSON}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    base = args.url.rstrip("/")
    with httpx.Client(headers=headers, timeout=args.timeout) as http:
        try:
            if args.list or args.endpoint is None:
                print(_listing(_schema(http, base)))
                return 0
            endpoint = args.endpoint.strip("/")
            if endpoint not in (*FIELDS, *GETS):
                _check_endpoint(http, base, endpoint)
            url = f"{base}/{endpoint}"
            if endpoint in GETS:
                response = http.get(url)
            else:
                response = http.post(url, content=_payload(args.payload))
        except (OSError, httpx.HTTPError) as exc:
            raise SystemExit(f"gradpipe call: {base}: {exc}") from None
    if response.status_code != 200:
        print(f"HTTP {response.status_code}: {_text(response, raw=True)}", file=sys.stderr)
        return 1
    print(_text(response, raw=args.raw))
    return 0


def _schema(http: Any, base: str) -> dict[str, Any]:
    response = http.get(f"{base}/openapi.json")
    if response.status_code != 200:
        raise SystemExit(
            f"gradpipe call: {base}/openapi.json answered HTTP {response.status_code}; "
            f"is this a gradpipe server?"
        )
    return response.json()


def _check_endpoint(http: Any, base: str, endpoint: str) -> None:
    """Refuse an endpoint the server does not have, suggesting the close ones."""
    try:
        known = [path.strip("/") for path in _schema(http, base).get("paths", {})]
    except (SystemExit, ValueError):
        return  # not a gradpipe schema: let the server answer
    known.append("openapi.json")
    if endpoint in known:
        return
    close = difflib.get_close_matches(endpoint, known, n=3, cutoff=0.5)
    hint = f" Did you mean {' or '.join(close)}?" if close else ""
    raise SystemExit(
        f"gradpipe call: {base} has no endpoint {endpoint!r}.{hint} Its endpoints: "
        f"{', '.join(known)}."
    )


def _listing(schema: dict[str, Any]) -> str:
    lines = ["Endpoints:"]
    paths = dict(schema.get("paths", {}))
    paths.setdefault("/openapi.json", {"get": {"summary": "This schema."}})
    width = max(len(path.strip("/")) for path in paths)
    for path, methods in paths.items():
        for method, operation in methods.items():
            summary = operation.get("summary", "") if isinstance(operation, dict) else ""
            lines.append(f"  {path.strip('/'):<{width}}  {method.upper():<4}  {summary}")
    described = schema.get("x-gradpipe", {})
    for side in ("inputs", "outputs"):
        leaves = described.get(side) or []
        if leaves:
            lines += ["", f"Component {side} (path, dtype, shape; * differentiable):"]
            width = max(len(leaf["path"]) for leaf in leaves)
        for leaf in leaves:
            if leaf.get("kind") == "array":
                sizes = ["None" if s is None else str(s) for s in leaf["shape"]]
                shape = f"({', '.join(sizes)}{',' if len(sizes) == 1 else ''})"
                mark = " *" if leaf.get("differentiable") else ""
                lines.append(f"  {leaf['path']:<{width}}  {leaf['dtype']} {shape}{mark}")
            else:
                kind = f"static {leaf.get('annotation') or ''}".rstrip()
                lines.append(f"  {leaf['path']:<{width}}  {kind}")
    return "\n".join(lines)


def _text(response: Any, raw: bool) -> str:
    """The answer to print: its arrays as nested lists of numbers, or as it came."""
    try:
        document = response.json()
    except ValueError:
        return response.text
    if raw:
        return json.dumps(document, indent=2)
    try:
        return readable(decode(response.content, JSON))
    except PayloadError:
        return json.dumps(document, indent=2)
