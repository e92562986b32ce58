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

import numpy as np

from ..arrays._hijax import type_of
from ..storage._header import check_layout
from ._blockwise import blockwise

__all__ = ["astype", "clip", "power", "relu", "sigmoid", "where"]


def _standard(name: str, doc: str | None = None):
    """The kernel ``xp.<name>(*xs)`` (every namespace spells these alike)."""

    def kernel(xp, *xs):
        return getattr(xp, name)(*xs)

    kernel.__name__ = kernel.__qualname__ = f"{name}_kernel"
    return kernel


def _keeps_integers(name: str):
    """``xp.<name>(x)``, but an integer or bool ``x`` is returned as it is (rounding
    functions are the identity there, and keep the dtype, as the standard asks)."""

    def kernel(xp, x):
        if np.dtype(x.dtype).kind in "biu":
            return x
        return getattr(xp, name)(x)

    kernel.__name__ = kernel.__qualname__ = f"{name}_kernel"
    return kernel


UNARY = [
    "abs",
    "acos",
    "acosh",
    "asin",
    "asinh",
    "atan",
    "atanh",
    "bitwise_invert",
    "conj",
    "cos",
    "cosh",
    "exp",
    "expm1",
    "imag",
    "isfinite",
    "isinf",
    "isnan",
    "log",
    "log1p",
    "log2",
    "log10",
    "logical_not",
    "negative",
    "positive",
    "real",
    "reciprocal",
    "sign",
    "signbit",
    "sin",
    "sinh",
    "square",
    "sqrt",
    "tan",
    "tanh",
]
ROUNDING = ("ceil", "floor", "round", "trunc")
BINARY = [
    "add",
    "atan2",
    "bitwise_and",
    "bitwise_left_shift",
    "bitwise_or",
    "bitwise_right_shift",
    "bitwise_xor",
    "copysign",
    "divide",
    "equal",
    "greater",
    "greater_equal",
    "hypot",
    "less",
    "less_equal",
    "logaddexp",
    "logical_and",
    "logical_or",
    "logical_xor",
    "maximum",
    "minimum",
    "multiply",
    "nextafter",
    "not_equal",
    "pow",
    "remainder",
    "subtract",
]

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


def _public(kernel, name: str, arity: int, doc: str):
    if arity == 1:

        def fn(x, /, *, budget=None):
            return blockwise(kernel, name, x, budget=budget)

    else:

        def fn(x1, x2, /, *, budget=None):
            return blockwise(kernel, name, x1, x2, budget=budget)

    fn.__name__ = fn.__qualname__ = name
    fn.__module__ = __name__
    fn.__doc__ = doc.format(name=name)
    fn.kernel = kernel
    return fn


def _floor_divide(xp, x1, x2):
    """NumPy's floor division, with the standard's special cases where NumPy's differ:
    an infinite dividend by a finite divisor is infinite (NumPy: NaN), a finite one
    by an infinite divisor is a signed zero (NumPy: -1 or 0)."""
    q = xp.floor_divide(x1, x2)
    if np.dtype(q.dtype).kind != "f":
        return q
    ratio = x1 / x2
    special = (xp.isinf(x1) & xp.isfinite(x2)) | (xp.isfinite(x1) & xp.isinf(x2))
    return xp.where(special, xp.astype(ratio, q.dtype), q)


def _make_all() -> dict:
    made = {}
    for name in UNARY:
        made[name] = _public(_standard(name), name, 1, _DOC_UNARY)
    for name in ROUNDING:
        made[name] = _public(_keeps_integers(name), name, 1, _DOC_UNARY)
    for name in BINARY:
        made[name] = _public(_standard(name), name, 2, _DOC_BINARY)
    return made


globals().update(_make_all())
floor_divide = _public(_floor_divide, "floor_divide", 2, _DOC_BINARY)
__all__ += [*UNARY, *ROUNDING, *BINARY, "floor_divide"]

# NumPy's longer spellings, kept for existing code
power_kernel = _standard("pow")


# ------------------------------------------------------------- beyond the table


def _sigmoid(xp, x):
    if np.dtype(x.dtype).kind in "biu":  # in the floating dtype NumPy's exp gives them
        x = xp.astype(x, np.exp(np.empty(0, x.dtype)).dtype)
    return 1 / (1 + xp.exp(-x))


def sigmoid(x, /, *, budget=None):
    """The logistic function ``1 / (1 + exp(-x))`` elementwise, out of core (integers
    give the floating dtype NumPy's ``exp`` gives them); differentiable."""
    return blockwise(_sigmoid, "sigmoid", x, budget=budget)


def _relu(xp, x):
    if np.dtype(x.dtype).kind in "biu":
        return xp.maximum(x, xp.zeros_like(x))
    # a NaN stays NaN (as in np.maximum); the gradient at 0 is 0
    return xp.where(x > 0, x, xp.where(xp.isnan(x), x, xp.zeros_like(x)))


def relu(x, /, *, budget=None):
    """``max(x, 0)`` elementwise, out of core, in ``x``'s dtype; its gradient at 0 is 0,
    as `jax.nn.relu`'s."""
    return blockwise(_relu, "relu", x, budget=budget)


def _power_static(xp, x, *, p):
    return xp.pow(x, p)


def power(x1, x2, /, *, budget=None):
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


def _where(xp, condition, x1, x2):
    return xp.where(condition, x1, x2)


def _dtype_of(x) -> np.dtype:
    """The dtype of a DiskArray, a JAX value (traced too: no conversion) or a number."""
    t = type_of(x)
    if t is not None:
        return t.dtype
    dtype = getattr(x, "dtype", None)
    return np.dtype(dtype) if dtype is not None else np.asarray(x).dtype


def where(condition, x1, x2, /, *, budget=None):
    """``x1`` where ``condition`` is true, else ``x2``, elementwise with broadcasting,
    out of core; differentiable in ``x1`` and ``x2``."""
    dtype = _dtype_of(condition)
    if dtype != np.bool_:
        raise TypeError(f"where: the condition must be a bool array, got {dtype.name}.")
    return blockwise(_where, "where", condition, x1, x2, budget=budget)


def _clip(xp, x, *bounds, has_min, has_max):
    it = iter(bounds)
    lo = next(it) if has_min else None
    hi = next(it) if has_max else None
    out = x
    if lo is not None:
        out = xp.where(out < lo, xp.astype(lo, x.dtype), out)
    if hi is not None:
        out = xp.where(out > hi, xp.astype(hi, x.dtype), out)
    return out


def clip(x, /, min=None, max=None, *, budget=None):
    """``x`` with values below ``min`` raised to it and above ``max`` lowered to it,
    elementwise, out of core, in ``x``'s dtype (the standard's `clip`); ``min`` and
    ``max`` are scalars or arrays that broadcast with ``x``. Differentiable in all
    three where they are floating."""
    dtype = _dtype_of(x)
    bounds = []
    for bound in (min, max):
        if bound is None:
            continue
        if isinstance(bound, (int, float)) and not isinstance(bound, bool):
            if dtype.kind in "iu" and isinstance(bound, float):
                raise TypeError(f"clip: a float bound {bound} for a {dtype.name} array.")
            if dtype.kind in "iu":
                info = np.iinfo(dtype)
                bound = builtins.min(builtins.max(bound, int(info.min)), int(info.max))
            bound = np.asarray(bound, dtype)
        bounds.append(bound)
    return blockwise(
        _clip, "clip", x, *bounds, budget=budget, has_min=min is not None, has_max=max is not None
    )


def _astype(xp, x, *, dtype):
    if getattr(x.dtype, "kind", "") == "c" and np.dtype(dtype).kind != "c":
        x = xp.real(x)  # what astype keeps; `astype` warned once at the call
    return xp.astype(x, np.dtype(dtype))


def astype(x, dtype, /, *, copy: bool = True, device=None, budget=None):
    """``x`` converted to ``dtype``, out of core, as NumPy's ``x.astype(dtype)``.

    Differentiable: the gradient is converted back to ``x``'s dtype (its real part
    for a real ``x``, as in JAX); a conversion to an integer or bool dtype passes no
    gradient. With ``copy=False`` an array already of ``dtype`` is returned as it is.
    """
    dtype, t = np.dtype(dtype).newbyteorder("="), type_of(x)  # stored native, as JAX
    check_layout((), dtype, "astype")
    if not copy and t is not None and t.dtype == dtype:
        return x
    if t is not None and t.dtype.kind == "c" and dtype.kind != "c":
        warnings.warn(
            f"astype: casting {t.dtype.name} values to {dtype.name} discards the imaginary "
            "part (as NumPy's astype does).",
            np.exceptions.ComplexWarning,
            stacklevel=2,
        )
    return blockwise(_astype, "astype", x, budget=budget, dtype=dtype.str)
