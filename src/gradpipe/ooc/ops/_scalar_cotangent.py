"""The sum of two cotangents of a 0-d DiskArray, itself a 0-d DiskArray.

JAX adds the cotangents of a value used twice with its type's ``vspace_add``. For
a DiskArray that is the out-of-core ``add``, whose 0-d result is a JAX value, as
every 0-d result of an operation is. A cotangent must have its primal's type,
though: a 0-d JAX value where JAX expects a 0-d DiskArray fails in JAX's own
cotangent sums ("unexpected type DiskArray{float64[]} to a primitive: add").
`add_scalar_cotangents` keeps the type.
"""

from __future__ import annotations

import numpy as np

from ..arrays._array import ArrayLike, Result
from ..arrays._hijax import DiskArrayType
from ..arrays._op import CustomOp, apply, frozen
from ..arrays._primitives import InType
from ..execution._driver import Driver, Value

__all__ = ["add_scalar_cotangents"]


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


def add_scalar_cotangents(x: ArrayLike, y: ArrayLike) -> Result:
    """``x + y`` for two 0-d DiskArray cotangents (traced or not), a 0-d DiskArray."""
    return apply(ScalarCotangentSum(), x, y)
