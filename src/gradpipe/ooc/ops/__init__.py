"""Built-in out-of-core operations, each differentiable under `jax.grad`."""

from ._elementwise import (
    abs,
    add,
    astype,
    cos,
    divide,
    exp,
    log,
    maximum,
    minimum,
    multiply,
    negative,
    power,
    relu,
    sigmoid,
    sin,
    sqrt,
    square,
    subtract,
    tanh,
)
from ._layout import getitem, slice_rows, slice_tile, transpose
from ._matmul import matmul
from ._reduce import max, mean, sum
from ._update import update_

__all__ = [
    "abs",
    "add",
    "astype",
    "cos",
    "divide",
    "exp",
    "getitem",
    "log",
    "matmul",
    "max",
    "maximum",
    "mean",
    "minimum",
    "multiply",
    "negative",
    "power",
    "relu",
    "sigmoid",
    "sin",
    "slice_rows",
    "slice_tile",
    "sqrt",
    "square",
    "subtract",
    "sum",
    "tanh",
    "transpose",
    "update_",
]
