"""Batched ``/apply`` requests: one round trip for a whole ``vmap`` batch.

The client stacks the batched leaves along a new leading axis and names them in
``batched_paths``; the server evaluates each element on its own and stacks the
answers. The function is never handed the stacked batch, so a function that is not
batch-polymorphic still gets exactly its per-element answer.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._errors import HTTPError
from ._paths import flatten, unflatten

__all__ = ["split_batch", "stack"]


def split_batch(inputs: dict, paths: list[str], size: int, keyed: frozenset[str]) -> list[dict]:
    """Element ``i`` of a batched request: index ``i`` of every leaf in ``paths``."""
    leaves = dict(flatten(inputs, keyed, lambda node: isinstance(node, np.ndarray)))
    for path in paths:
        leaf = leaves.get(path)
        if leaf is None:
            raise HTTPError(422, "invalid_batch", "batched_paths names no input leaf.", path)
        if not isinstance(leaf, np.ndarray) or leaf.ndim == 0 or leaf.shape[0] != size:
            raise HTTPError(
                422, "invalid_batch", f"a batched leaf needs leading size {size}.", path
            )
    return [unflatten(inputs, {p: leaves[p][i] for p in paths}, keyed) for i in range(size)]


def stack(results: list[Any]) -> Any:
    """The per-element answers as one tree whose arrays have a leading batch axis."""
    first = results[0]
    if isinstance(first, dict):
        return {k: stack([r[k] for r in results]) for k in first}
    if isinstance(first, list | tuple):
        return [stack([r[i] for r in results]) for i in range(len(first))]
    if hasattr(first, "shape") and hasattr(first, "dtype"):
        return np.stack([np.asarray(r) for r in results])
    return list(results)
