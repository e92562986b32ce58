"""Methods made by code that forward to `gradpipe.ooc.ops`.

`DiskArray`'s operators and NumPy-style methods (``x + y``, ``x[i]``, ``x.sum()``)
and those of its JAX type under tracing are thin forwards to the namespace's
functions of the same name, reached through `_namespace` (they are built above this
layer). `_forward` makes one such method, `_divmod` the pair ``divmod`` returns and
`_reduction` a reduction that takes NumPy's ``dtype=`` and ``out=`` arguments.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from numpy.typing import DTypeLike

from ..planning._budget import MemoryBudget
from ._namespace import namespace

__all__ = ["_divmod", "_forward", "_reduction"]


def _is_operand(x: object) -> bool:
    """Whether ``x`` can be the other operand of an operator (else NotImplemented)."""
    return isinstance(x, (bool, int, float, complex, np.generic, np.ndarray)) or hasattr(x, "dtype")


def _forward(name: str, *, reflected: bool = False) -> Callable[..., Any]:
    """A method that calls ``gradpipe.ooc.ops.<name>`` (operands swapped if ``reflected``)."""

    def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        ops = namespace().ops

        if name not in _NOT_BINARY and args and not _is_operand(args[0]):
            return NotImplemented
        op = getattr(ops, name)
        if reflected:
            return op(args[0], self, *args[1:], **kwargs)
        return op(self, *args, **kwargs)

    method.__name__ = name
    method.__doc__ = f"See `gradpipe.ooc.{name}`."
    return method


def _divmod(*, reflected: bool = False) -> Callable[[Any, Any], Any]:
    """``divmod(x, other)``: ``(x // other, x % other)``, as NumPy's and JAX's arrays give."""
    floor_divide = _forward("floor_divide", reflected=reflected)
    remainder = _forward("remainder", reflected=reflected)

    def method(self: Any, other: Any) -> Any:
        quotient = floor_divide(self, other)
        if quotient is NotImplemented:
            return NotImplemented
        return quotient, remainder(self, other)

    method.__name__ = "__rdivmod__" if reflected else "__divmod__"
    method.__doc__ = "``(x // other, x % other)``: see `gradpipe.ooc.floor_divide`, `remainder`."
    return method


_NOT_BINARY = frozenset(
    {
        "getitem",
        "astype",
        "update_",
        "persist",
        "transpose",
        "matrix_transpose",
        "matmul",
        "real",
        "imag",
        "conj",
    }
)


def _reduction(name: str) -> Callable[..., Any]:
    """``x.sum(...)`` & co., with the arguments `np.sum(x)` & co. pass (``dtype``, ``out``)."""

    def method(
        self: Any,
        axis: int | tuple[int, ...] | None = None,
        dtype: DTypeLike | None = None,
        out: object = None,
        keepdims: bool = False,
        *,
        budget: MemoryBudget | int | str | None = None,
        **other: object,
    ) -> Any:
        ops = namespace().ops

        if out is not None or other:
            given = ["out"] * (out is not None) + sorted(other)
            raise TypeError(
                f"DiskArray.{name}() does not take {', '.join(given)} (results are new "
                f"arrays, over whole axes). Call ooc.{name}(x, axis=..., keepdims=...)."
            )
        if dtype is not None:  # NumPy's `dtype=`: accumulate in that dtype
            self = ops.astype(self, dtype, budget=budget)
        return getattr(ops, name)(self, axis=axis, keepdims=keepdims, budget=budget)

    method.__name__ = name
    method.__doc__ = f"See `gradpipe.ooc.{name}` (``dtype=`` converts first, as NumPy's)."
    return method
