"""Built-in out-of-core operations, each differentiable under `jax.grad`."""

from . import _elementwise
from ._elementwise import *  # noqa: F403
from ._layout import getitem, slice_rows, slice_tile, transpose
from ._matmul import matmul
from ._reduce import max, mean, sum
from ._update import update_

__all__ = [
    *_elementwise.__all__,
    "getitem",
    "matmul",
    "max",
    "mean",
    "slice_rows",
    "slice_tile",
    "sum",
    "transpose",
    "update_",
]
