"""Evaluating a jaxpr with NumPy, on the host, inside or outside a callback.

Block kernels are differentiated by JAX (`_kernel`), but their backward passes run
inside the ordered host callbacks that carry out-of-core work, where calling back
into JAX's runtime can deadlock. So the backward pass is traced once per block
shape with `jax.make_jaxpr` (tracing runs no computation) and the resulting jaxpr is
evaluated here, primitive by primitive, with NumPy. The table below grows with JAX's
primitive set, not with the number of array functions; a primitive missing from it
is refused by name.

Every result is cast to the dtype the jaxpr says, so NumPy's own promotion never
leaks into the values.
"""

from __future__ import annotations

import math
import string
from collections.abc import Callable
from typing import Any

import numpy as np
from scipy import special

__all__ = ["evaluate", "supports", "unsupported"]


def evaluate(closed_jaxpr, *args) -> list[np.ndarray]:
    """The outputs of ``closed_jaxpr`` on NumPy ``args``, computed with NumPy."""
    return _eval(closed_jaxpr.jaxpr, closed_jaxpr.consts, args)


def supports(name: str) -> bool:
    """Whether a JAX primitive of this name can be evaluated here."""
    return name in _RULES or name in _CALLS


def unsupported(closed_jaxpr) -> list[str]:
    """The primitives of ``closed_jaxpr`` (nested calls included) this table lacks."""
    missing: list[str] = []

    def walk(jaxpr):
        for eqn in jaxpr.eqns:
            name = eqn.primitive.name
            if name in _CALLS:
                inner = next(
                    (
                        eqn.params[k]
                        for k in ("jaxpr", "call_jaxpr", "fun_jaxpr")
                        if k in eqn.params
                    ),
                    None,
                )
                if inner is not None:
                    walk(getattr(inner, "jaxpr", inner))
            elif name not in _RULES and name not in missing:
                missing.append(name)

    walk(closed_jaxpr.jaxpr)
    return missing


def _eval(jaxpr, consts, args) -> list[np.ndarray]:
    env: dict[Any, Any] = {}

    def read(v):
        if hasattr(v, "val") and not hasattr(v, "count"):  # a Literal
            return np.asarray(v.val, _dtype_of(v))
        return env[v]

    for v, c in zip(jaxpr.constvars, consts):
        env[v] = np.asarray(c)
    for v, a in zip(jaxpr.invars, args):
        env[v] = np.asarray(a)
    for eqn in jaxpr.eqns:
        name = eqn.primitive.name
        ins = [read(v) for v in eqn.invars]
        if name in _CALLS:
            outs = _CALLS[name](eqn.params, ins)
        else:
            rule = _RULES.get(name)
            if rule is None:
                raise NotImplementedError(
                    f"gradpipe.ooc cannot run JAX's `{name}` primitive on the host (in the "
                    "backward pass of a block kernel). Write the kernel with other jax.numpy "
                    "functions, or give the operation its own backward_block."
                )
            outs = rule(*ins, **eqn.params)
            if not eqn.primitive.multiple_results:
                outs = [outs]
        for v, o in zip(eqn.outvars, outs):
            if type(v).__name__ == "DropVar":
                continue
            env[v] = _as(o, _dtype_of(v))
    return [read(v) for v in jaxpr.outvars]


def _dtype_of(v) -> np.dtype:
    dtype = v.aval.dtype
    try:
        return np.dtype(dtype)
    except TypeError:  # float0 and JAX's extended dtypes
        return np.dtype(bool)


def _as(x, dtype: np.dtype) -> np.ndarray:
    x = np.asarray(x)
    return x if x.dtype == dtype else x.astype(dtype)


# ----------------------------------------------------------------- the table


def _calls_jaxpr(key: str) -> Callable:
    def call(params, ins):
        inner = params[key]
        jaxpr = getattr(inner, "jaxpr", inner)
        consts = getattr(inner, "consts", ())
        return _eval(jaxpr, consts, ins)

    return call


_CALLS: dict[str, Callable] = {
    "pjit": _calls_jaxpr("jaxpr"),
    "jit": _calls_jaxpr("jaxpr"),
    "closed_call": _calls_jaxpr("call_jaxpr"),
    "core_call": _calls_jaxpr("call_jaxpr"),
    "remat": _calls_jaxpr("jaxpr"),
    "checkpoint": _calls_jaxpr("jaxpr"),
    "custom_jvp_call": _calls_jaxpr("call_jaxpr"),
    "custom_vjp_call": _calls_jaxpr("call_jaxpr"),
    "custom_vjp_call_jaxpr": _calls_jaxpr("fun_jaxpr"),
}


def _ignore_params(fn: Callable) -> Callable:
    return lambda *ins, **params: fn(*ins)


def _int_div(x, y):
    """C division (truncating toward zero), as XLA's integer ``div``."""
    if x.dtype.kind in "iu":
        with np.errstate(divide="ignore", invalid="ignore"):
            q = np.where(y == 0, 0, np.abs(x) // np.where(y == 0, 1, np.abs(y)))
        return np.where((x < 0) != (y < 0), -q, q) if x.dtype.kind == "i" else q
    return np.divide(x, y)


def _round(x, rounding_method=0, **_):
    if int(rounding_method) == 1:  # to nearest even
        return np.round(x)
    return np.sign(x) * np.floor(np.abs(x) + 0.5)  # away from zero


def _integer_pow(x, y, **_):
    if y < 0:
        return np.reciprocal(np.power(x, -y))
    return np.power(x, y)


def _convert(x, new_dtype, **_):
    dtype = np.dtype(new_dtype) if str(new_dtype) != "float0" else np.dtype(bool)
    if np.iscomplexobj(x) and dtype.kind != "c":
        x = x.real
    return x.astype(dtype)


def _broadcast_in_dim(x, shape, broadcast_dimensions, **_):
    expanded = [1] * len(shape)
    for d, n in zip(broadcast_dimensions, x.shape):
        expanded[d] = n
    return np.broadcast_to(x.reshape(expanded), tuple(shape))


def _reshape(x, new_sizes, dimensions=None, **_):
    if dimensions is not None:
        x = np.transpose(x, dimensions)
    return x.reshape(tuple(new_sizes))


def _squeeze(x, dimensions, **_):
    return np.squeeze(x, axis=tuple(dimensions))


def _expand_dims(x, dimensions, **_):
    return np.expand_dims(x, tuple(dimensions))


def _slice(x, start_indices, limit_indices, strides=None, **_):
    strides = strides or (1,) * x.ndim
    return x[tuple(slice(a, b, s) for a, b, s in zip(start_indices, limit_indices, strides))]


def _dynamic_slice(x, *starts, slice_sizes, **_):
    index = []
    for s, n, size in zip(starts, x.shape, slice_sizes):
        s = int(np.clip(int(s), 0, n - size))
        index.append(slice(s, s + size))
    return x[tuple(index)]


def _dynamic_update_slice(x, update, *starts, **_):
    out = np.array(x, copy=True)
    index = []
    for s, n, size in zip(starts, x.shape, update.shape):
        s = int(np.clip(int(s), 0, n - size))
        index.append(slice(s, s + size))
    out[tuple(index)] = update
    return out


def _pad(x, value, padding_config, **_):
    """XLA's pad: low/high edges (negative ones crop) and interior padding."""
    shape = []
    for n, (lo, hi, interior) in zip(x.shape, padding_config):
        core = n + max(n - 1, 0) * interior
        shape.append(lo + core + hi)
    full = []  # the padded array before cropping negative edges
    for n, (lo, hi, interior) in zip(x.shape, padding_config):
        core = n + max(n - 1, 0) * interior
        full.append(max(lo, 0) + core + max(hi, 0))
    out = np.full(full, value, dtype=x.dtype)
    place = tuple(
        slice(max(lo, 0), max(lo, 0) + n + max(n - 1, 0) * interior, interior + 1)
        for n, (lo, _, interior) in zip(x.shape, padding_config)
    )
    out[place] = x
    crop = tuple(
        slice(-min(lo, 0), f - (-min(hi, 0))) for f, (lo, hi, _) in zip(full, padding_config)
    )
    return out[crop]


def _concatenate(*xs, dimension, **_):
    return np.concatenate(xs, axis=dimension)


def _dot_general(x, y, dimension_numbers, preferred_element_type=None, **_):
    (lc, rc), (lb, rb) = dimension_numbers
    letters = iter(string.ascii_letters)
    xs = [next(letters) for _ in range(x.ndim)]
    ys = [next(letters) for _ in range(y.ndim)]
    for a, b in zip(lc, rc):
        ys[b] = xs[a]
    for a, b in zip(lb, rb):
        ys[b] = xs[a]
    batch = [xs[a] for a in lb]
    free_x = [xs[a] for a in range(x.ndim) if a not in lc and a not in lb]
    free_y = [ys[b] for b in range(y.ndim) if b not in rc and b not in rb]
    spec = f"{''.join(xs)},{''.join(ys)}->{''.join(batch + free_x + free_y)}"
    out = np.einsum(spec, x, y, optimize=True)
    return out if preferred_element_type is None else out.astype(preferred_element_type)


def _reduction(fn):
    def rule(x, axes, **_):
        return fn(x, axis=tuple(axes))

    return rule


def _arg_reduction(fn):
    def rule(x, axes, index_dtype, **_):
        (axis,) = axes
        return fn(x, axis=axis).astype(index_dtype)

    return rule


def _cumulative(fn):
    def rule(x, axis, reverse=False, **_):
        if reverse:
            return np.flip(fn(np.flip(x, axis), axis=axis), axis)
        return fn(x, axis=axis)

    return rule


def _cumlogsumexp(x, axis):
    return np.logaddexp.accumulate(x, axis=axis)


def _iota(dtype, shape, dimension, **_):
    view = [1] * len(shape)
    view[dimension] = shape[dimension]
    return np.broadcast_to(np.arange(shape[dimension], dtype=dtype).reshape(view), tuple(shape))


def _select_n(which, *cases):
    if which.dtype == np.bool_:
        return np.where(which, cases[1], cases[0]) if len(cases) == 2 else cases[0]
    return np.choose(which.astype(np.intp), np.broadcast_arrays(*cases))


def _clamp(lo, x, hi):
    return np.minimum(np.maximum(x, lo), hi)


def _shift_right_logical(x, y):
    unsigned = x.dtype.str.replace("i", "u")
    return np.right_shift(x.view(unsigned), y.astype(unsigned)).view(x.dtype)


def _nextafter(x, y):
    return np.nextafter(x, y)


def _split(x, sizes, axis, **_):
    cuts = np.cumsum(sizes)[:-1]
    return np.split(x, cuts, axis=axis)


def _rev(x, dimensions, **_):
    return np.flip(x, axis=tuple(dimensions)) if dimensions else x


def _transpose(x, permutation, **_):
    return np.transpose(x, permutation)


def _reduce_precision(x, exponent_bits, mantissa_bits, **_):
    return x  # a no-op at the precision the value is held in


def _erf_inv(x):
    return special.erfinv(x)


def _logistic(x, **_):
    with np.errstate(over="ignore"):
        return 1 / (1 + np.exp(-x))


def _sign(x):
    if np.iscomplexobj(x):
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(x == 0, 0, x / np.abs(x))
    return np.sign(x)


def _rsqrt(x, **_):
    with np.errstate(divide="ignore", invalid="ignore"):
        return 1 / np.sqrt(x)


def _unary(fn):
    def rule(x, **_):
        with np.errstate(all="ignore"):
            return fn(x)

    return rule


def _bitcast(x, *, new_dtype, **_):
    new_dtype = np.dtype(new_dtype)
    if new_dtype.itemsize != x.dtype.itemsize:
        raise NotImplementedError(
            f"bitcast_convert_type from {x.dtype} to {new_dtype} changes the item size."
        )
    return np.ascontiguousarray(x).view(new_dtype)


def _binary(fn):
    def rule(x, y, **_):
        with np.errstate(all="ignore"):
            return fn(x, y)

    return rule


_RULES: dict[str, Callable] = {
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
    # types and layout
    "convert_element_type": _convert,
    "copy": _unary(np.copy),
    "copy_p": _unary(np.copy),
    "broadcast_in_dim": _broadcast_in_dim,
    "reshape": _reshape,
    "squeeze": _squeeze,
    "expand_dims": _expand_dims,
    "transpose": _transpose,
    "rev": _rev,
    "slice": _slice,
    "dynamic_slice": _dynamic_slice,
    "dynamic_update_slice": _dynamic_update_slice,
    "pad": _pad,
    "concatenate": _concatenate,
    "split": _split,
    "iota": _iota,
    "reduce_precision": _reduce_precision,
    "bitcast_convert_type": _bitcast,
    # reductions and scans
    "dot_general": _dot_general,
    "reduce_sum": _reduction(np.sum),
    "reduce_prod": _reduction(np.prod),
    "reduce_max": _reduction(np.max),
    "reduce_min": _reduction(np.min),
    "reduce_and": _reduction(np.all),
    "reduce_or": _reduction(np.any),
    "reduce_xor": _reduction(lambda x, axis: np.bitwise_xor.reduce(x, axis=axis)),
    "argmax": _arg_reduction(np.argmax),
    "argmin": _arg_reduction(np.argmin),
    "cumsum": _cumulative(np.cumsum),
    "cumprod": _cumulative(np.cumprod),
    "cummax": _cumulative(np.maximum.accumulate),
    "cummin": _cumulative(np.minimum.accumulate),
    "cumlogsumexp": _cumulative(_cumlogsumexp),
}

# spelled differently across the supported JAX versions
_RULES["stop_gradient"] = _unary(lambda x: x)
_RULES["optimization_barrier"] = lambda *xs, **_: list(xs)
_ = math
