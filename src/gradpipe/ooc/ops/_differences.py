"""`diff`: differences of neighbouring elements along an axis, out of core."""

from __future__ import annotations

from typing import cast

import numpy as np

from ..arrays._array import ArrayLike, Result
from ..arrays._hijax import type_of
from ._arg_types import BudgetLike
from ._manip_args import not_disk, shape_of

__all__ = ["diff"]


def diff(
    x: ArrayLike,
    /,
    *,
    axis: int = -1,
    n: int = 1,
    prepend: ArrayLike | None = None,
    append: ArrayLike | None = None,
    budget: BudgetLike = None,
) -> Result:
    """The ``n``-th differences along ``axis``: ``x[1:] - x[:-1]`` there, ``n`` times,
    after joining ``prepend`` before and ``append`` after ``x`` along the axis (arrays
    of ``x``'s shape except along it), as the standard's `diff`. Differentiable."""
    import jax.numpy as jnp

    from ._manipulation import concat

    t = type_of(x)
    if t is None:
        # a DiskArray prepend or append is read through its __array__ (not in JAX's types)
        return jnp.diff(not_disk(x), n=n, axis=axis, prepend=prepend, append=append)  # type: ignore[arg-type]
    nd = len(t.shape)
    if nd == 0:
        raise ValueError("diff: x must have at least one dimension.")
    if not -nd <= axis < nd:
        raise np.exceptions.AxisError(axis, nd)
    if not isinstance(n, (int, np.integer)) or isinstance(n, bool) or n < 0:
        raise ValueError(f"diff: n must be a non-negative int, got {n!r}.")
    axis %= nd
    parts = [p for p in (prepend, x, append) if p is not None]
    out = cast("Result", x)  # a DiskArray, or its tracer
    if len(parts) > 1:
        out = concat(parts, axis=axis, budget=budget)
    for _ in range(int(n)):
        length = shape_of(out)[axis]
        if length == 0:
            break
        head = (slice(None),) * axis + (slice(1, None),)
        tail = (slice(None),) * axis + (slice(0, length - 1),)
        out = out[head] - out[tail] if out.dtype != np.bool_ else out[head] != out[tail]
    return out
