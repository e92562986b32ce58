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

    def inner_programs(value):
        """The jaxprs a parameter holds: one, or a tuple of them (cond's branches,
        custom_linear_solve's named tuple)."""
        if hasattr(value, "eqns"):
            return [value]
        if hasattr(getattr(value, "jaxpr", None), "eqns"):
            return [value.jaxpr]
        if isinstance(value, (tuple, list)):
            return [j for v in value for j in inner_programs(v)]
        return []

    def walk(jaxpr):
        for eqn in jaxpr.eqns:
            name = eqn.primitive.name
            if name not in _RULES and name not in _CALLS and name not in missing:
                missing.append(name)
            for value in eqn.params.values():
                for inner in inner_programs(value):
                    walk(inner)

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


def _cond(params, ins):
    """``cond``: the branch the first operand names, on the other operands."""
    index, *operands = ins
    branch = params["branches"][int(np.clip(index, 0, len(params["branches"]) - 1))]
    return _eval(getattr(branch, "jaxpr", branch), getattr(branch, "consts", ()), operands)


_CALLS: dict[str, Callable] = {
    "cond": _cond,
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


def _platform_index(*, platforms, **_):
    """Which of a platform-dependent computation's branches runs here: the host CPU's,
    else the default (``None``) one (JAX 0.12 writes e.g. ``det`` this way)."""
    for i, names in enumerate(platforms):
        if names is not None and "cpu" in names:
            return np.int32(i)
    return np.int32(next(i for i, names in enumerate(platforms) if names is None))


# new in JAX 0.12: tanh's, asin's, acos's and atanh's derivatives use
# `one_minus_square`; `log2` became a primitive; platform-dependent code selects a
# branch with `platform_index`
_RULES["one_minus_square"] = _unary(lambda x: 1 - x * x)
_RULES["log2"] = _unary(np.log2)
_RULES["platform_index"] = _platform_index

# spelled differently across the supported JAX versions
_RULES["stop_gradient"] = _unary(lambda x: x)
_RULES["optimization_barrier"] = lambda *xs, **_: list(xs)
_ = math


# ------------------------------------------------- FFTs and dense linear algebra


def _fft(x, fft_type, fft_lengths, **_):
    """XLA's FFT over the trailing ``len(fft_lengths)`` axes (its IFFT divides by n)."""
    kind = getattr(fft_type, "name", str(fft_type)).rsplit(".", 1)[-1].upper()
    axes = tuple(range(-len(fft_lengths), 0))
    if kind == "FFT":
        return np.fft.fftn(x, axes=axes)
    if kind == "IFFT":
        return np.fft.ifftn(x, axes=axes)
    if kind == "RFFT":
        return np.fft.rfftn(x, s=tuple(fft_lengths), axes=axes)
    return np.fft.irfftn(x, s=tuple(fft_lengths), axes=axes)


def _cholesky(x, **_):
    """The lower factor; NaNs for a matrix that is not positive definite (as JAX gives,
    where NumPy raises)."""
    try:
        return np.linalg.cholesky(x)
    except np.linalg.LinAlgError:
        return np.full_like(x, np.nan)


def _eigh(x, lower=True, sort_eigenvalues=True, subset_by_index=None, **_):
    if subset_by_index is not None and tuple(subset_by_index) != (0, x.shape[-1]):
        raise NotImplementedError("eigh with subset_by_index has no host rule.")
    w, v = np.linalg.eigh(x, UPLO="L" if lower else "U")
    return [v, w]


def _svd(x, full_matrices, compute_uv, subset_by_index=None, **_):
    if subset_by_index is not None and tuple(subset_by_index) != (0, min(x.shape[-2:])):
        raise NotImplementedError("svd with subset_by_index has no host rule.")
    if not compute_uv:
        return [np.linalg.svd(x, compute_uv=False)]
    u, s, vh = np.linalg.svd(x, full_matrices=full_matrices)
    return [s, u, vh]


def _qr(x, full_matrices, pivoting=False, **_):
    if pivoting:
        raise NotImplementedError("qr with pivoting has no host rule.")
    q, r = np.linalg.qr(x, mode="complete" if full_matrices else "reduced")
    return [q, r]


def _lu(x, **_):
    """LU with partial pivoting per matrix: the factors, LAPACK's pivots (0-based) and
    the row permutation they make, as JAX's ``lu``."""
    from scipy.linalg import lu_factor

    m, n = x.shape[-2:]
    lu = np.empty_like(x)
    pivots = np.empty((*x.shape[:-2], min(m, n)), np.int32)
    perm = np.empty((*x.shape[:-2], m), np.int32)
    for b in np.ndindex(x.shape[:-2]):
        lu[b], piv = lu_factor(x[b], check_finite=False)
        pivots[b] = piv[: min(m, n)]
        order = np.arange(m)
        for i, p in enumerate(pivots[b]):
            order[i], order[p] = order[p], order[i]
        perm[b] = order
    return [lu, pivots, perm]


def _triangular_solve(a, b, left_side, lower, transpose_a, conjugate_a, unit_diagonal, **_):
    """``op(a) x = b`` (or ``x op(a) = b``) for the triangle of ``a`` named by ``lower``."""
    a = np.tril(a) if lower else np.triu(a)
    if unit_diagonal:
        a = a.copy()
        idx = np.arange(a.shape[-1])
        a[..., idx, idx] = 1
    if transpose_a:
        a = np.swapaxes(a, -1, -2)
    if conjugate_a:
        a = np.conj(a)
    if left_side:
        return np.linalg.solve(a, b)
    return np.swapaxes(np.linalg.solve(np.swapaxes(a, -1, -2), np.swapaxes(b, -1, -2)), -1, -2)


def _custom_linear_solve(*args, const_lengths, jaxprs, **_):
    """The ``solve`` branch, as JAX's own implementation runs it."""
    lengths = list(const_lengths)
    offsets = np.cumsum([0, *lengths])
    solve_consts = list(args[offsets[2] : offsets[3]])
    b = list(args[offsets[-1] :])
    return _eval(jaxprs.solve.jaxpr, jaxprs.solve.consts, solve_consts + b)


def _mode_name(mode) -> str:
    return getattr(mode, "name", str(mode)).rsplit(".", 1)[-1].upper()


def _start(shape, sizes, dims, index, mode, batching=((), ()), b=()):
    """The start of one gathered or scattered window, or None when dropped; the
    operand's batching axes start at the index's own position ``b`` along its
    batching axes."""
    start = [0] * len(shape)
    for k, d in enumerate(dims):
        start[d] = int(index[k])
    for d, k in zip(*batching):
        start[d] = int(b[k])
    if _mode_name(mode) == "FILL_OR_DROP":
        if any(s < 0 or s + z > n for s, z, n in zip(start, sizes, shape)):
            return None
        return start
    return [int(np.clip(s, 0, n - z)) for s, z, n in zip(start, sizes, shape)]


def _gather(operand, indices, dimension_numbers, slice_sizes, mode, fill_value=None, **_):
    """XLA's gather, one window per index vector."""
    dn = dimension_numbers
    batching = (dn.operand_batching_dims, dn.start_indices_batching_dims)
    dropped = {*dn.collapsed_slice_dims, *dn.operand_batching_dims}
    batch = indices.shape[:-1]
    window = [z for d, z in enumerate(slice_sizes) if d not in dropped]
    rank = len(batch) + len(window)
    shape, it_b, it_w = [], iter(batch), iter(window)
    for d in range(rank):
        shape.append(next(it_w) if d in dn.offset_dims else next(it_b))
    out = np.empty(shape, operand.dtype)
    if fill_value is None:
        kind = operand.dtype.kind
        fill_value = (
            np.nan
            if kind in "fc"
            else np.iinfo(operand.dtype).min
            if kind == "i"
            else np.iinfo(operand.dtype).max
            if kind == "u"
            else True
        )
    for b in np.ndindex(batch):
        it = iter(b)
        place = tuple(slice(None) if d in dn.offset_dims else next(it) for d in range(rank))
        start = _start(
            operand.shape, slice_sizes, dn.start_index_map, indices[b], mode, batching, b
        )
        if start is None:
            out[place] = fill_value
            continue
        piece = operand[tuple(slice(s, s + z) for s, z in zip(start, slice_sizes))]
        out[place] = piece.reshape(window)
    return out


def _scatter(combine: Callable | None) -> Callable:
    """XLA's scatter: replace, or ``combine`` old and new."""

    def rule(operand, indices, updates, dimension_numbers, mode, **_):
        dn = dimension_numbers
        batching = (dn.operand_batching_dims, dn.scatter_indices_batching_dims)
        inserted = {*dn.inserted_window_dims, *dn.operand_batching_dims}
        out = np.array(operand, copy=True)
        scatter_dims = [d for d in range(updates.ndim) if d not in dn.update_window_dims]
        window = iter(updates.shape[d] for d in dn.update_window_dims)
        sizes = [1 if d in inserted else next(window) for d in range(out.ndim)]
        for b in np.ndindex(tuple(updates.shape[d] for d in scatter_dims)):
            start = _start(
                out.shape, sizes, dn.scatter_dims_to_operand_dims, indices[b], mode, batching, b
            )
            if start is None:
                continue
            it = iter(b)
            piece = updates[
                tuple(
                    slice(None) if d in dn.update_window_dims else next(it)
                    for d in range(updates.ndim)
                )
            ].reshape(sizes)
            region = tuple(slice(s, s + z) for s, z in zip(start, sizes))
            out[region] = piece if combine is None else combine(out[region], piece)
        return out

    return rule


def _sort(*operands, dimension, is_stable=True, num_keys=1, **_):
    """XLA's sort: every operand reordered as the first one sorts (NaNs last)."""
    if num_keys != 1:
        raise NotImplementedError("sort on several keys has no host rule.")
    order = np.argsort(operands[0], axis=dimension, kind="stable")
    return [np.take_along_axis(x, order, axis=dimension) for x in operands]


def _tile(x, reps, **_):
    return np.tile(x, tuple(reps))


_RULES.update(
    {
        "fft": _fft,
        "sort": _sort,
        "tile": _tile,
        "cholesky": _cholesky,
        "eigh": _eigh,
        "svd": _svd,
        "qr": _qr,
        "lu": _lu,
        "triangular_solve": _triangular_solve,
        "custom_linear_solve": _custom_linear_solve,
        "gather": _gather,
        "scatter": _scatter(None),
        "scatter-add": _scatter(np.add),
        "scatter_add": _scatter(np.add),
        "scatter-mul": _scatter(np.multiply),
        "scatter_mul": _scatter(np.multiply),
    }
)
