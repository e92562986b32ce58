"""A batch of Jacobian products of a remote function, as one Jacobian where that pays.

``jax.jacfwd``/``jax.jacrev`` (and any ``vmap`` of a ``jvp`` or ``vjp``) ask a
remote function for many products at one point. A remote that offers a Jacobian
endpoint (the tesseract API's ``/jacobian``) may answer them with one request and
contract locally: `products` asks the remote's ``jacobian_pays`` whether the
Jacobian's bytes are fewer than those of the products it replaces (each product
re-sends the inputs); otherwise, or when the points differ, it makes one product
request per element. Either way each element gets its own answer.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

__all__ = ["products"]


def _one_point(arrays: Sequence[np.ndarray], lead: tuple[int, ...], size: int) -> bool:
    """Whether every batch element of every primal is the same array (the linear
    map's batching broadcasts unbatched primals to the batch)."""
    for a in arrays:
        flat = a.reshape((-1, *a.shape[len(lead) :])) if a.ndim >= len(lead) else a
        if flat.shape[0] > 1 and not np.array_equal(flat, np.broadcast_to(flat[:1], flat.shape)):
            return False
    return True


def products(
    remote: Any,
    kind: str,
    document: Callable[[Sequence[np.ndarray]], dict],
    arrays: Sequence[np.ndarray],
    base_ndims: Sequence[int],
    in_paths: list[str],
    out_paths: list[str],
    vectors: Sequence[np.ndarray],
    vector_ndims: Sequence[int],
    result_shapes: Sequence[tuple[int, ...]],
    result_dtypes: Sequence[Any],
) -> list[np.ndarray]:
    """The products of ``vectors`` (tangents of ``in_paths`` for ``kind="jvp"``,
    cotangents of ``out_paths`` for ``"vjp"``) at ``arrays``, each of which may carry
    leading batch axes (``vmap_method="expand_dims"``)."""
    leads = [a.shape[: a.ndim - n] for a, n in zip(arrays, base_ndims)]
    leads += [v.shape[: v.ndim - n] for v, n in zip(vectors, vector_ndims)]
    lead = np.broadcast_shapes(*leads) if leads else ()
    size = math.prod(lead)

    def at(values: Sequence[np.ndarray], ndims: Sequence[int], k: int) -> list[np.ndarray]:
        out = []
        for v, n in zip(values, ndims):
            full = np.broadcast_to(v, lead + v.shape[v.ndim - n :])
            out.append(full.reshape((size, *full.shape[len(lead) :]))[k])
        return out

    def single(point: Sequence[np.ndarray], vecs: Sequence[np.ndarray]) -> list[np.ndarray]:
        doc = document(point)
        if kind == "jvp":
            answer = remote.jvp(doc, in_paths, out_paths, dict(zip(in_paths, vecs)))
            keys = out_paths
        else:
            answer = remote.vjp(doc, in_paths, out_paths, dict(zip(out_paths, vecs)))
            keys = in_paths
        return [np.asarray(answer[p]) for p in keys]

    if lead == ():
        rows = [single(arrays, vectors)]
    else:
        point = at(arrays, base_ndims, 0)
        if _one_point(arrays, lead, size) and remote.jacobian_pays(
            *_costs(size, point, vectors, vector_ndims, result_shapes, result_dtypes)
        ):
            jac = remote.jacobian(document(point), in_paths, out_paths)
            vecs = [
                np.broadcast_to(v, lead + v.shape[v.ndim - n :]).reshape(
                    (size, *v.shape[v.ndim - n :])
                )
                for v, n in zip(vectors, vector_ndims)
            ]
            return [
                r.reshape(lead + shape).astype(dtype, copy=False)
                for r, shape, dtype in zip(
                    _contract(kind, jac, in_paths, out_paths, vecs), result_shapes, result_dtypes
                )
            ]
        rows = [
            single(at(arrays, base_ndims, k), at(vectors, vector_ndims, k)) for k in range(size)
        ]
    return [
        np.stack([row[j] for row in rows]).reshape(lead + shape).astype(dtype, copy=False)
        for j, (shape, dtype) in enumerate(zip(result_shapes, result_dtypes))
    ]


def _costs(
    size: int, point: Sequence[np.ndarray], vectors: Sequence[np.ndarray],
    vector_ndims: Sequence[int], result_shapes: Sequence[tuple[int, ...]],
    result_dtypes: Sequence[Any],
) -> tuple[int, int]:  # fmt: skip
    """``(bytes of the Jacobian, bytes of size product requests and answers)``."""
    vector_elems = sum(math.prod(v.shape[v.ndim - n :]) for v, n in zip(vectors, vector_ndims))
    result_elems = sum(math.prod(shape) for shape in result_shapes)
    item = max((np.dtype(d).itemsize for d in result_dtypes), default=4)
    inputs = sum(np.asarray(a).nbytes for a in point)
    return vector_elems * result_elems * item, size * (
        inputs + (vector_elems + result_elems) * item
    )


def _contract(
    kind: str, jac: dict, in_paths: list[str], out_paths: list[str], vecs: list[np.ndarray]
) -> list[np.ndarray]:
    """Batched products from the Jacobian blocks ``jac[out][in]`` of shape
    ``out.shape + in.shape``; ``vecs`` carry one leading batch axis."""
    out = []
    total: int | np.ndarray
    if kind == "jvp":
        for o in out_paths:
            total = 0
            for i, t in zip(in_paths, vecs):
                total = total + _jvp_block(np.asarray(jac[o][i]), t)
            out.append(np.asarray(total))
    else:
        for i in in_paths:
            total = 0
            for o, c in zip(out_paths, vecs):
                total = total + _vjp_block(np.asarray(jac[o][i]), c)
            out.append(np.asarray(total))
    return out


def _jvp_block(block: np.ndarray, tangents: np.ndarray) -> np.ndarray:
    """``block`` (out.shape + in.shape) times each tangent (batch, *in.shape)."""
    n_in = tangents.ndim - 1
    out_shape = block.shape[: block.ndim - n_in]
    matrix = block.reshape(math.prod(out_shape), -1)
    return (tangents.reshape(tangents.shape[0], -1) @ matrix.T).reshape(
        (tangents.shape[0], *out_shape)
    )


def _vjp_block(block: np.ndarray, cotangents: np.ndarray) -> np.ndarray:
    """Each cotangent (batch, *out.shape) times ``block`` (out.shape + in.shape)."""
    n_out = cotangents.ndim - 1
    in_shape = block.shape[n_out:]
    matrix = block.reshape(-1, math.prod(in_shape))
    return (cotangents.reshape(cotangents.shape[0], -1) @ matrix).reshape(
        (cotangents.shape[0], *in_shape)
    )
