"""`jax.lax.stop_gradient` of a DiskArray: a step of its chain that stops the gradient.

JAX applies ``stop_gradient``'s own rule while differentiating (the tangent is
zero), so what evaluates here passes the values unchanged. It is still a step of
the chain, not the DiskArray itself: a loss computing its gradient in its own pass
(`execution._one_pass`) sees where the gradient stops, in its JAX program of the
tile and in which steps send a cotangent back.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..arrays._array import ArrayLike, Result
from ..arrays._jax_hooks import stop_gradient_with
from ._blockwise import blockwise

__all__ = ["stop_gradient"]


def _kernel(xp: Any, x: Any) -> Any:
    """The identity, whose gradient JAX's namespace stops; NumPy's values pass."""
    if xp is np:
        return x
    import jax

    return jax.lax.stop_gradient(x)


_kernel.stops_gradient = True  # type: ignore[attr-defined]  # `Blockwise.stops_gradient`


def stop_gradient(x: ArrayLike) -> Result:
    """``x``'s values, a step no gradient flows through."""
    return blockwise(_kernel, "stop_gradient", x)


stop_gradient_with(stop_gradient)
