"""`TesseractRemote`: a component behind ``tesseract-runtime serve``, used from JAX.

The same JAX function as `RemoteComponent` (``jit``, ``grad``, ``jvp``, ``vmap``),
over tesseract-core's REST API. What the protocol makes different:

- it keeps no residuals between requests, so ``grad`` is one ``/apply`` and one
  ``/vector_jacobian_product`` that sends the inputs again (with ``files``, a
  directory the server reads, arrays travel as files there and the requests carry
  only their references);
- ``vmap`` of the function is one ``/apply`` per element;
- a batch of products at one point (``jax.jacrev``, ``jax.jacfwd``, ``vmap`` of a
  ``vjp``) is one ``/jacobian`` request when the Jacobian holds fewer bytes than the
  product requests would send and receive (see `_products`), else one request per
  product.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import uuid
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import httpx

from ._client import RemoteError, _raw_transport
from ._json_body import loads as load_json
from ._remote import RemoteComponent, _bounded_put
from ._tesseract_schema import read_tesseract_openapi
from ._tesseract_wire import (
    FileWriter,
    WireError,
    decode_arrays,
    encode_pieces,
    to_tesseract_path,
)
from ._tesseract_wire import to_gradpipe_path as _to_gradpipe

__all__ = ["TesseractRemote", "connect_tesseract"]

_ENCODINGS = {"base64": "application/json+base64", "json": "application/json"}


class _TesseractClient:
    """Pooled JSON requests to one tesseract server; counts requests and bytes sent."""

    def __init__(self, url: str, token: str | None, timeout: float, accept: str,
                 files: Path | None):  # fmt: skip
        self.url = url.rstrip("/")
        headers = {"Content-Type": "application/json", "Accept": accept}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        self._http = httpx.Client(base_url=self.url, headers=headers, timeout=timeout)
        self._raw = _raw_transport(self.url, headers, timeout, 32)
        self.files = files
        self._lock = threading.Lock()
        self.requests = 0
        self.bytes_sent = 0

    def close(self) -> None:
        self._http.close()
        if self._raw is not None:
            self._raw.close()

    def get(self, endpoint: str) -> Any:
        response = self._http.get(f"/{endpoint}")
        if response.status_code != 200:
            raise _error(response.status_code, response.content, endpoint)
        return response.json()

    def post(self, endpoint: str, document: dict[str, Any]) -> Any:
        writer = None if self.files is None else FileWriter(self.files, f"in-{uuid.uuid4()}")
        try:
            body = encode_pieces(document, "binref" if writer else "base64", writer)
        finally:
            if writer is not None:
                writer.close()
        try:
            return self._send(endpoint, body)
        finally:
            if writer is not None:
                writer.path.unlink(missing_ok=True)
                with contextlib.suppress(OSError):
                    writer.path.parent.rmdir()

    def _send(self, endpoint: str, body: list[bytes]) -> Any:
        with self._lock:
            self.requests += 1
            self.bytes_sent += sum(map(len, body))
        content: bytes | bytearray
        if self._raw is not None:
            answer = self._raw.post(f"/{endpoint}", body)
            status, content = answer.status, answer.content
        else:
            response = self._http.post(f"/{endpoint}", content=b"".join(body))
            status, content = response.status_code, response.content
        if status != 200:
            raise _error(status, content, endpoint)
        try:
            return decode_arrays(load_json(content, as_text=False), [], self.files)
        except (ValueError, WireError) as exc:
            raise RemoteError(200, "bad_answer", f"/{endpoint} answered {exc}", None) from None


def _error(status: int, content: bytes | bytearray, endpoint: str) -> RemoteError:
    try:
        detail = json.loads(content)["detail"]
    except (ValueError, KeyError, TypeError):
        return RemoteError(status, "http_error", bytes(content[:500]).decode("utf-8", "replace"),
                           None)  # fmt: skip
    if isinstance(detail, list) and detail and isinstance(detail[0], dict):
        first = detail[0]
        where = ".".join(str(p) for p in first.get("loc", [])[1:]) or None
        more = f" (and {len(detail) - 1} more)" if len(detail) > 1 else ""
        return RemoteError(status, str(first.get("type")), f"{first.get('msg')}{more}", where)
    return RemoteError(status, "http_error", f"/{endpoint}: {detail}", None)


class TesseractRemote(RemoteComponent):
    """A component served by tesseract-core's runtime (``tesseract-runtime serve``, or
    a gradpipe server's ``/tesseract`` API), used as if it were local.

    Methods take gradpipe's paths (``layers[0].w``, ``bands[red]``) and translate
    them to the tesseract spelling (``layers.[0].w``, ``bands.{red}``). Calling it
    with an input dict is a JAX function, as for `RemoteComponent`; see the module
    docstring for the requests each transformation makes.

    **Arguments:**

    - `url`: the server's base URL.
    - `token`: a bearer token, if the server wants one.
    - `encoding`: how responses carry arrays, ``"base64"`` (default) or ``"json"``.
    - `files`: a directory the server reads file references from and writes them to
      (its ``--input-path`` and ``--output-path``, for a server on this machine):
      arrays then travel as ``json+binref`` files instead of base64 text.
    - `jacobian`: ``"auto"`` (use ``/jacobian`` for a batch of products where it
      moves fewer bytes) or ``"never"``.
    - `max_jacobian_bytes`: the largest Jacobian ``"auto"`` asks for.
    - `timeout`: seconds per request.
    """

    batch_products = True

    def __init__(
        self,
        url: str,
        *,
        token: str | None = None,
        encoding: str = "base64",
        files: str | os.PathLike | None = None,
        jacobian: str = "auto",
        max_jacobian_bytes: int = 2**28,
        timeout: float = 300.0,
    ):
        if encoding not in _ENCODINGS:
            raise ValueError(f"encoding must be 'base64' or 'json', got {encoding!r}.")
        if jacobian not in ("auto", "never"):
            raise ValueError(f"jacobian must be 'auto' or 'never', got {jacobian!r}.")
        self.url = url
        self.encoding = encoding
        self.timeout = timeout
        self.files = None if files is None else Path(files)
        self.jacobian_mode = jacobian
        self.max_jacobian_bytes = max_jacobian_bytes
        accept = "application/json+binref" if files is not None else _ENCODINGS[encoding]
        self.client = _TesseractClient(url, token, timeout, accept, self.files)  # type: ignore[assignment]
        self._schema = None
        self._info: dict[str, Any] | None = None
        self._abstract = {}
        self._functions = {}
        self._lock = threading.Lock()

    def get_config(self) -> dict[str, Any]:
        """The URL and options; the token never enters the configuration."""
        return {"url": self.url, "encoding": self.encoding, "timeout": self.timeout,
                "files": None if self.files is None else str(self.files),
                "jacobian": self.jacobian_mode}  # fmt: skip

    # -- what the server offers

    @property
    def info(self) -> dict[str, Any]:
        """Endpoints, differentiable paths and dict patterns read from the schema."""
        if self._info is None:
            self._info = read_tesseract_openapi(self.client.get("openapi.json"))
        return self._info

    @property
    def schema(self) -> dict[str, Any]:
        """The description gradpipe's JAX function reads (``x-gradpipe``)."""
        info = self.info
        return {"x-gradpipe": {
            "inputs": [], "outputs": [],
            "differentiable_inputs": info["differentiable_inputs"],
            "differentiable_outputs": info["differentiable_outputs"],
            "batching": {"apply": False},
        }}  # fmt: skip

    def input_spec(self) -> list[dict[str, Any]]:
        """The differentiable input patterns (the tesseract schema lists no others)."""
        return [{"path": p, "differentiable": True} for p in self.info["differentiable_inputs"]]

    def output_spec(self) -> list[dict[str, Any]]:
        """The differentiable output patterns."""
        return [{"path": p, "differentiable": True} for p in self.info["differentiable_outputs"]]

    def _keyed(self, which: str) -> frozenset[str]:
        return self.info["dicts"]

    def stats(self) -> dict[str, Any]:
        """Not available: a tesseract server publishes no request counters (raises
        `NotImplementedError`)."""
        raise NotImplementedError("a tesseract server publishes no request counters.")

    def _peer(self, paths: Iterable[str]) -> list[str]:
        return [to_tesseract_path(p, self.info["dicts"]) for p in paths]

    def _back(self, tree: dict[str, Any], paths: Sequence[str]) -> dict[str, Any]:
        names = dict(zip(self._peer(paths), paths))
        return {names.get(k, _to_gradpipe(k)): v for k, v in tree.items()}

    # -- the endpoints

    def apply(self, inputs: dict[str, Any]) -> dict[str, Any]:
        """The outputs for ``inputs`` (one ``/apply``)."""
        return self.client.post("apply", {"inputs": inputs})

    def apply_keep(self, inputs: dict[str, Any]) -> tuple[dict[str, Any], None]:
        """`apply`; the protocol keeps no residuals, so the handle is ``None``."""
        return self.apply(inputs), None

    def jacobian(
        self, inputs: dict, jac_inputs: Sequence[str], jac_outputs: Sequence[str]
    ) -> dict[str, dict[str, Any]]:
        """``{output path: {input path: array}}`` (one ``/jacobian``)."""
        answer = self.client.post("jacobian", {
            "inputs": inputs, "jac_inputs": self._peer(jac_inputs),
            "jac_outputs": self._peer(jac_outputs),
        })  # fmt: skip
        return {
            k: self._back(row, jac_inputs) for k, row in self._back(answer, jac_outputs).items()
        }

    def jvp(self, inputs: dict, jvp_inputs: Sequence[str], jvp_outputs: Sequence[str],
            tangents: dict[str, Any]) -> dict[str, Any]:  # fmt: skip
        """``{output path: tangent}`` (one ``/jacobian_vector_product``)."""
        answer = self.client.post("jacobian_vector_product", {
            "inputs": inputs, "jvp_inputs": self._peer(jvp_inputs),
            "jvp_outputs": self._peer(jvp_outputs),
            "tangent_vector": dict(zip(self._peer(tangents), tangents.values())),
        })  # fmt: skip
        return self._back(answer, jvp_outputs)

    def vjp(
        self,
        inputs: dict | None,
        vjp_inputs: Sequence[str],
        vjp_outputs: Sequence[str],
        cotangents: dict[str, Any],
        *,
        handle: str | None = None,
    ) -> dict[str, Any]:
        """``{input path: cotangent}`` (one ``/vector_jacobian_product``, with the inputs)."""
        if inputs is None:
            raise ValueError("a tesseract server keeps no residuals: vjp needs the inputs.")
        answer = self.client.post("vector_jacobian_product", {
            "inputs": inputs, "vjp_inputs": self._peer(vjp_inputs),
            "vjp_outputs": self._peer(vjp_outputs),
            "cotangent_vector": dict(zip(self._peer(cotangents), cotangents.values())),
        })  # fmt: skip
        return self._back(answer, vjp_inputs)

    def abstract_eval(self, abstract_inputs: dict[str, Any]) -> dict[str, Any]:
        """Output shapes and dtypes (one ``/abstract_eval`` per distinct input)."""
        if "abstract_eval" not in self.info["endpoints"]:
            raise RemoteError(404, "not_found", "this tesseract has no /abstract_eval endpoint, "
                              "which JAX needs for the output shapes; add abstract_eval to its "
                              "tesseract_api.py", None)  # fmt: skip
        key = json.dumps(abstract_inputs, sort_keys=True, default=str)
        with self._lock:
            if key in self._abstract:
                return self._abstract[key]
        answer = self.client.post("abstract_eval", {"inputs": abstract_inputs})
        with self._lock:
            _bounded_put(self._abstract, key, answer)
        return answer

    def jacobian_pays(self, jacobian_bytes: int, product_bytes: int) -> bool:
        """Whether one ``/jacobian`` of ``jacobian_bytes`` is cheaper than the product
        requests it replaces, which send and receive ``product_bytes`` in all."""
        if self.jacobian_mode == "never" or "jacobian" not in self.info["endpoints"]:
            return False
        return jacobian_bytes <= min(product_bytes, self.max_jacobian_bytes)


def connect_tesseract(url: str, **options: Any) -> TesseractRemote:
    """A `TesseractRemote` for the tesseract server at ``url`` (checks ``/health``).

    **Arguments:** as `TesseractRemote`.
    """
    remote = TesseractRemote(url, **options)
    remote.health()
    return remote
