"""The sum of two cotangents of a DiskArray, as JAX adds them (``vspace_add``).

JAX adds the cotangents of a value used twice with its type's ``vspace_add``:

- For a 0-d DiskArray the out-of-core ``add`` would give a JAX value, as every 0-d
  result of an operation is; but a cotangent must have its primal's type (a 0-d
  JAX value where JAX expects a 0-d DiskArray fails in JAX's own cotangent sums:
  "unexpected type DiskArray{float64[]} to a primitive: add"). `ScalarCotangentSum`
  keeps the type.
- Otherwise the sum is the ``add`` of the two, except for two deferred cotangents
  of one chain of a loss whose gradient its own pass computed
  (`execution._one_pass`): their sum stays deferred, so the backward passes it
  stands for need not run.
"""

from __future__ import annotations

import numpy as np

from ..arrays._array import ArrayLike, Result
from ..arrays._hijax import DiskArrayType
from ..arrays._op import CustomOp, apply, frozen
from ..arrays._primitives import InType
from ..execution._deferred_cotangents import merge
from ..execution._driver import Driver, Value
from ._blockwise import Blockwise
from ._elementwise import add

__all__ = ["add_cotangents"]


@frozen
class ScalarCotangentSum(CustomOp):
    """``x + y`` for 0-d DiskArrays, a 0-d DiskArray (not a JAX value)."""

    @property
    def name(self) -> str:
        return "add"

    def output_shape(self, *shapes: tuple[int, ...]) -> tuple[int, ...]:
        return ()

    def out_type(self, *in_types: InType) -> DiskArrayType:
        return DiskArrayType((), np.result_type(*(t.dtype for t in in_types)))

    def forward(self, driver: Driver, x: Value, y: Value) -> np.ndarray:
        return np.asarray(_value(x) + _value(y), np.result_type(x.dtype, y.dtype))


def _value(x: Value) -> np.ndarray:
    return np.asarray(x.read(None) if hasattr(x, "read") else x)


@frozen
class CotangentSum(CustomOp):
    """``x + y`` for two cotangents of one shape: deferred where both are deferred
    cotangents of one chain (`_one_pass.merge`), else the fused ``add``."""

    takes_pending = True  # sees deferred cotangents as they are (`_primitives._settled`)

    @property
    def name(self) -> str:
        return "add"

    def output_shape(self, sx: tuple[int, ...], sy: tuple[int, ...]) -> tuple[int, ...]:
        return tuple(np.broadcast_shapes(sx, sy))

    def output_dtype(self, dx: np.dtype, dy: np.dtype) -> np.dtype:
        return np.result_type(dx, dy)

    def forward(self, driver: Driver, x: Value, y: Value) -> Value:
        merged = merge(driver, x, y)
        if merged is not None:
            return merged
        return driver.forward(Blockwise(add.kernel, "add"), [x, y])


def add_cotangents(x: ArrayLike, y: ArrayLike) -> Result:
    """``x + y`` for two DiskArray cotangents of one DiskArray (traced or not)."""
    if not getattr(x, "shape", ()) and not getattr(y, "shape", ()):
        return apply(ScalarCotangentSum(), x, y)
    return apply(CotangentSum(), x, y)
