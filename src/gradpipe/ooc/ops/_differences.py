"""`diff`: differences of neighbouring elements along an axis, out of core."""

from __future__ import annotations

import numpy as np

from ..arrays._hijax import type_of

__all__ = ["diff"]


def diff(x, /, *, axis: int = -1, n: int = 1, prepend=None, append=None, budget=None):
    """The ``n``-th differences along ``axis``: ``x[1:] - x[:-1]`` there, ``n`` times,
    after joining ``prepend`` before and ``append`` after ``x`` along the axis (arrays
    of ``x``'s shape except along it), as the standard's `diff`. Differentiable."""
    import jax.numpy as jnp

    from ._manipulation import concat

    t = type_of(x)
    if t is None:
        return jnp.diff(x, n=n, axis=axis, prepend=prepend, append=append)
    nd = len(t.shape)
    if nd == 0:
        raise ValueError("diff: x must have at least one dimension.")
    if not -nd <= axis < nd:
        raise np.exceptions.AxisError(axis, nd)
    if not isinstance(n, (int, np.integer)) or isinstance(n, bool) or n < 0:
        raise ValueError(f"diff: n must be a non-negative int, got {n!r}.")
    axis %= nd
    parts = [p for p in (prepend, x, append) if p is not None]
    if len(parts) > 1:
        x = concat(parts, axis=axis, budget=budget)
    for _ in range(int(n)):
        length = type_of(x).shape[axis]
        if length == 0:
            break
        head = (slice(None),) * axis + (slice(1, None),)
        tail = (slice(None),) * axis + (slice(0, length - 1),)
        x = x[head] - x[tail] if x.dtype != np.bool_ else x[head] != x[tail]
    return x
