"""`RemoteComponent`: a served component as Python methods, a JAX function and an Operator.

How JAX transformations become requests (``x`` the inputs, ``ct`` a cotangent):

- plain call and ``jit``: one ``/apply`` through `jax.pure_callback`.
- ``grad``/``vjp``/``value_and_grad``: one ``/apply`` with ``keep_residuals`` that
  returns the outputs and a residual handle, then one ``/vjp`` that sends only the
  handle and ``ct``. If the server no longer knows the handle (evicted, restarted,
  another worker) the client re-sends ``x`` with ``ct`` — slower, never wrong.
- ``jvp``: the same forward request, then one ``/jvp``.
- ``vmap``: when the server's schema says it takes batched ``/apply`` requests
  (``x-gradpipe.batching.apply``; gradpipe servers do, up to ``max_batch``), one
  request carries the whole batch and the server evaluates it element by element;
  otherwise the client sends one request per element. Both give the per-element
  answer of the function, so a function that is not batch-polymorphic is never
  silently batched wrongly. Nested ``vmap`` is flattened into one batch.
- ``vmap`` of a derivative (``vmap(grad(f))``): one forward and one vjp (or jvp)
  request per element.

The output shapes JAX needs before running anything come from ``/abstract_eval``,
asked once per distinct input shapes/dtypes/static values and cached.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Sequence
from typing import Any

import jax.numpy as jnp

from gradpipe.core import Operator

from ._client import Client, UnknownHandleError
from ._jax_function import build_jax_function, is_array
from ._paths import flatten, keyed_prefixes

__all__ = ["RemoteComponent"]


class RemoteComponent(Operator):
    """A component served by `gradpipe serve`, used as if it were local.

    It offers the five endpoints as methods (`apply`, `jacobian`, `jvp`, `vjp`,
    `abstract_eval`), and calling it with an input dict is a JAX function that works
    under ``jit``, ``grad``, ``jvp`` and ``vmap`` (see the module docstring for the
    requests each one makes). As an `Operator` it composes into pipelines with ``|``.

    Array leaves of the input dict (JAX or NumPy arrays) are the function's
    arguments; other leaves (str, int, float, bool, None) are static and sent as
    they are. Leaves that the server marks differentiable and that have a floating
    dtype get gradients; the others get zero tangents.

    **Arguments:**

    - `url`: the server's base URL.
    - `token`: bearer token; defaults to the ``GRADPIPE_TOKEN`` environment variable.
      It is not part of the operator's configuration.
    - `encoding`: ``"binary"`` (msgpack, default) or ``"json"`` (base64).
    - `timeout`: seconds per request.

    ```python
    remote = gradpipe.serve.connect("http://127.0.0.1:8000")
    loss = lambda x: remote({"x": x})["y"].sum()
    jax.value_and_grad(loss)(x)  # two requests: /apply (keep) and /vjp (handle)
    ```
    """

    def __init__(
        self,
        url: str,
        *,
        token: str | None = None,
        encoding: str = "binary",
        timeout: float = 300.0,
    ):
        self.url = url
        self.encoding = encoding
        self.timeout = timeout
        self.client = Client(url, token=token, encoding=encoding, timeout=timeout)
        self._schema: dict[str, Any] | None = None
        self._abstract: dict[str, Any] = {}
        self._functions: dict[str, Callable] = {}
        self._lock = threading.Lock()

    def get_config(self) -> dict[str, Any]:
        """`{"url", "encoding", "timeout"}`; the token never enters the configuration."""
        return {"url": self.url, "encoding": self.encoding, "timeout": self.timeout}

    def close(self) -> None:
        """Close the pooled connections."""
        self.client.close()

    # -- the endpoints as methods ------------------------------------------------------

    @property
    def schema(self) -> dict[str, Any]:
        """The server's OpenAPI document (fetched once)."""
        if self._schema is None:
            self._schema = self.client.get("openapi.json")
        return self._schema

    def input_spec(self) -> list[dict[str, Any]]:
        """Leaf specs of the inputs: path, dtype, shape, differentiable."""
        return self.schema["x-gradpipe"]["inputs"]

    def output_spec(self) -> list[dict[str, Any]]:
        """Leaf specs of the outputs: path, dtype, shape, differentiable."""
        return self.schema["x-gradpipe"]["outputs"]

    def health(self) -> dict[str, Any]:
        """The server's health document, ``{"status": "ok"}`` (``GET /health``, no token needed)."""
        return self.client.get("health")

    def stats(self) -> dict[str, Any]:
        """The server's request counters (``GET /stats``)."""
        return self.client.get("stats")

    def apply(self, inputs: dict[str, Any]) -> dict[str, Any]:
        """The outputs for ``inputs`` (one ``/apply`` request)."""
        return self.client.post("apply", {"inputs": inputs})["outputs"]

    def apply_keep(self, inputs: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
        """The outputs and a residual handle for a following `vjp` (``None`` if the
        server could not keep them)."""
        answer = self.client.post("apply", {"inputs": inputs, "keep_residuals": True})
        return answer["outputs"], answer.get("handle")

    def jacobian(
        self, inputs: dict, jac_inputs: Sequence[str], jac_outputs: Sequence[str]
    ) -> dict[str, dict[str, Any]]:
        """``{output path: {input path: array}}``."""
        document = {
            "inputs": inputs,
            "jac_inputs": list(jac_inputs),
            "jac_outputs": list(jac_outputs),
        }
        return self.client.post("jacobian", document)["jacobian"]

    def jvp(
        self,
        inputs: dict,
        jvp_inputs: Sequence[str],
        jvp_outputs: Sequence[str],
        tangents: dict[str, Any],
    ) -> dict[str, Any]:
        """``{output path: tangent}`` for ``{input path: tangent}``."""
        document = {
            "inputs": inputs,
            "jvp_inputs": list(jvp_inputs),
            "jvp_outputs": list(jvp_outputs),
            "tangents": tangents,
        }
        return self.client.post("jvp", document)["jvp"]

    def vjp(
        self,
        inputs: dict | None,
        vjp_inputs: Sequence[str],
        vjp_outputs: Sequence[str],
        cotangents: dict[str, Any],
        *,
        handle: str | None = None,
    ) -> dict[str, Any]:
        """``{input path: cotangent}`` for ``{output path: cotangent}``.

        With a `handle` from `apply_keep` the inputs are not sent; if the server no
        longer holds it, the inputs are sent instead (so give them too).
        """
        document = {
            "vjp_inputs": list(vjp_inputs),
            "vjp_outputs": list(vjp_outputs),
            "cotangents": cotangents,
        }
        if handle is not None:
            try:
                return self.client.post("vjp", {**document, "handle": handle})["vjp"]
            except UnknownHandleError:
                if inputs is None:
                    raise
        return self.client.post("vjp", {**document, "inputs": inputs})["vjp"]

    def abstract_eval(self, abstract_inputs: dict[str, Any]) -> dict[str, Any]:
        """Output shapes and dtypes; cached per distinct ``abstract_inputs``."""
        key = json.dumps(abstract_inputs, sort_keys=True, default=str)
        with self._lock:
            if key in self._abstract:
                return self._abstract[key]
        answer = self.client.post("abstract_eval", {"abstract_inputs": abstract_inputs})
        with self._lock:
            _bounded_put(self._abstract, key, answer["outputs"])
        return answer["outputs"]

    # -- the JAX function --------------------------------------------------------------

    def _keyed(self, which: str) -> frozenset[str]:
        return keyed_prefixes(spec["path"] for spec in self.schema["x-gradpipe"][which])

    def _apply(self, inputs: dict[str, Any]) -> dict[str, Any]:
        if not isinstance(inputs, dict):
            raise TypeError(
                f"RemoteComponent takes one dict of inputs, got {type(inputs).__name__}."
            )
        leaves = flatten(inputs, self._keyed("inputs"), is_array)
        paths = [p for p, v in leaves if is_array(v)]
        arrays = [jnp.asarray(v) for p, v in leaves if is_array(v)]
        statics = {p: v for p, v in leaves if not is_array(v)}
        signature = [(p, a.shape, a.dtype.name) for p, a in zip(paths, arrays)]
        key = json.dumps([signature, sorted(statics.items())], default=repr)
        with self._lock:
            fn = self._functions.get(key)
        if fn is None:
            fn = build_jax_function(self, inputs, paths, arrays)
            with self._lock:
                _bounded_put(self._functions, key, fn)
        return fn(*arrays)


def _bounded_put(cache: dict, key: str, value: Any, limit: int = 256) -> None:
    """Insert into a per-instance cache, dropping the oldest entries past ``limit``."""
    cache[key] = value
    while len(cache) > limit:
        del cache[next(iter(cache))]
