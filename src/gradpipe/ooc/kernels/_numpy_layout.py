"""Host rules for JAX's layout and indexing primitives: broadcasting, reshaping,
slicing, padding, joining and splitting, and XLA's gather and scatter.

Rules take the primitive's operands as NumPy arrays and its parameters as keywords
(see `_numpy_elementwise`); `_numpy_eval` looks them up by name in `RULES`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from numpy.typing import DTypeLike

from ._numpy_elementwise import Rule

__all__ = ["RULES"]


def _broadcast_in_dim(
    x: np.ndarray, shape: Sequence[int], broadcast_dimensions: Sequence[int], **_: Any
) -> np.ndarray:
    expanded = [1] * len(shape)
    for d, n in zip(broadcast_dimensions, x.shape):
        expanded[d] = n
    return np.broadcast_to(x.reshape(expanded), tuple(shape))


def _reshape(
    x: np.ndarray, new_sizes: Sequence[int], dimensions: Sequence[int] | None = None, **_: Any
) -> np.ndarray:
    if dimensions is not None:
        x = np.transpose(x, dimensions)
    return x.reshape(tuple(new_sizes))


def _squeeze(x: np.ndarray, dimensions: Sequence[int], **_: Any) -> np.ndarray:
    return np.squeeze(x, axis=tuple(dimensions))


def _expand_dims(x: np.ndarray, dimensions: Sequence[int], **_: Any) -> np.ndarray:
    return np.expand_dims(x, tuple(dimensions))


def _slice(
    x: np.ndarray,
    start_indices: Sequence[int],
    limit_indices: Sequence[int],
    strides: Sequence[int] | None = None,
    **_: Any,
) -> np.ndarray:
    strides = strides or (1,) * x.ndim
    return x[tuple(slice(a, b, s) for a, b, s in zip(start_indices, limit_indices, strides))]


def _dynamic_slice(
    x: np.ndarray, *starts: np.ndarray, slice_sizes: Sequence[int], **_: Any
) -> np.ndarray:
    index = []
    for s, n, size in zip(starts, x.shape, slice_sizes):
        lo = int(np.clip(int(s), 0, n - size))
        index.append(slice(lo, lo + size))
    return x[tuple(index)]


def _dynamic_update_slice(
    x: np.ndarray, update: np.ndarray, *starts: np.ndarray, **_: Any
) -> np.ndarray:
    out = np.array(x, copy=True)
    index = []
    for s, n, size in zip(starts, x.shape, update.shape):
        lo = int(np.clip(int(s), 0, n - size))
        index.append(slice(lo, lo + size))
    out[tuple(index)] = update
    return out


def _pad(
    x: np.ndarray, value: np.ndarray, padding_config: Sequence[tuple[int, int, int]], **_: Any
) -> np.ndarray:
    """XLA's pad: low/high edges (negative ones crop) and interior padding."""
    shape = []
    for n, (lo, hi, interior) in zip(x.shape, padding_config):
        core = n + max(n - 1, 0) * interior
        shape.append(lo + core + hi)
    full = []  # the padded array before cropping negative edges
    for n, (lo, hi, interior) in zip(x.shape, padding_config):
        core = n + max(n - 1, 0) * interior
        full.append(max(lo, 0) + core + max(hi, 0))
    out = np.full(full, value, dtype=x.dtype)
    place = tuple(
        slice(max(lo, 0), max(lo, 0) + n + max(n - 1, 0) * interior, interior + 1)
        for n, (lo, _, interior) in zip(x.shape, padding_config)
    )
    out[place] = x
    crop = tuple(
        slice(-min(lo, 0), f - (-min(hi, 0))) for f, (lo, hi, _) in zip(full, padding_config)
    )
    return out[crop]


def _concatenate(*xs: np.ndarray, dimension: int, **_: Any) -> np.ndarray:
    return np.concatenate(xs, axis=dimension)


def _split(x: np.ndarray, sizes: Sequence[int], axis: int, **_: Any) -> list[np.ndarray]:
    cuts = np.cumsum(sizes)[:-1]
    return np.split(x, cuts, axis=axis)


def _rev(x: np.ndarray, dimensions: Sequence[int], **_: Any) -> np.ndarray:
    return np.flip(x, axis=tuple(dimensions)) if dimensions else x


def _transpose(x: np.ndarray, permutation: Sequence[int], **_: Any) -> np.ndarray:
    return np.transpose(x, permutation)


def _iota(dtype: DTypeLike, shape: Sequence[int], dimension: int, **_: Any) -> np.ndarray:
    view = [1] * len(shape)
    view[dimension] = shape[dimension]
    return np.broadcast_to(np.arange(shape[dimension], dtype=dtype).reshape(view), tuple(shape))


def _tile(x: np.ndarray, reps: Sequence[int], **_: Any) -> np.ndarray:
    return np.tile(x, tuple(reps))


# ------------------------------------------------------------ gather and scatter


def _mode_name(mode: object) -> str:
    return getattr(mode, "name", str(mode)).rsplit(".", 1)[-1].upper()


def _start(
    shape: Sequence[int],
    sizes: Sequence[int],
    dims: Sequence[int],
    index: np.ndarray,
    mode: object,
    batching: tuple[Sequence[int], Sequence[int]] = ((), ()),
    b: Sequence[int] = (),
) -> list[int] | None:
    """The start of one gathered or scattered window, or None when dropped; the
    operand's batching axes start at the index's own position ``b`` along its
    batching axes."""
    start = [0] * len(shape)
    for k, d in enumerate(dims):
        start[d] = int(index[k])
    for d, k in zip(*batching):
        start[d] = int(b[k])
    if _mode_name(mode) == "FILL_OR_DROP":
        if any(s < 0 or s + z > n for s, z, n in zip(start, sizes, shape)):
            return None
        return start
    return [int(np.clip(s, 0, n - z)) for s, z, n in zip(start, sizes, shape)]


def _gather(
    operand: np.ndarray,
    indices: np.ndarray,
    dimension_numbers: Any,
    slice_sizes: Sequence[int],
    mode: object,
    fill_value: Any = None,
    **_: Any,
) -> np.ndarray:
    """XLA's gather, one window per index vector."""
    dn = dimension_numbers
    batching = (dn.operand_batching_dims, dn.start_indices_batching_dims)
    dropped = {*dn.collapsed_slice_dims, *dn.operand_batching_dims}
    batch = indices.shape[:-1]
    window = [z for d, z in enumerate(slice_sizes) if d not in dropped]
    rank = len(batch) + len(window)
    shape, it_b, it_w = [], iter(batch), iter(window)
    for d in range(rank):
        shape.append(next(it_w) if d in dn.offset_dims else next(it_b))
    out = np.empty(shape, operand.dtype)
    if fill_value is None:
        kind = operand.dtype.kind
        fill_value = (
            np.nan
            if kind in "fc"
            else np.iinfo(operand.dtype).min
            if kind == "i"
            else np.iinfo(operand.dtype).max
            if kind == "u"
            else True
        )
    for b in np.ndindex(batch):
        it = iter(b)
        place = tuple(slice(None) if d in dn.offset_dims else next(it) for d in range(rank))
        start = _start(
            operand.shape, slice_sizes, dn.start_index_map, indices[b], mode, batching, b
        )
        if start is None:
            out[place] = fill_value
            continue
        piece = operand[tuple(slice(s, s + z) for s, z in zip(start, slice_sizes))]
        out[place] = piece.reshape(window)
    return out


def _scatter(combine: Callable[[np.ndarray, np.ndarray], np.ndarray] | None) -> Rule:
    """XLA's scatter: replace, or ``combine`` old and new."""

    def rule(
        operand: np.ndarray,
        indices: np.ndarray,
        updates: np.ndarray,
        dimension_numbers: Any,
        mode: object,
        **_: Any,
    ) -> np.ndarray:
        dn = dimension_numbers
        batching = (dn.operand_batching_dims, dn.scatter_indices_batching_dims)
        inserted = {*dn.inserted_window_dims, *dn.operand_batching_dims}
        out = np.array(operand, copy=True)
        scatter_dims = [d for d in range(updates.ndim) if d not in dn.update_window_dims]
        window = iter(updates.shape[d] for d in dn.update_window_dims)
        sizes = [1 if d in inserted else next(window) for d in range(out.ndim)]
        for b in np.ndindex(tuple(updates.shape[d] for d in scatter_dims)):
            start = _start(
                out.shape, sizes, dn.scatter_dims_to_operand_dims, indices[b], mode, batching, b
            )
            if start is None:
                continue
            it = iter(b)
            piece = updates[
                tuple(
                    slice(None) if d in dn.update_window_dims else next(it)
                    for d in range(updates.ndim)
                )
            ].reshape(sizes)
            region = tuple(slice(s, s + z) for s, z in zip(start, sizes))
            out[region] = piece if combine is None else combine(out[region], piece)
        return out

    return rule


RULES: dict[str, Rule] = {
    "broadcast_in_dim": _broadcast_in_dim,
    "reshape": _reshape,
    "squeeze": _squeeze,
    "expand_dims": _expand_dims,
    "transpose": _transpose,
    "rev": _rev,
    "slice": _slice,
    "dynamic_slice": _dynamic_slice,
    "dynamic_update_slice": _dynamic_update_slice,
    "pad": _pad,
    "concatenate": _concatenate,
    "split": _split,
    "iota": _iota,
    "tile": _tile,
    "gather": _gather,
    "scatter": _scatter(None),
    "scatter-add": _scatter(np.add),
    "scatter_add": _scatter(np.add),
    "scatter-mul": _scatter(np.multiply),
    "scatter_mul": _scatter(np.multiply),
}
