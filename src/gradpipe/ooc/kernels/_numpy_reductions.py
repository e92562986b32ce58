"""Host rules for JAX's contracting, reducing, scanning and sorting primitives:
``dot_general``, the ``reduce_*`` family, ``argmax``/``argmin``, the cumulative
scans and ``sort``.

Rules take the primitive's operands as NumPy arrays and its parameters as keywords
(see `_numpy_elementwise`); `_numpy_eval` looks them up by name in `RULES`.
"""

from __future__ import annotations

import string
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from numpy.typing import DTypeLike

from ._numpy_elementwise import Rule

__all__ = ["RULES"]


def _dot_general(
    x: np.ndarray,
    y: np.ndarray,
    dimension_numbers: tuple[tuple[Sequence[int], Sequence[int]], ...],
    preferred_element_type: DTypeLike | None = None,
    **_: Any,
) -> np.ndarray:
    (lc, rc), (lb, rb) = dimension_numbers
    letters = iter(string.ascii_letters)
    xs = [next(letters) for _ in range(x.ndim)]
    ys = [next(letters) for _ in range(y.ndim)]
    for a, b in zip(lc, rc):
        ys[b] = xs[a]
    for a, b in zip(lb, rb):
        ys[b] = xs[a]
    batch = [xs[a] for a in lb]
    free_x = [xs[a] for a in range(x.ndim) if a not in lc and a not in lb]
    free_y = [ys[b] for b in range(y.ndim) if b not in rc and b not in rb]
    spec = f"{''.join(xs)},{''.join(ys)}->{''.join(batch + free_x + free_y)}"
    out = np.einsum(spec, x, y, optimize=True)
    return out if preferred_element_type is None else out.astype(preferred_element_type)


def _reduction(fn: Callable[..., Any]) -> Rule:
    def rule(x: np.ndarray, axes: Sequence[int], **_: Any) -> np.ndarray:
        return fn(x, axis=tuple(axes))

    return rule


def _arg_reduction(fn: Callable[..., Any]) -> Rule:
    def rule(x: np.ndarray, axes: Sequence[int], index_dtype: DTypeLike, **_: Any) -> np.ndarray:
        (axis,) = axes
        return fn(x, axis=axis).astype(index_dtype)

    return rule


def _cumulative(fn: Callable[..., Any]) -> Rule:
    def rule(x: np.ndarray, axis: int, reverse: bool = False, **_: Any) -> np.ndarray:
        if reverse:
            return np.flip(fn(np.flip(x, axis), axis=axis), axis)
        return fn(x, axis=axis)

    return rule


def _cumlogsumexp(x: np.ndarray, axis: int) -> np.ndarray:
    return np.logaddexp.accumulate(x, axis=axis)


def _sort(
    *operands: np.ndarray, dimension: int, is_stable: bool = True, num_keys: int = 1, **_: Any
) -> list[np.ndarray]:
    """XLA's sort: every operand reordered as the first one sorts (NaNs last)."""
    if num_keys != 1:
        raise NotImplementedError("sort on several keys has no host rule.")
    order = np.argsort(operands[0], axis=dimension, kind="stable")
    return [np.take_along_axis(x, order, axis=dimension) for x in operands]


RULES: dict[str, Rule] = {
    "dot_general": _dot_general,
    "reduce_sum": _reduction(np.sum),
    "reduce_prod": _reduction(np.prod),
    "reduce_max": _reduction(np.max),
    "reduce_min": _reduction(np.min),
    "reduce_and": _reduction(np.all),
    "reduce_or": _reduction(np.any),
    "reduce_xor": _reduction(lambda x, axis: np.bitwise_xor.reduce(x, axis=axis)),
    "argmax": _arg_reduction(np.argmax),
    "argmin": _arg_reduction(np.argmin),
    "cumsum": _cumulative(np.cumsum),
    "cumprod": _cumulative(np.cumprod),
    "cummax": _cumulative(np.maximum.accumulate),
    "cummin": _cumulative(np.minimum.accumulate),
    "cumlogsumexp": _cumulative(_cumlogsumexp),
    "sort": _sort,
}
