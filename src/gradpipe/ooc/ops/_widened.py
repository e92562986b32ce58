"""Weakly typed JAX scalars that NumPy's rule widens: the dtype they enter a kernel in.

A weakly typed JAX scalar (a Python number JAX traced: an argument of `jax.jit`
or `jax.grad`) acts like a Python number (`_promotion`): beside a bool or int8
`DiskArray` a float one makes the result float64, as ``int8_array + 0.5`` is in
NumPy. While ``jax_enable_x64`` is off, JAX holds it as a float32 value, and a
kernel that saw that float32 value would give float32 (``int8 + float32`` is
float32): a result on disk rounded to 32 bits where the rule says 64. So the
kernel converts such an operand to NumPy's dtype first. The value stays the
32-bit one JAX holds; the result has NumPy's dtype, and the operand's gradient
comes back in its own dtype (JAX's transpose of the conversion).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..arrays._hijax import type_of
from ..kernels._kernel import Kernel
from ..kernels._promotion import canonical_dtype, is_constant, operand_dtypes

__all__ = ["Widened", "widened"]


@dataclasses.dataclass(frozen=True)
class Widened:
    """``kernel`` with the operands at ``positions`` first converted to their dtypes
    (``(position, dtype.str)`` pairs). Hashable: equal kernels share a compilation."""

    kernel: Kernel
    positions: tuple[tuple[int, str], ...]

    @property
    def __name__(self) -> str:  # what progress bars and `explain` call the kernel
        return getattr(self.kernel, "__name__", type(self.kernel).__name__)

    def __call__(self, xp: Any, *xs: Any, **params: Any) -> Any:
        converted = list(xs)
        for i, dtype in self.positions:
            converted[i] = xp.astype(converted[i], np.dtype(dtype))
        return self.kernel(xp, *converted, **params)


def widened(kernel: Kernel, operands: Sequence[Any], what: str) -> Kernel:
    """``kernel``, or a `Widened` one where an in-memory JAX operand enters in a wider
    dtype by NumPy's rule than JAX holds it in (a weak scalar while x64 is off)."""
    dtypes = operand_dtypes(operands, type_of, what)
    positions = tuple(
        (i, dtype.str)
        for i, (x, dtype) in enumerate(zip(operands, dtypes))
        if type_of(x) is None
        and not is_constant(x)
        and hasattr(x, "dtype")
        and canonical_dtype(dtype) != dtype
        and np.dtype(x.dtype) != dtype
    )
    return Widened(kernel, positions) if positions else kernel
