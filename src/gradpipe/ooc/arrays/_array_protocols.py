"""`ArrayProtocols`: the Python and NumPy protocols of a `DiskArray`.

`DiskArray` takes from this base its operators (``x + y``, ``x @ w``, ``x[i]``,
``x[i] = v``: forwards to `gradpipe.ooc.ops`), NumPy's protocols (ufuncs run out of
core, ``np.asarray`` and DLPack read a copy within the memory budget) and Python's
conversions (``len``, ``bool``, ``int``, ``float``: NumPy's answers, or a refusal,
never identity by accident). Its public methods and properties are `DiskArray`'s own.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, ClassVar, Self, TypeAlias, TypeVar

import jax
import numpy as np
from numpy.typing import DTypeLike

from ..planning._budget import MemoryBudget
from ._forwarding import _divmod, _forward
from ._namespace import namespace

__all__ = ["ArrayProtocols"]

#: `ArrayLike` as this module can spell it: `ArrayProtocols` stands for `DiskArray`,
#: its one subclass (`ArrayLike` is defined with `DiskArray`, above this base).
_Operand: TypeAlias = (
    "ArrayProtocols | jax.Array | np.ndarray | np.generic | bool | int | float | complex"
)

_K = TypeVar("_K", bool, int, float, complex)
_A = TypeVar("_A")

#: The types of the operators, for an array type ``_A``: ``x + y``, ``-x``, ``divmod(x, y)``.
_Binary: TypeAlias = Callable[[_A, _Operand], "_A | jax.Array"]
_Unary: TypeAlias = Callable[[_A], "_A | jax.Array"]
_DivMod: TypeAlias = Callable[[_A, _Operand], "tuple[_A | jax.Array, _A | jax.Array]"]

# NumPy's ufunc names that the array API spells otherwise
_UFUNC_NAMES = {
    "absolute": "abs",
    "arccos": "acos",
    "arccosh": "acosh",
    "arcsin": "asin",
    "arcsinh": "asinh",
    "arctan": "atan",
    "arctan2": "atan2",
    "arctanh": "atanh",
    "conjugate": "conj",
    "invert": "bitwise_invert",
    "left_shift": "bitwise_left_shift",
    "right_shift": "bitwise_right_shift",
    "power": "pow",
    "true_divide": "divide",
}


class ArrayProtocols:
    """The operators and Python/NumPy protocols of `DiskArray` (its only subclass)."""

    __array_priority__ = 100  # so `np_scalar * disk_array` defers to us

    # what `DiskArray` supplies
    shape: tuple[int, ...]
    dtype: np.dtype[Any]

    if TYPE_CHECKING:

        @property
        def size(self) -> int: ...

        def to_numpy(
            self, *, force: bool = False, budget: MemoryBudget | int | str | None = None
        ) -> np.ndarray: ...

        def _concrete_file(self, what: str) -> Any: ...

    def __array__(self, dtype: DTypeLike | None = None, copy: bool | None = None) -> np.ndarray:
        """The data as a NumPy array (``np.asarray(x)``): a copy read from disk, refused
        with a `MemoryError` giving the size when it exceeds the memory budget."""
        if copy is False:
            raise ValueError(
                "np.asarray(x, copy=False): a DiskArray's data is on disk, so NumPy can only "
                "have a copy of it; pass copy=None or copy=True."
            )
        out = self.to_numpy()
        return out if dtype is None else out.astype(dtype)

    # -- Python protocols: NumPy's answers, or a refusal (never identity by accident)

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d DiskArray (it has no length).")
        return self.shape[0]

    def __iter__(self) -> Iterator[Self | jax.Array]:
        """Rows, one `DiskArray` each (as NumPy iterates over the first axis)."""
        n = len(self)  # a 0-d array refuses, as NumPy's does
        return (self[i] for i in range(n))

    def __contains__(self, value: object) -> bool:
        raise TypeError(
            "`value in DiskArray` is not supported (Python would compare rows by identity). "
            "Use ooc.any(x == value) for whether any element equals value."
        )

    def _scalar(self, kind: type[_K]) -> _K:
        if self.size != 1:
            if kind is bool:
                raise ValueError(
                    f"The truth value of a DiskArray of shape {self.shape} is ambiguous "
                    "(as for a NumPy array). Reduce it first: ooc.any(x) or ooc.all(x)."
                )
            raise TypeError(
                f"only size-1 DiskArrays can be converted to Python scalars, got shape "
                f"{self.shape}."
            )
        return kind(self._concrete_file(f"{kind.__name__}()").read(None).reshape(()).item())

    def __bool__(self) -> bool:
        return self._scalar(bool)

    def __float__(self) -> float:
        return self._scalar(float)

    def __int__(self) -> int:
        return self._scalar(int)

    def __complex__(self) -> complex:
        return self._scalar(complex)

    def __index__(self) -> int:
        if self.dtype.kind not in "iu":
            raise TypeError(f"only integer DiskArrays can be used as an index, not {self.dtype}.")
        return self._scalar(int)

    __hash__ = object.__hash__  # by identity (``==`` is elementwise, as in NumPy)

    # -- NumPy's protocols -------------------------------------------------------

    def __array_ufunc__(
        self, ufunc: np.ufunc, method: str, *inputs: Any, **kwargs: Any
    ) -> Self | jax.Array | tuple[Self | jax.Array, Self | jax.Array]:
        """NumPy's ufuncs run out of core: ``np.exp(x)`` is ``ooc.exp(x)``, a DiskArray.

        A ufunc with no out-of-core twin, a method such as ``np.add.reduce``, or an
        ``out=`` argument is refused with a `TypeError` rather than loading the array.
        """
        ops = namespace().ops

        if ufunc is np.divmod and method == "__call__" and not kwargs:  # `divmod(np_scalar, x)`
            return ops.floor_divide(*inputs), ops.remainder(*inputs)
        name = _UFUNC_NAMES.get(ufunc.__name__, ufunc.__name__)
        fn = getattr(ops, name, None) if name in ops.__all__ else None
        if method != "__call__" or fn is None or kwargs:
            what = f"np.{ufunc.__name__}" + ("" if method == "__call__" else f".{method}")
            extra = f" with {sorted(kwargs)}" if kwargs and fn is not None else ""
            raise TypeError(
                f"{what}{extra} has no out-of-core form for DiskArrays. Use the gradpipe.ooc "
                "function of the same name, or read the data with x.to_numpy() first."
            )
        return fn(*inputs)

    def __dlpack__(
        self,
        /,
        *,
        stream: int | Any | None = None,
        max_version: tuple[int, int] | None = None,
        dl_device: tuple[int, int] | None = None,
        copy: bool | None = None,
    ) -> Any:  # a PyCapsule (typed `types.CapsuleType` from Python 3.13)
        """A DLPack capsule of a copy of the data read into host memory (refused with
        a `MemoryError` above the budget, as `to_numpy`; ``copy=False`` is a
        `BufferError`: the data on disk cannot be shared)."""
        if copy is False:
            raise BufferError(
                "a DiskArray's data is on disk: DLPack can only carry a copy of it in memory "
                "(pass copy=None or copy=True)."
            )
        kwargs: dict[str, Any] = {} if max_version is None else {"max_version": max_version}
        return self.to_numpy().__dlpack__(stream=stream, **kwargs)

    def __dlpack_device__(self) -> tuple[int, int]:
        """The host CPU, where the copy `__dlpack__` exports lives."""
        return (1, 0)  # DLPack's kDLCPU, device 0

    # -- operators (thin forwards to gradpipe.ooc.ops) ---------------------------

    __matmul__: ClassVar[_Binary[Self]] = _forward("matmul")
    __rmatmul__: ClassVar[_Binary[Self]] = _forward("matmul", reflected=True)
    __add__: ClassVar[_Binary[Self]] = _forward("add")
    __radd__: ClassVar[_Binary[Self]] = _forward("add", reflected=True)
    __sub__: ClassVar[_Binary[Self]] = _forward("subtract")
    __rsub__: ClassVar[_Binary[Self]] = _forward("subtract", reflected=True)
    __mul__: ClassVar[_Binary[Self]] = _forward("multiply")
    __rmul__: ClassVar[_Binary[Self]] = _forward("multiply", reflected=True)
    __truediv__: ClassVar[_Binary[Self]] = _forward("divide")
    __rtruediv__: ClassVar[_Binary[Self]] = _forward("divide", reflected=True)
    __floordiv__: ClassVar[_Binary[Self]] = _forward("floor_divide")
    __rfloordiv__: ClassVar[_Binary[Self]] = _forward("floor_divide", reflected=True)
    __mod__: ClassVar[_Binary[Self]] = _forward("remainder")
    __rmod__: ClassVar[_Binary[Self]] = _forward("remainder", reflected=True)
    __divmod__: ClassVar[_DivMod[Self]] = _divmod()
    __rdivmod__: ClassVar[_DivMod[Self]] = _divmod(reflected=True)
    __pow__: ClassVar[_Binary[Self]] = _forward("pow")
    __rpow__: ClassVar[_Binary[Self]] = _forward("pow", reflected=True)
    __and__: ClassVar[_Binary[Self]] = _forward("bitwise_and")
    __rand__: ClassVar[_Binary[Self]] = _forward("bitwise_and", reflected=True)
    __or__: ClassVar[_Binary[Self]] = _forward("bitwise_or")
    __ror__: ClassVar[_Binary[Self]] = _forward("bitwise_or", reflected=True)
    __xor__: ClassVar[_Binary[Self]] = _forward("bitwise_xor")
    __rxor__: ClassVar[_Binary[Self]] = _forward("bitwise_xor", reflected=True)
    __lshift__: ClassVar[_Binary[Self]] = _forward("bitwise_left_shift")
    __rlshift__: ClassVar[_Binary[Self]] = _forward("bitwise_left_shift", reflected=True)
    __rshift__: ClassVar[_Binary[Self]] = _forward("bitwise_right_shift")
    __rrshift__: ClassVar[_Binary[Self]] = _forward("bitwise_right_shift", reflected=True)
    __neg__: ClassVar[_Unary[Self]] = _forward("negative")
    __pos__: ClassVar[_Unary[Self]] = _forward("positive")
    __abs__: ClassVar[_Unary[Self]] = _forward("abs")
    __invert__: ClassVar[_Unary[Self]] = _forward("bitwise_invert")
    # (``==`` and ``!=`` are elementwise, as NumPy's: an array, not `object`'s bool)
    __eq__: ClassVar[_Binary[Self]] = _forward("equal")  # type: ignore[assignment]
    __ne__: ClassVar[_Binary[Self]] = _forward("not_equal")  # type: ignore[assignment]
    __lt__: ClassVar[_Binary[Self]] = _forward("less")
    __le__: ClassVar[_Binary[Self]] = _forward("less_equal")
    __gt__: ClassVar[_Binary[Self]] = _forward("greater")
    __ge__: ClassVar[_Binary[Self]] = _forward("greater_equal")
    __getitem__: ClassVar[Callable[[Self, Any], Self | jax.Array]] = _forward("getitem")

    def __setitem__(self, key: Any, value: _Operand) -> None:
        """Write ``value`` into the selected elements, in place (eagerly only; see
        `gradpipe.ooc.ops._setitem`). Under `jax.jit` it is refused: use `ooc.where`."""
        namespace().set_item(self, key, value)
