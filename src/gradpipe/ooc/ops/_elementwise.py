"""Every elementwise function of the array API standard (and a few of JAX's), out of core.

Each function is its block kernel, written once against an array namespace ``xp``
(`Blockwise`): NumPy computes it forward, JAX's VJP of the same kernel is its
backward pass. Operands are DiskArrays, broadcast against each other as in NumPy,
or scalars (Python numbers, promoted as NumPy 2 does, or 0-d JAX values, which are
differentiable); with no `DiskArray` among them the function runs in memory on
``jax.numpy``.

Adding a function is one line in a table below; see the guide's "Adding an
operation".
"""

from __future__ import annotations

import builtins
import warnings
from collections.abc import Callable
from typing import Any, Literal, Protocol, cast, overload

import numpy as np
from numpy.typing import DTypeLike

from ..arrays._array import ArrayLike, Result
from ..arrays._hijax import type_of
from ..kernels._kernel import Kernel
from ..storage._header import check_layout
from ._arg_types import BudgetLike, DeviceLike
from ._blockwise import blockwise

__all__ = ["astype", "clip", "power", "relu", "sigmoid", "where"]


class Unary(Protocol):
    """A generated unary function, ``fn(x, /, *, budget=None)``, with its ``kernel``."""

    kernel: Kernel

    def __call__(self, x: ArrayLike, /, *, budget: BudgetLike = None) -> Result: ...


class Binary(Protocol):
    """A generated binary function, ``fn(x1, x2, /, *, budget=None)``, with its ``kernel``."""

    kernel: Kernel

    def __call__(self, x1: ArrayLike, x2: ArrayLike, /, *, budget: BudgetLike = None) -> Result: ...


def _standard(name: str, doc: str | None = None) -> Kernel:
    """The kernel ``xp.<name>(*xs)`` (every namespace spells these alike)."""

    def kernel(xp: Any, *xs: Any) -> Any:
        return getattr(xp, name)(*xs)

    kernel.__name__ = kernel.__qualname__ = f"{name}_kernel"
    return kernel


def _keeps_integers(name: str) -> Kernel:
    """``xp.<name>(x)``, but an integer or bool ``x`` is returned as it is (rounding
    functions are the identity there, and keep the dtype, as the standard asks)."""

    def kernel(xp: Any, x: Any) -> Any:
        if np.dtype(x.dtype).kind in "biu":
            return x
        return getattr(xp, name)(x)

    kernel.__name__ = kernel.__qualname__ = f"{name}_kernel"
    return kernel


_DOC_UNARY = (
    "Elementwise ``{name}(x)`` of a DiskArray, out of core, as the array API standard "
    "defines it (NumPy's dtypes and values); differentiable where it is defined for "
    "floating-point inputs.\n\n**Returns:** a `DiskArray` (or a 0-d JAX array for 0-d "
    "in-memory input)."
)
_DOC_BINARY = (
    "Elementwise ``{name}(x1, x2)``, out of core: operands are DiskArrays broadcast "
    "as in NumPy, or scalars (Python numbers promote as in NumPy 2). Differentiable "
    "in both operands where defined for floating-point inputs."
)


@overload
def _public(kernel: Kernel, name: str, arity: Literal[1], doc: str) -> Unary: ...
@overload
def _public(kernel: Kernel, name: str, arity: Literal[2], doc: str) -> Binary: ...
def _public(kernel: Kernel, name: str, arity: int, doc: str) -> Unary | Binary:
    """The public function ``name`` of ``arity`` operands, computed by ``kernel``."""
    fn: Callable[..., Result]
    if arity == 1:

        def unary(x: ArrayLike, /, *, budget: BudgetLike = None) -> Result:
            return blockwise(kernel, name, x, budget=budget)

        fn = unary
    else:

        def binary(x1: ArrayLike, x2: ArrayLike, /, *, budget: BudgetLike = None) -> Result:
            return blockwise(kernel, name, x1, x2, budget=budget)

        fn = binary
    fn.__name__ = fn.__qualname__ = name
    fn.__module__ = __name__
    fn.__doc__ = doc.format(name=name)
    public = cast("Unary | Binary", fn)
    public.kernel = kernel
    return public


def _floor_divide(xp: Any, x1: Any, x2: Any) -> Any:
    """NumPy's floor division, with the standard's special cases where NumPy's differ:
    an infinite dividend by a finite divisor is infinite (NumPy: NaN), a finite one
    by an infinite divisor is a signed zero (NumPy: -1 or 0)."""
    q = xp.floor_divide(x1, x2)
    if np.dtype(q.dtype).kind != "f":
        return q
    ratio = x1 / x2
    special = (xp.isinf(x1) & xp.isfinite(x2)) | (xp.isfinite(x1) & xp.isinf(x2))
    return xp.where(special, xp.astype(ratio, q.dtype), q)


#: The functions made from the table below, by kind (the dtype tests read them).
UNARY: list[str] = []
ROUNDING: list[str] = []
BINARY: list[str] = []


def _unary(name: str, kind: list[str], kernel: Kernel | None = None) -> Unary:
    kind.append(name)
    return _public(_standard(name) if kernel is None else kernel, name, 1, _DOC_UNARY)


def _binary(name: str, kind: list[str], kernel: Kernel | None = None) -> Binary:
    kind.append(name)
    return _public(_standard(name) if kernel is None else kernel, name, 2, _DOC_BINARY)


# The table: one line per function. Unary, as every namespace spells them:
abs = _unary("abs", UNARY)
acos = _unary("acos", UNARY)
acosh = _unary("acosh", UNARY)
asin = _unary("asin", UNARY)
asinh = _unary("asinh", UNARY)
atan = _unary("atan", UNARY)
atanh = _unary("atanh", UNARY)
bitwise_invert = _unary("bitwise_invert", UNARY)
conj = _unary("conj", UNARY)
cos = _unary("cos", UNARY)
cosh = _unary("cosh", UNARY)
exp = _unary("exp", UNARY)
expm1 = _unary("expm1", UNARY)
imag = _unary("imag", UNARY)
isfinite = _unary("isfinite", UNARY)
isinf = _unary("isinf", UNARY)
isnan = _unary("isnan", UNARY)
log = _unary("log", UNARY)
log1p = _unary("log1p", UNARY)
log2 = _unary("log2", UNARY)
log10 = _unary("log10", UNARY)
logical_not = _unary("logical_not", UNARY)
negative = _unary("negative", UNARY)
positive = _unary("positive", UNARY)
real = _unary("real", UNARY)
reciprocal = _unary("reciprocal", UNARY)
sign = _unary("sign", UNARY)
signbit = _unary("signbit", UNARY)
sin = _unary("sin", UNARY)
sinh = _unary("sinh", UNARY)
square = _unary("square", UNARY)
sqrt = _unary("sqrt", UNARY)
tan = _unary("tan", UNARY)
tanh = _unary("tanh", UNARY)
# rounding, the identity on integers (and their dtype kept):
ceil = _unary("ceil", ROUNDING, _keeps_integers("ceil"))
floor = _unary("floor", ROUNDING, _keeps_integers("floor"))
round = _unary("round", ROUNDING, _keeps_integers("round"))
trunc = _unary("trunc", ROUNDING, _keeps_integers("trunc"))
# binary, broadcast as in NumPy:
add = _binary("add", BINARY)
atan2 = _binary("atan2", BINARY)
bitwise_and = _binary("bitwise_and", BINARY)
bitwise_left_shift = _binary("bitwise_left_shift", BINARY)
bitwise_or = _binary("bitwise_or", BINARY)
bitwise_right_shift = _binary("bitwise_right_shift", BINARY)
bitwise_xor = _binary("bitwise_xor", BINARY)
copysign = _binary("copysign", BINARY)
divide = _binary("divide", BINARY)
equal = _binary("equal", BINARY)
greater = _binary("greater", BINARY)
greater_equal = _binary("greater_equal", BINARY)
hypot = _binary("hypot", BINARY)
less = _binary("less", BINARY)
less_equal = _binary("less_equal", BINARY)
logaddexp = _binary("logaddexp", BINARY)
logical_and = _binary("logical_and", BINARY)
logical_or = _binary("logical_or", BINARY)
logical_xor = _binary("logical_xor", BINARY)
maximum = _binary("maximum", BINARY)
minimum = _binary("minimum", BINARY)
multiply = _binary("multiply", BINARY)
nextafter = _binary("nextafter", BINARY)
not_equal = _binary("not_equal", BINARY)
pow = _binary("pow", BINARY)
remainder = _binary("remainder", BINARY)
subtract = _binary("subtract", BINARY)
floor_divide = _public(_floor_divide, "floor_divide", 2, _DOC_BINARY)
__all__ += [*UNARY, *ROUNDING, *BINARY, "floor_divide"]

# NumPy's longer spellings, kept for existing code
power_kernel = _standard("pow")


# ------------------------------------------------------------- beyond the table


def _sigmoid(xp: Any, x: Any) -> Any:
    if np.dtype(x.dtype).kind in "biu":  # in the floating dtype NumPy's exp gives them
        x = xp.astype(x, np.exp(np.empty(0, x.dtype)).dtype)
    return 1 / (1 + xp.exp(-x))


def sigmoid(x: ArrayLike, /, *, budget: BudgetLike = None) -> Result:
    """The logistic function ``1 / (1 + exp(-x))`` elementwise, out of core (integers
    give the floating dtype NumPy's ``exp`` gives them); differentiable."""
    return blockwise(_sigmoid, "sigmoid", x, budget=budget)


def _relu(xp: Any, x: Any) -> Any:
    if np.dtype(x.dtype).kind in "biu":
        return xp.maximum(x, xp.zeros_like(x))
    # a NaN stays NaN (as in np.maximum); the gradient at 0 is 0
    return xp.where(x > 0, x, xp.where(xp.isnan(x), x, xp.zeros_like(x)))


def relu(x: ArrayLike, /, *, budget: BudgetLike = None) -> Result:
    """``max(x, 0)`` elementwise, out of core, in ``x``'s dtype; its gradient at 0 is 0,
    as `jax.nn.relu`'s."""
    return blockwise(_relu, "relu", x, budget=budget)


def _power_static(xp: Any, x: Any, *, p: int) -> Any:
    return xp.pow(x, p)


def power(x1: ArrayLike, x2: ArrayLike, /, *, budget: BudgetLike = None) -> Result:
    """``x1 ** x2`` elementwise (`pow`): both operands may be DiskArrays or scalars.

    A Python number exponent promotes as in NumPy 2 (NEP 50: ``int8 ** 2`` is int8,
    ``int8 ** 2.5`` float64, ``float32 ** 2.5`` float32), and an integer one keeps
    JAX's derivative (``x ** 0`` has gradient 0 at ``x = 0``); a NumPy scalar is not
    weak (``float16 ** np.float32(2)`` is float32).
    """
    t = type_of(x1)
    if isinstance(x2, (int, float, complex)) and not isinstance(x2, bool):
        if t is not None and t.dtype.kind in "biu" and isinstance(x2, int) and x2 < 0:
            raise ValueError(
                f"power: integers to negative integer powers are not allowed (a "
                f"{t.dtype.name} array to the power {x2}), as in NumPy; use a float power "
                f"such as {float(x2)}."
            )
        if t is not None and isinstance(x2, int):  # JAX's integer_pow
            return blockwise(_power_static, "pow", x1, budget=budget, p=x2)
    return blockwise(power_kernel, "pow", x1, x2, budget=budget)


def _where(xp: Any, condition: Any, x1: Any, x2: Any) -> Any:
    return xp.where(condition, x1, x2)


def _dtype_of(x: ArrayLike) -> np.dtype:
    """The dtype of a DiskArray, a JAX value (traced too: no conversion) or a number."""
    t = type_of(x)
    if t is not None:
        return t.dtype
    dtype = getattr(x, "dtype", None)
    return np.dtype(dtype) if dtype is not None else np.asarray(x).dtype


def where(
    condition: ArrayLike, x1: ArrayLike, x2: ArrayLike, /, *, budget: BudgetLike = None
) -> Result:
    """``x1`` where ``condition`` is true, else ``x2``, elementwise with broadcasting,
    out of core; differentiable in ``x1`` and ``x2``."""
    dtype = _dtype_of(condition)
    if dtype != np.bool_:
        raise TypeError(f"where: the condition must be a bool array, got {dtype.name}.")
    return blockwise(_where, "where", condition, x1, x2, budget=budget)


def _clip(xp: Any, x: Any, *bounds: Any, has_min: bool, has_max: bool) -> Any:
    """``minimum(maximum(x, min), max)``, as ``jax.numpy``'s `clip`: the bounds promote
    with ``x`` (an int array clipped by a float bound is a float one), a NaN bound
    gives NaN (as NumPy and the standard), and a tie shares the gradient equally."""
    it = iter(bounds)
    if has_min:
        x = xp.maximum(x, next(it))
    if has_max:
        x = xp.minimum(x, next(it))
    return x


def clip(
    x: ArrayLike,
    /,
    min: ArrayLike | None = None,
    max: ArrayLike | None = None,
    *,
    budget: BudgetLike = None,
) -> Result:
    """``x`` with values below ``min`` raised to it and above ``max`` lowered to it,
    elementwise, out of core (the standard's `clip`, NumPy's values and dtype).

    **Arguments:**

    - `x`: a `DiskArray` (or an in-memory value).
    - `min`, `max`: ``None``, scalars (Python numbers, NumPy or JAX values, traced
      ones too) or arrays that broadcast with ``x``.

    **Returns:** the clipped array, in the dtype NumPy's ``np.clip`` gives: ``x``'s
    for bounds of its kind, else the promoted one, as every binary function promotes
    (``clip(int_array, 0.5, None)`` is float64, a float32 JAX bound with int32 data
    too). A Python int bound outside an int ``x``'s range is clamped to it, as in
    NumPy. Differentiable in all three where they are floating; a tie shares the
    gradient, as ``jax.numpy.clip``'s.
    """
    dtype = _dtype_of(x)
    bounds: list[ArrayLike] = []
    for bound in (min, max):
        if bound is None:
            continue
        if isinstance(bound, int) and not isinstance(bound, bool) and dtype.kind in "iu":
            info = np.iinfo(dtype)  # NumPy clips by the nearest value of x's dtype
            clamped = builtins.min(builtins.max(bound, int(info.min)), int(info.max))
            bound = np.asarray(clamped, dtype)
        bounds.append(bound)
    return blockwise(
        _clip, "clip", x, *bounds, budget=budget, has_min=min is not None, has_max=max is not None
    )


def _astype(xp: Any, x: Any, *, dtype: str) -> Any:
    if getattr(x.dtype, "kind", "") == "c" and np.dtype(dtype).kind != "c":
        x = xp.real(x)  # what astype keeps; `astype` warned once at the call
    return xp.astype(x, np.dtype(dtype))


def astype(
    x: ArrayLike,
    dtype: DTypeLike,
    /,
    *,
    copy: bool = True,
    device: DeviceLike = None,
    budget: BudgetLike = None,
) -> Result:
    """``x`` converted to ``dtype``, out of core, as NumPy's ``x.astype(dtype)``.

    Differentiable: the gradient is converted back to ``x``'s dtype (its real part
    for a real ``x``, as in JAX); a conversion to an integer or bool dtype passes no
    gradient. With ``copy=False`` an array already of ``dtype`` is returned as it is.
    """
    dtype, t = np.dtype(dtype).newbyteorder("="), type_of(x)  # stored native, as JAX
    check_layout((), dtype, "astype")
    if not copy and t is not None and t.dtype == dtype:
        return cast("Result", x)  # a DiskArray, or its tracer: it has a type
    if t is not None and t.dtype.kind == "c" and dtype.kind != "c":
        warnings.warn(
            f"astype: casting {t.dtype.name} values to {dtype.name} discards the imaginary "
            "part (as NumPy's astype does).",
            np.exceptions.ComplexWarning,
            stacklevel=2,
        )
    return blockwise(_astype, "astype", x, budget=budget, dtype=dtype.str)
