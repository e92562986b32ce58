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
import math
import threading
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.custom_derivatives import SymbolicZero, linear_call

from gradpipe.core import Operator

from ._client import Client, UnknownHandleError
from ._handles import HANDLE_BYTES
from ._linear_call_vmap import install as _install_linear_call_vmap
from ._paths import flatten, is_differentiable_path, keyed_prefixes, unflatten

__all__ = ["RemoteComponent", "connect"]

_install_linear_call_vmap()  # so that vmap of a derivative of a remote call works


def _is_array(value: Any) -> bool:
    return isinstance(value, jax.Array | np.ndarray | np.generic)


def _is_abstract_leaf(node: Any) -> bool:
    return isinstance(node, dict) and "shape" in node and "dtype" in node


def _sds(spec: dict[str, Any], path: str) -> jax.ShapeDtypeStruct:
    try:
        dtype = jax.dtypes.canonicalize_dtype(np.dtype(spec["dtype"]))
        return jax.ShapeDtypeStruct(tuple(int(n) for n in spec["shape"]), dtype)
    except (KeyError, TypeError, ValueError):
        raise TypeError(
            f"RemoteComponent: output {path} is not an array ({spec!r}); only array outputs "
            "can be returned under JAX transformations. Call .apply(...) for other outputs."
        ) from None


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

    def jacobian(self, inputs: dict, jac_inputs: Sequence[str], jac_outputs: Sequence[str]):
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
        leaves = flatten(inputs, self._keyed("inputs"), _is_array)
        paths = [p for p, v in leaves if _is_array(v)]
        arrays = [jnp.asarray(v) for p, v in leaves if _is_array(v)]
        statics = {p: v for p, v in leaves if not _is_array(v)}
        signature = [(p, a.shape, a.dtype.name) for p, a in zip(paths, arrays)]
        key = json.dumps([signature, sorted(statics.items())], default=repr)
        with self._lock:
            fn = self._functions.get(key)
        if fn is None:
            fn = self._build(inputs, paths, arrays, statics)
            with self._lock:
                _bounded_put(self._functions, key, fn)
        return fn(*arrays)

    def _build(
        self, inputs: dict, in_paths: list[str], examples: list[jax.Array], statics: dict[str, Any]
    ) -> Callable:
        keyed_in, keyed_out = self._keyed("inputs"), self._keyed("outputs")
        template = unflatten(inputs, dict.fromkeys(in_paths), keyed_in)
        abstract = unflatten(
            template,
            {
                p: {"shape": list(a.shape), "dtype": a.dtype.name}
                for p, a in zip(in_paths, examples)
            },
            keyed_in,
        )
        out_tree = self.abstract_eval(abstract)
        out_leaves = flatten(out_tree, keyed_out, _is_abstract_leaf)
        out_paths = [p for p, _ in out_leaves]
        out_sds = [_sds(s, p) for p, s in out_leaves]
        xg = self.schema["x-gradpipe"]
        diff_in = [
            i
            for i, (p, a) in enumerate(zip(in_paths, examples))
            if jnp.issubdtype(a.dtype, jnp.inexact)
            and is_differentiable_path(p, xg["differentiable_inputs"])
        ]
        diff_out = [
            i
            for i, (p, s) in enumerate(zip(out_paths, out_sds))
            if jnp.issubdtype(s.dtype, jnp.inexact)
            and is_differentiable_path(p, xg["differentiable_outputs"])
        ]
        base_ndims = [a.ndim for a in examples]
        batching = bool(xg.get("batching", {}).get("apply"))
        max_batch = int(xg.get("batching", {}).get("max_batch", 0))
        handle_sds = jax.ShapeDtypeStruct((HANDLE_BYTES,), jnp.uint8)

        def document(arrays: Sequence[Any]) -> dict:
            values = {p: np.asarray(a) for p, a in zip(in_paths, arrays)}
            return unflatten(template, values, keyed_in)

        def results(tree: dict, sds: list[jax.ShapeDtypeStruct], paths: list[str]) -> list:
            return _results_by_path(dict(flatten(tree, keyed_out, _is_array)), paths, sds)

        # -- callbacks (they run on the host, with NumPy arrays)

        def apply_one(arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
            return results(self.apply(document(arrays)), out_sds, out_paths)

        def apply_cb(*arrays: np.ndarray) -> list[np.ndarray]:
            lead = [a.shape[: a.ndim - n] for a, n in zip(arrays, base_ndims)]
            batch = np.broadcast_shapes(*lead) if lead else ()
            if batch == ():
                return apply_one(arrays)
            size = math.prod(batch)
            batched = [i for i, shape in enumerate(lead) if math.prod(shape) > 1]
            flat = [
                np.broadcast_to(a, batch + a.shape[len(lead[i]) :]).reshape(
                    (size, *a.shape[len(lead[i]) :])
                )
                if i in batched
                else a.reshape(a.shape[len(lead[i]) :])
                for i, a in enumerate(arrays)
            ]
            if batching and 1 <= size <= max_batch:
                answer = self.client.post(
                    "apply",
                    {
                        "inputs": document(flat),
                        "batch_size": size,
                        "batched_paths": [in_paths[i] for i in batched],
                    },
                )["outputs"]
                batched_sds = [jax.ShapeDtypeStruct((size, *s.shape), s.dtype) for s in out_sds]
                outs = results(answer, batched_sds, out_paths)
            else:
                rows = [
                    apply_one([f[k] if i in batched else f for i, f in enumerate(flat)])
                    for k in range(size)
                ]
                outs = [np.stack([r[j] for r in rows]) for j in range(len(out_sds))]
            return [o.reshape(batch + s.shape) for o, s in zip(outs, out_sds)]

        def apply_keep_cb(*arrays: np.ndarray) -> list[np.ndarray]:
            outputs, handle = self.apply_keep(document(arrays))
            token = bytes.fromhex(handle) if handle else bytes(HANDLE_BYTES)
            return [*results(outputs, out_sds, out_paths), np.frombuffer(token, np.uint8)]

        def jvp_cb(active: list[int], *args: np.ndarray) -> list[np.ndarray]:
            arrays, tangents = args[: len(in_paths)], args[len(in_paths) :]
            answer = self.jvp(
                document(arrays),
                [in_paths[i] for i in active],
                [out_paths[j] for j in diff_out],
                {in_paths[i]: t for i, t in zip(active, tangents)},
            )
            return _results_by_path(
                answer, [out_paths[j] for j in diff_out], [out_sds[j] for j in diff_out]
            )

        def vjp_cb(active: list[int], token: np.ndarray, *args: np.ndarray) -> list[np.ndarray]:
            arrays, cts = args[: len(in_paths)], args[len(in_paths) :]
            answer = self.vjp(
                document(arrays),
                [in_paths[i] for i in active],
                [out_paths[j] for j in diff_out],
                {out_paths[j]: c for j, c in zip(diff_out, cts)},
                handle=bytes(np.asarray(token, np.uint8)).hex() if np.any(token) else None,
            )
            return _results_by_path(answer, [in_paths[i] for i in active], in_sds(active))

        def in_sds(active: list[int]) -> list[jax.ShapeDtypeStruct]:
            return [jax.ShapeDtypeStruct(examples[i].shape, examples[i].dtype) for i in active]

        # -- the custom_jvp function

        @jax.custom_jvp
        def remote(*arrays: jax.Array) -> dict:
            outs = jax.pure_callback(apply_cb, out_sds, *arrays, vmap_method="expand_dims")
            return unflatten(out_tree, dict(zip(out_paths, outs)), keyed_out, _is_abstract_leaf)

        def remote_jvp(primals, tangents):
            *outs, token = jax.pure_callback(
                apply_keep_cb, [*out_sds, handle_sds], *primals, vmap_method="sequential"
            )
            tangent_outs = [_zero_tangent(s) for s in out_sds]
            # Only inputs with a tangent that is not symbolically zero enter the linear
            # map: the transpose must see every linear argument as an unknown.
            active = [i for i in diff_in if not isinstance(tangents[i], SymbolicZero)]
            if active and diff_out:
                lin_sds = [out_sds[j] for j in diff_out]

                def forward(res, ts):
                    return jax.pure_callback(
                        partial(jvp_cb, active), lin_sds, *res[1:], *ts, vmap_method="sequential"
                    )

                def transpose(res, cts):
                    return jax.pure_callback(
                        partial(vjp_cb, active), in_sds(active), *res, *cts,
                        vmap_method="sequential",
                    )  # fmt: skip

                lin = linear_call(
                    forward, transpose, (token, *primals), [tangents[i] for i in active]
                )
                for j, t in zip(diff_out, lin):
                    tangent_outs[j] = t
            primal_tree = unflatten(
                out_tree, dict(zip(out_paths, outs)), keyed_out, _is_abstract_leaf
            )
            tangent_tree = unflatten(
                out_tree, dict(zip(out_paths, tangent_outs)), keyed_out, _is_abstract_leaf
            )
            return primal_tree, tangent_tree

        remote.defjvp(remote_jvp, symbolic_zeros=True)
        return remote


def _results_by_path(
    answer: dict[str, Any], paths: list[str], sds: list[jax.ShapeDtypeStruct]
) -> list[np.ndarray]:
    """Arrays of a ``{path: array}`` answer in the order of ``paths``, checked."""
    out = []
    for path, spec in zip(paths, sds):
        if path not in answer:
            raise RuntimeError(f"RemoteComponent: the server's answer has no {path!r}.")
        value = np.asarray(answer[path])
        if value.shape != spec.shape:
            raise RuntimeError(
                f"RemoteComponent: the server answered {path!r} with shape {value.shape}; "
                f"abstract_eval promised {spec.shape}."
            )
        out.append(value.astype(spec.dtype, copy=False))
    return out


def _bounded_put(cache: dict, key: str, value: Any, limit: int = 256) -> None:
    """Insert into a per-instance cache, dropping the oldest entries past ``limit``."""
    cache[key] = value
    while len(cache) > limit:
        del cache[next(iter(cache))]


def _zero_tangent(sds: jax.ShapeDtypeStruct) -> jax.Array:
    if jnp.issubdtype(sds.dtype, jnp.inexact):
        return jnp.zeros(sds.shape, sds.dtype)
    return np.zeros(sds.shape, jax.dtypes.float0)


def connect(
    url: str, *, token: str | None = None, encoding: str = "binary", timeout: float = 300.0
) -> RemoteComponent:
    """A `RemoteComponent` for the server at ``url`` (checks ``/health`` first).

    **Arguments:** as `RemoteComponent`.

    **Returns:** the connected `RemoteComponent`.
    """
    remote = RemoteComponent(url, token=token, encoding=encoding, timeout=timeout)
    remote.health()
    return remote
