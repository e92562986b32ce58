"""Host rules for JAX's elementwise primitives: arithmetic, the functions of one
and two values, comparisons and bit logic, and conversions between dtypes.

A rule takes the primitive's operands as NumPy arrays and its parameters as keywords
and returns its result; `_numpy_eval` looks rules up by primitive name in `RULES`
and casts every result to the dtype the jaxpr says. Floating-point warnings are off
inside the rules (``log(0)`` is ``-inf`` as in JAX, not a warning).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from numpy.typing import DTypeLike
from scipy import special

__all__ = ["RULES", "Rule"]

#: A host rule: operands positionally, the primitive's parameters as keywords.
Rule = Callable[..., Any]


def _unary(fn: Callable[[np.ndarray], Any]) -> Rule:
    def rule(x: np.ndarray, **_: Any) -> np.ndarray:
        with np.errstate(all="ignore"):
            return fn(x)

    return rule


def _binary(fn: Callable[[np.ndarray, np.ndarray], Any]) -> Rule:
    def rule(x: np.ndarray, y: np.ndarray, **_: Any) -> np.ndarray:
        with np.errstate(all="ignore"):
            return fn(x, y)

    return rule


def _int_div(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """C division (truncating toward zero), as XLA's integer ``div``."""
    if x.dtype.kind in "iu":
        with np.errstate(divide="ignore", invalid="ignore"):
            q = np.where(y == 0, 0, np.abs(x) // np.where(y == 0, 1, np.abs(y)))
        return np.where((x < 0) != (y < 0), -q, q) if x.dtype.kind == "i" else q
    return np.divide(x, y)


def _round(x: np.ndarray, rounding_method: int = 0, **_: Any) -> np.ndarray:
    if int(rounding_method) == 1:  # to nearest even
        return np.round(x)
    return np.sign(x) * np.floor(np.abs(x) + 0.5)  # away from zero


def _integer_pow(x: np.ndarray, y: int, **_: Any) -> np.ndarray:
    if y < 0:
        return np.reciprocal(np.power(x, -y))
    return np.power(x, y)


def _convert(x: np.ndarray, new_dtype: Any, **_: Any) -> np.ndarray:
    dtype = np.dtype(new_dtype) if str(new_dtype) != "float0" else np.dtype(bool)
    if np.iscomplexobj(x) and dtype.kind != "c":
        x = x.real
    return x.astype(dtype)


def _select_n(which: np.ndarray, *cases: np.ndarray) -> np.ndarray:
    if which.dtype == np.bool_:
        return np.where(which, cases[1], cases[0]) if len(cases) == 2 else cases[0]
    return np.choose(which.astype(np.intp), np.broadcast_arrays(*cases))


def _clamp(lo: np.ndarray, x: np.ndarray, hi: np.ndarray) -> np.ndarray:
    return np.minimum(np.maximum(x, lo), hi)


def _shift_right_logical(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    unsigned = x.dtype.str.replace("i", "u")
    return np.right_shift(x.view(unsigned), y.astype(unsigned)).view(x.dtype)


def _nextafter(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    return np.nextafter(x, y)


def _reduce_precision(
    x: np.ndarray, exponent_bits: int, mantissa_bits: int, **_: Any
) -> np.ndarray:
    return x  # a no-op at the precision the value is held in


def _erf_inv(x: np.ndarray) -> np.ndarray:
    return special.erfinv(x)


def _logistic(x: np.ndarray, **_: Any) -> np.ndarray:
    with np.errstate(over="ignore"):
        return 1 / (1 + np.exp(-x))


def _sign(x: np.ndarray) -> np.ndarray:
    if np.iscomplexobj(x):
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(x == 0, 0, x / np.abs(x))
    return np.sign(x)


def _rsqrt(x: np.ndarray, **_: Any) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return 1 / np.sqrt(x)


def _bitcast(x: np.ndarray, *, new_dtype: DTypeLike, **_: Any) -> np.ndarray:
    new_dtype = np.dtype(new_dtype)
    if new_dtype.itemsize != x.dtype.itemsize:
        raise NotImplementedError(
            f"bitcast_convert_type from {x.dtype} to {new_dtype} changes the item size."
        )
    return np.ascontiguousarray(x).view(new_dtype)


RULES: dict[str, Rule] = {
    # arithmetic
    "add": _binary(np.add),
    "add_any": _binary(np.add),
    "sub": _binary(np.subtract),
    "mul": _binary(np.multiply),
    "div": _binary(_int_div),
    "rem": _binary(np.fmod),
    "neg": _unary(np.negative),
    "sign": _unary(_sign),
    "floor": _unary(np.floor),
    "ceil": _unary(np.ceil),
    "round": _round,
    "is_finite": _unary(np.isfinite),
    "max": _binary(np.maximum),
    "min": _binary(np.minimum),
    "abs": _unary(np.abs),
    "pow": _binary(np.power),
    "integer_pow": _integer_pow,
    "square": _unary(np.square),
    "sqrt": _unary(np.sqrt),
    "rsqrt": _rsqrt,
    "cbrt": _unary(np.cbrt),
    "exp": _unary(np.exp),
    "exp2": _unary(np.exp2),
    "log": _unary(np.log),
    "log1p": _unary(np.log1p),
    "expm1": _unary(np.expm1),
    "tanh": _unary(np.tanh),
    "logistic": _logistic,
    "sin": _unary(np.sin),
    "cos": _unary(np.cos),
    "tan": _unary(np.tan),
    "asin": _unary(np.arcsin),
    "acos": _unary(np.arccos),
    "atan": _unary(np.arctan),
    "sinh": _unary(np.sinh),
    "cosh": _unary(np.cosh),
    "asinh": _unary(np.arcsinh),
    "acosh": _unary(np.arccosh),
    "atanh": _unary(np.arctanh),
    "atan2": _binary(np.arctan2),
    "nextafter": _binary(_nextafter),
    "erf": _unary(special.erf),
    "erfc": _unary(special.erfc),
    "erf_inv": _unary(_erf_inv),
    "lgamma": _unary(special.gammaln),
    "digamma": _unary(special.digamma),
    "real": _unary(np.real),
    "imag": _unary(np.imag),
    "conj": _unary(np.conj),
    "complex": _binary(lambda x, y: x + 1j * y),
    # comparisons and logic
    "eq": _binary(np.equal),
    "ne": _binary(np.not_equal),
    "lt": _binary(np.less),
    "le": _binary(np.less_equal),
    "gt": _binary(np.greater),
    "ge": _binary(np.greater_equal),
    "and": _binary(np.bitwise_and),
    "or": _binary(np.bitwise_or),
    "xor": _binary(np.bitwise_xor),
    "not": _unary(np.invert),
    "shift_left": _binary(np.left_shift),
    "shift_right_arithmetic": _binary(np.right_shift),
    "shift_right_logical": _binary(_shift_right_logical),
    "population_count": _unary(np.bitwise_count),
    "select_n": _select_n,
    "clamp": _clamp,
    # types
    "convert_element_type": _convert,
    "copy": _unary(np.copy),
    "copy_p": _unary(np.copy),
    "reduce_precision": _reduce_precision,
    "bitcast_convert_type": _bitcast,
    # new in JAX 0.12: tanh's, asin's, acos's and atanh's derivatives use
    # `one_minus_square`; `log2` became a primitive
    "one_minus_square": _unary(lambda x: 1 - x * x),
    "log2": _unary(np.log2),
    # spelled differently across the supported JAX versions
    "stop_gradient": _unary(lambda x: x),
}
