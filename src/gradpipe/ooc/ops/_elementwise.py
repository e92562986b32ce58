"""Elementwise operations: unary functions and binary ones with broadcasting.

Operands of a binary operation are DiskArrays (broadcast against each other as in
NumPy) or scalars (Python numbers or 0-d JAX values, which are differentiable).
"""

from __future__ import annotations

import warnings

import numpy as np

from .._header import check_layout
from .._hijax import type_of
from .._op import BlockParallelOp, apply, frozen
from .._promotion import is_differentiable, to_primal_dtype

__all__ = ["Binary", "Cast", "Unary", "astype"]


def _inexact(x):
    """``x`` in the floating dtype NumPy computes ``exp(x)`` in (ints become floats)."""
    return x.astype(np.exp(np.empty(0, x.dtype)).dtype, copy=False)


# name: (forward, derivative given x, the output y and the exponent p). The
# forward is NumPy's function, so its result has NumPy's dtype (`sigmoid` computes
# in the dtype of `exp`, `relu` keeps the dtype, as in jax.nn).
_UNARY = {
    "negative": (np.negative, lambda x, y, p: -np.ones_like(x)),
    "exp": (np.exp, lambda x, y, p: y),
    "log": (np.log, lambda x, y, p: 1 / x),
    "sqrt": (np.sqrt, lambda x, y, p: 0.5 / y),
    "square": (np.square, lambda x, y, p: 2 * x),
    # conj: JAX's cotangent of |z| is conj(z)/|z| (the rest are holomorphic: no conj)
    "abs": (np.abs, lambda x, y, p: np.conj(np.sign(x))),
    "sin": (np.sin, lambda x, y, p: np.cos(x)),
    "cos": (np.cos, lambda x, y, p: -np.sin(x)),
    "tanh": (np.tanh, lambda x, y, p: 1 - y * y),
    "sigmoid": (lambda x: 1 / (1 + np.exp(-_inexact(x))), lambda x, y, p: y * (1 - y)),
    "relu": (
        lambda x: np.maximum(x, np.zeros((), x.dtype)),
        lambda x, y, p: (x > 0).astype(x.dtype),
    ),
    "power": (None, lambda x, y, p: _power_derivative(x, p)),
}


def _power_derivative(x, p):
    """``p * x ** (p - 1)``; zero for an int ``p = 0``, as JAX (no 0 * inf at x = 0)."""
    if isinstance(p, (int, np.integer)) and p == 0:
        return np.zeros_like(x)
    return p * np.power(x, p - 1)


def _numpy_dtype(name: str, fn, *dtypes) -> np.dtype:
    """The dtype NumPy gives ``fn`` on arrays of ``dtypes``; NumPy's refusal otherwise."""
    try:
        return fn(*[np.empty(0, d) for d in dtypes]).dtype
    except TypeError as error:  # e.g. negative/subtract of bools
        names = ", ".join(np.dtype(d).name for d in dtypes)
        raise TypeError(f"{name} is not defined for {names} arrays: {error}") from None


def _block_grad(grad, x):
    """``grad`` in ``x``'s dtype, or None when ``x`` is not differentiable (an int)."""
    return to_primal_dtype(grad, x.dtype) if is_differentiable(x.dtype) else None


@frozen
class Unary(BlockParallelOp):
    """``fn(x)`` elementwise, for ``fn`` in the table above (or ``power`` with ``p``)."""

    fn: str
    p: int | float | complex = 1.0
    # the exponent's type: a Python type name (a weak number, NEP 50) or a dtype
    # (a NumPy scalar). ``2`` and ``2.0`` give different dtypes but compare equal,
    # so without it equal ops would share one compilation.
    p_type: str = "float"

    @property
    def _p(self):
        if self.p_type in ("int", "float", "complex"):
            return self.p
        return np.dtype(self.p_type).type(self.p)

    @property
    def name(self) -> str:
        return self.fn

    def output_shape(self, s):
        return s

    def output_dtype(self, dx):
        return _numpy_dtype(self.fn, self._f, dx)

    def index_map(self, out_r, red_r, s):
        return (out_r,)

    def _f(self, x):
        if self.fn == "power":
            return np.power(x, self._p)
        return _UNARY[self.fn][0](x)

    def forward_block(self, x):
        return self._f(x)

    def backward_block(self, g, x):
        if not is_differentiable(x.dtype):
            return (None,)
        d = _UNARY[self.fn][1](x, self._f(x), self._p)
        return (_block_grad(g * d, x),)


@frozen
class Cast(BlockParallelOp):
    """``x.astype(dtype)`` (NumPy's unsafe casting); the gradient is cast back."""

    dtype: str

    @property
    def name(self) -> str:
        return "astype"

    def output_shape(self, s):
        return s

    def output_dtype(self, dx):
        return np.dtype(self.dtype)

    def index_map(self, out_r, red_r, s):
        return (out_r,)

    def forward_block(self, x):
        if np.iscomplexobj(x) and np.dtype(self.dtype).kind != "c":
            x = x.real  # what astype keeps; `astype` warned once at the call
        return x.astype(self.dtype)

    def backward_block(self, g, x):
        if not is_differentiable(self.dtype):  # through ints or bools: no gradient
            return (None,)
        return (_block_grad(g, x),)


_BINARY = {
    "add": (np.add, lambda a, b, g: g, lambda a, b, g: g),
    "subtract": (np.subtract, lambda a, b, g: g, lambda a, b, g: -g),
    "multiply": (np.multiply, lambda a, b, g: g * b, lambda a, b, g: g * a),
    "divide": (np.divide, lambda a, b, g: g / b, lambda a, b, g: -g * a / (b * b)),
    # ties split the gradient equally, as jax.numpy does
    "maximum": (
        np.maximum,
        lambda a, b, g: g * ((a > b) + 0.5 * (a == b)),
        lambda a, b, g: g * ((b > a) + 0.5 * (a == b)),
    ),
    "minimum": (
        np.minimum,
        lambda a, b, g: g * ((a < b) + 0.5 * (a == b)),
        lambda a, b, g: g * ((b < a) + 0.5 * (a == b)),
    ),
}


# comparisons: bool results, no gradient (as in JAX)
_COMPARISONS = ("equal", "not_equal", "less", "less_equal", "greater", "greater_equal")
_BINARY.update({name: (getattr(np, name), None, None) for name in _COMPARISONS})


def _broadcast_region(out_r, shape):
    if not shape:
        return None
    lead = len(out_r) - len(shape)
    return tuple(slice(0, 1) if n == 1 else r for n, r in zip(shape, out_r[lead:]))


def _unbroadcast(grad, block_shape):
    """Sum ``grad`` down to ``block_shape`` (leading axes and size-1 axes)."""
    if not block_shape:
        return grad
    grad = (
        grad.sum(axis=tuple(range(grad.ndim - len(block_shape))))
        if grad.ndim > len(block_shape)
        else grad
    )
    axes = tuple(a for a, n in enumerate(block_shape) if n == 1 and grad.shape[a] != 1)
    return grad.sum(axis=axes, keepdims=True) if axes else grad


@frozen
class Binary(BlockParallelOp):
    """``fn(a, b)`` elementwise with NumPy broadcasting."""

    fn: str

    @property
    def name(self) -> str:
        return self.fn

    def output_shape(self, sa, sb):
        try:
            return tuple(np.broadcast_shapes(sa, sb))
        except ValueError:
            raise ValueError(
                f"{self.fn}: shapes {sa} and {sb} do not broadcast together."
            ) from None

    def output_dtype(self, da, db):
        return _numpy_dtype(self.fn, _BINARY[self.fn][0], da, db)

    def index_map(self, out_r, red_r, sa, sb):
        return (_broadcast_region(out_r, sa), _broadcast_region(out_r, sb))

    def forward_block(self, a, b):
        return _BINARY[self.fn][0](a, b)

    def backward_block(self, g, a, b):
        _, da, db = _BINARY[self.fn]
        grads = []
        for x, d in ((a, da), (b, db)):
            if d is None or not is_differentiable(x.dtype):
                grads.append(None)
                continue
            grads.append(to_primal_dtype(_unbroadcast(d(a, b, g), np.shape(x)), x.dtype))
        return tuple(grads)


def _unary(fn):
    def op(x, *, budget=None):
        return apply(Unary(fn), x, budget=budget)

    op.__name__ = op.__qualname__ = fn
    op.__doc__ = f"Elementwise ``{fn}`` of a DiskArray, out of core; differentiable."
    return op


def _binary(fn):
    def op(a, b, *, budget=None):
        return apply(Binary(fn), a, b, budget=budget)

    op.__name__ = op.__qualname__ = fn
    op.__doc__ = (
        f"Elementwise ``{fn}`` of two operands (DiskArrays broadcast as in NumPy, or "
        "scalars), out of core; differentiable in both."
    )
    return op


negative, exp, log, sqrt, square, abs, sin, cos, tanh, sigmoid, relu = (
    _unary(f) for f in list(_UNARY)[:-1]
)
add, subtract, multiply, divide, maximum, minimum = (_binary(f) for f in list(_BINARY)[:6])
equal, not_equal, less, less_equal, greater, greater_equal = (_binary(f) for f in _COMPARISONS)


def power(x, p, *, budget=None):
    """``x ** p`` elementwise for a DiskArray ``x`` and a constant number ``p``.

    ``p`` promotes as in NumPy 2 (NEP 50): a Python number is weak (``int8 ** 2``
    is int8, ``int8 ** 2.5`` float64, ``float32 ** 2.5`` float32), a NumPy scalar
    is not (``float16 ** np.float32(2)`` is float32).
    """
    p_type = np.dtype(type(p)).str if isinstance(p, np.generic) else type(p).__name__
    if isinstance(p, np.generic):
        p = p.item()
    if not isinstance(p, (int, float, complex)) or isinstance(p, bool):
        raise TypeError(f"power(x, p): p must be a number, got {type(p).__name__}.")
    t = type_of(x)
    if t is not None and t.dtype.kind in "biu" and isinstance(p, int) and p < 0:
        raise ValueError(
            f"power: integers to negative integer powers are not allowed (a {t.dtype.name} "
            f"array to the power {p}), as in NumPy; use a float power such as {float(p)}."
        )
    return apply(Unary("power", p, p_type), x, budget=budget)


def astype(x, dtype, *, budget=None):
    """``x`` converted to ``dtype``, out of core, as NumPy's ``x.astype(dtype)``.

    Differentiable: the gradient is converted back to ``x``'s dtype (its real part
    for a real ``x``, as in JAX); a conversion to an integer or bool dtype passes no
    gradient.
    """
    dtype, t = np.dtype(dtype).newbyteorder("="), type_of(x)  # stored native, as JAX
    check_layout((), dtype, "astype")
    if t is not None and t.dtype.kind == "c" and dtype.kind != "c":
        warnings.warn(
            f"astype: casting {t.dtype.name} values to {dtype.name} discards the imaginary "
            "part (as NumPy's astype does).",
            np.exceptions.ComplexWarning,
            stacklevel=2,
        )
    return apply(Cast(dtype.str), x, budget=budget)
