"""The JAX function of a `RemoteComponent`: ``custom_jvp`` over host callbacks.

The primal is one ``/apply`` through `jax.pure_callback` (``vmap_method=
"expand_dims"``: a batch becomes one batched request). The JVP rule makes one
``/apply`` that keeps the residuals and returns a handle, then expresses the
derivative as a ``linear_call``: its forward is a ``/jvp`` request, its transpose a
``/vjp`` request naming the handle. So ``grad`` is exactly one forward and one vjp
request, ``jvp`` one forward and one jvp request, and nothing is sent twice.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.custom_derivatives import SymbolicZero, linear_call

from ._handles import HANDLE_BYTES
from ._linear_call_vmap import install as _install_linear_call_vmap
from ._paths import flatten, is_differentiable_path, unflatten
from ._products import products

__all__ = ["build_jax_function", "is_array"]

_install_linear_call_vmap()  # so that vmap of a derivative of a remote call works


def is_array(value: Any) -> bool:
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


def build_jax_function(
    remote: Any, inputs: dict, in_paths: list[str], examples: list[jax.Array]
) -> Callable:
    """The JAX function of ``remote`` for inputs shaped like ``inputs``.

    **Arguments:**

    - `remote`: the `RemoteComponent` whose methods make the requests.
    - `inputs`: an example input dict; its non-array leaves are the static values
      baked into the function.
    - `in_paths`, `examples`: the paths and (example) values of its array leaves.

    **Returns:** ``f(*arrays) -> output dict``, a ``jax.custom_jvp`` function.
    """
    keyed_in, keyed_out = remote._keyed("inputs"), remote._keyed("outputs")
    template = unflatten(inputs, dict.fromkeys(in_paths), keyed_in)
    abstract = unflatten(
        template,
        {p: {"shape": list(a.shape), "dtype": a.dtype.name} for p, a in zip(in_paths, examples)},
        keyed_in,
    )
    out_tree = remote.abstract_eval(abstract)
    out_leaves = flatten(out_tree, keyed_out, _is_abstract_leaf)
    out_paths = [p for p, _ in out_leaves]
    out_sds = [_sds(s, p) for p, s in out_leaves]
    xg = remote.schema["x-gradpipe"]
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
        return _results_by_path(dict(flatten(tree, keyed_out, is_array)), paths, sds)

    # -- callbacks (they run on the host, with NumPy arrays)

    def apply_one(arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
        return results(remote.apply(document(arrays)), out_sds, out_paths)

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
            answer = remote.client.post(
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
        outputs, handle = remote.apply_keep(document(arrays))
        token = bytes.fromhex(handle) if handle else bytes(HANDLE_BYTES)
        return [*results(outputs, out_sds, out_paths), np.frombuffer(token, np.uint8)]

    # A remote with a Jacobian endpoint sees a vmapped batch of products at once
    # (see _products); gradpipe's own remote makes one product request per element.
    batch_products = bool(getattr(remote, "batch_products", False))
    product_method = "expand_dims" if batch_products else "sequential"

    def jvp_cb(active: list[int], *args: np.ndarray) -> list[np.ndarray]:
        arrays, tangents = args[: len(in_paths)], args[len(in_paths) :]
        if batch_products:
            return products(
                remote, "jvp", document, arrays, base_ndims, [in_paths[i] for i in active],
                [out_paths[j] for j in diff_out], tangents, [base_ndims[i] for i in active],
                [out_sds[j].shape for j in diff_out], [out_sds[j].dtype for j in diff_out],
            )  # fmt: skip
        answer = remote.jvp(
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
        if batch_products:
            return products(
                remote, "vjp", document, arrays, base_ndims, [in_paths[i] for i in active],
                [out_paths[j] for j in diff_out], cts, [out_sds[j].ndim for j in diff_out],
                [examples[i].shape for i in active], [examples[i].dtype for i in active],
            )  # fmt: skip
        answer = remote.vjp(
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
    def function(*arrays: jax.Array) -> dict:
        outs = jax.pure_callback(apply_cb, out_sds, *arrays, vmap_method="expand_dims")
        return unflatten(out_tree, dict(zip(out_paths, outs)), keyed_out, _is_abstract_leaf)

    def function_jvp(
        primals: tuple[jax.Array, ...], tangents: tuple[Any, ...]
    ) -> tuple[dict, dict]:
        *outs, token = jax.pure_callback(
            apply_keep_cb, [*out_sds, handle_sds], *primals, vmap_method="sequential"
        )
        tangent_outs = [_zero_tangent(s) for s in out_sds]
        # Only inputs with a tangent that is not symbolically zero enter the linear
        # map: the transpose must see every linear argument as an unknown.
        active = [i for i in diff_in if not isinstance(tangents[i], SymbolicZero)]
        if active and diff_out:
            lin_sds = [out_sds[j] for j in diff_out]

            def forward(res: Sequence[jax.Array], ts: Sequence[jax.Array]) -> list[jax.Array]:
                return jax.pure_callback(
                    partial(jvp_cb, active), lin_sds, *res[1:], *ts, vmap_method=product_method
                )

            def transpose(res: Sequence[jax.Array], cts: Sequence[jax.Array]) -> list[jax.Array]:
                return jax.pure_callback(
                    partial(vjp_cb, active), in_sds(active), *res, *cts,
                    vmap_method=product_method,
                )  # fmt: skip

            lin = linear_call(forward, transpose, (token, *primals), [tangents[i] for i in active])
            for j, t in zip(diff_out, lin):
                tangent_outs[j] = t
        primal_tree = unflatten(out_tree, dict(zip(out_paths, outs)), keyed_out, _is_abstract_leaf)
        tangent_tree = unflatten(
            out_tree, dict(zip(out_paths, tangent_outs)), keyed_out, _is_abstract_leaf
        )
        return primal_tree, tangent_tree

    function.defjvp(function_jvp, symbolic_zeros=True)
    return function


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


def _zero_tangent(sds: jax.ShapeDtypeStruct) -> jax.Array | np.ndarray:
    if jnp.issubdtype(sds.dtype, jnp.inexact):
        return jnp.zeros(sds.shape, sds.dtype)
    return np.zeros(sds.shape, jax.dtypes.float0)
