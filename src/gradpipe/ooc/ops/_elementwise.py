"""Elementwise operations: unary functions and binary ones with broadcasting.

Operands of a binary operation are DiskArrays (broadcast against each other as in
NumPy) or scalars (Python numbers or 0-d JAX values, which are differentiable).
"""

from __future__ import annotations

import numpy as np

from .._op import BlockParallelOp, apply, frozen

__all__ = ["Binary", "Unary"]


# name: (forward, derivative given x and the output y)
_UNARY = {
    "negative": (np.negative, lambda x, y, p: -np.ones_like(x)),
    "exp": (np.exp, lambda x, y, p: y),
    "log": (np.log, lambda x, y, p: 1 / x),
    "sqrt": (np.sqrt, lambda x, y, p: 0.5 / y),
    "square": (np.square, lambda x, y, p: 2 * x),
    "abs": (np.abs, lambda x, y, p: np.sign(x)),
    "sin": (np.sin, lambda x, y, p: np.cos(x)),
    "cos": (np.cos, lambda x, y, p: -np.sin(x)),
    "tanh": (np.tanh, lambda x, y, p: 1 - y * y),
    "sigmoid": (lambda x: 1 / (1 + np.exp(-x)), lambda x, y, p: y * (1 - y)),
    "relu": (lambda x: np.maximum(x, 0), lambda x, y, p: (x > 0).astype(x.dtype)),
}


@frozen
class Unary(BlockParallelOp):
    """``fn(x)`` elementwise, for ``fn`` in the table above (or ``power`` with ``p``)."""

    fn: str
    p: float = 1.0

    @property
    def name(self) -> str:
        return self.fn

    def output_shape(self, s):
        return s

    def index_map(self, out_r, red_r, s):
        return (out_r,)

    def _f(self, x):
        if self.fn == "power":
            return np.power(x, x.dtype.type(self.p))
        return _UNARY[self.fn][0](x)

    def forward_block(self, x):
        return np.asarray(self._f(x), x.dtype)

    def backward_block(self, g, x):
        if self.fn == "power":
            d = x.dtype.type(self.p) * np.power(x, x.dtype.type(self.p - 1))
        else:
            d = _UNARY[self.fn][1](x, self._f(x), self.p)
        return (np.asarray(g * d, x.dtype),)


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

    def index_map(self, out_r, red_r, sa, sb):
        return (_broadcast_region(out_r, sa), _broadcast_region(out_r, sb))

    def forward_block(self, a, b):
        return _BINARY[self.fn][0](a, b)

    def backward_block(self, g, a, b):
        _, da, db = _BINARY[self.fn]
        dtype = np.result_type(a, b)
        ga = np.asarray(da(a, b, g), dtype)
        gb = np.asarray(db(a, b, g), dtype)
        return (_unbroadcast(ga, np.shape(a)), _unbroadcast(gb, np.shape(b)))


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


negative, exp, log, sqrt, square, abs, sin, cos, tanh, sigmoid, relu = (_unary(f) for f in _UNARY)
add, subtract, multiply, divide, maximum, minimum = (_binary(f) for f in _BINARY)


def power(x, p, *, budget=None):
    """``x ** p`` elementwise for a DiskArray ``x`` and a constant number ``p``."""
    if not isinstance(p, (int, float)):
        raise TypeError(f"power(x, p): p must be a Python number, got {type(p).__name__}.")
    return apply(Unary("power", float(p)), x, budget=budget)
