"""Every ooc operation gives NumPy's dtype and value, eagerly and under jit, for every
dtype; every gradient has its primal's dtype and jax.grad's value.

The property tests are driven by one table of operations (`OPS`), which must name
every operation `gradpipe.ooc` exports. Arrays are small but the memory budget is
the 4096-byte minimum, so most of them are cut into several tiles (reductions and
matmul accumulate across tiles). The property tests run twice, with x64 on and off,
against the rule of the out-of-core guide: `DiskArray` results have NumPy's dtype
either way; a 0-d result is what ``jnp.asarray`` makes of NumPy's (32 bits for 64
with x64 off); the sum of ints is in ``jax.numpy``'s default int (NumPy's with x64
on); an in-memory 0-d operand or parameter is what JAX holds (tests/ooc/test_x64_off.py
has the rest of the x64-off rule).
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gradpipe import ooc
from gradpipe.ooc.ops import _elementwise

BOOL = [np.dtype(bool)]
INTS = [np.dtype(t) for t in ("int8", "int16", "int32", "int64")]
UINTS = [np.dtype(t) for t in ("uint8", "uint16", "uint32", "uint64")]
FLOATS = [np.dtype(t) for t in ("float16", "float32", "float64")]
COMPLEX = [np.dtype(t) for t in ("complex64", "complex128")]
ALL = BOOL + INTS + UINTS + FLOATS + COMPLEX
INEXACT = FLOATS + COMPLEX
SETTINGS = dict(deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)


def _sigmoid(x):
    x = x.astype(np.exp(np.empty(0, x.dtype)).dtype)
    return 1 / (1 + np.exp(-x))


@dataclasses.dataclass(frozen=True)
class Op:
    """One operation: its ooc call, its NumPy reference and its jax.numpy twin."""

    kind: str  # unary | binary | reduce | matmul | layout
    ooc_fn: Callable
    np_fn: Callable
    jnp_fn: Callable | None = None
    exact: bool = True  # no accumulation: bit-equal to NumPy
    ordered: bool = False  # jax 0.12 refuses complex operands: real gradients only
    positive: bool = False  # differentiable only for positive inputs


def _relu_np(x):
    return np.maximum(x, np.zeros((), x.dtype))


OPS: dict[str, Op] = {
    "negative": Op("unary", ooc.negative, np.negative, jnp.negative),
    "exp": Op("unary", ooc.exp, np.exp, jnp.exp),
    "log": Op("unary", ooc.log, np.log, jnp.log, positive=True),
    "sqrt": Op("unary", ooc.sqrt, np.sqrt, jnp.sqrt, positive=True),
    "square": Op("unary", ooc.square, np.square, jnp.square),
    "abs": Op("unary", ooc.abs, np.abs, jnp.abs),
    "sin": Op("unary", ooc.sin, np.sin, jnp.sin),
    "cos": Op("unary", ooc.cos, np.cos, jnp.cos),
    "tanh": Op("unary", ooc.tanh, np.tanh, jnp.tanh),
    "sigmoid": Op("unary", ooc.sigmoid, _sigmoid, jax.nn.sigmoid),
    "relu": Op("unary", ooc.relu, _relu_np, jax.nn.relu, ordered=True),
    "power": Op("unary", None, None, positive=True),
    "astype": Op("unary", None, None),
    "add": Op("binary", ooc.add, np.add, jnp.add),
    "subtract": Op("binary", ooc.subtract, np.subtract, jnp.subtract),
    "multiply": Op("binary", ooc.multiply, np.multiply, jnp.multiply),
    "divide": Op("binary", ooc.divide, np.divide, jnp.divide),
    "maximum": Op("binary", ooc.maximum, np.maximum, jnp.maximum, ordered=True),
    "minimum": Op("binary", ooc.minimum, np.minimum, jnp.minimum, ordered=True),
    **{
        name: Op("binary", getattr(ooc, name), getattr(np, name))
        for name in ("equal", "not_equal", "less", "less_equal", "greater", "greater_equal")
    },
    "sum": Op("reduce", ooc.sum, np.sum, jnp.sum, exact=False),
    "mean": Op("reduce", ooc.mean, np.mean, jnp.mean, exact=False),
    "max": Op("reduce", ooc.max, np.max, jnp.max, ordered=True),
    "matmul": Op("matmul", ooc.matmul, np.matmul, jnp.matmul, exact=False),
    "transpose": Op("layout", ooc.transpose, np.transpose, jnp.transpose),
    "getitem": Op("layout", ooc.getitem, None, None),
    "slice_rows": Op("layout", None, None),
    "slice_tile": Op("layout", None, None),
    "update_": Op("update", ooc.update_, None),
}


def _floor_divide_np(a, b):
    """NumPy's floor division with the standard's special cases at infinities."""
    q = np.floor_divide(a, b)
    if q.dtype.kind != "f":
        return q
    special = (np.isinf(a) & np.isfinite(b)) | (np.isfinite(a) & np.isinf(b))
    return np.where(special, np.true_divide(a, b).astype(q.dtype), q)


OPS["floor_divide"] = Op("binary", ooc.floor_divide, _floor_divide_np)
# every other elementwise function of the standard: NumPy 2 spells them alike
OPS.update(
    {
        name: Op("unary", getattr(ooc, name), getattr(np, name))
        for name in (*_elementwise.UNARY, *_elementwise.ROUNDING)
        if name not in OPS
    }
)
OPS.update(
    {
        name: Op("binary", getattr(ooc, name), getattr(np, name))
        for name in _elementwise.BINARY
        if name not in OPS
    }
)


def test_the_table_names_every_elementwise_operation():
    """Other families (creation, statistics, manipulation, ...) have test files of their own."""
    assert set(_elementwise.__all__) - {"where", "clip"} <= set(OPS)


# ---------------------------------------------------------------- data


def _data(rng, shape, dtype, *, positive=False, special=False):
    dtype = np.dtype(dtype)
    if dtype.kind == "b":
        return rng.random(shape) < 0.5
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        lo = 0 if dtype.kind == "u" or positive else -9
        x = rng.integers(lo, 10, shape).astype(dtype)
        if special and x.size:  # the extremes too: overflow must wrap as in NumPy
            x.flat[rng.integers(0, x.size, 2)] = [info.min, info.max]
        return x
    x = rng.standard_normal(shape)
    if dtype.kind == "c":
        x = x + 1j * rng.standard_normal(shape)
    if positive:
        x = np.abs(x) + 0.5
    x = x.astype(dtype)
    if special and x.size and dtype.kind == "f":
        x.flat[rng.integers(0, x.size, 3)] = [np.nan, np.inf, -np.inf]
    return x


def _tol(dtype, scale=1.0, terms=1):
    eps = {"e": 1e-3, "f": 1e-6, "d": 1e-15, "F": 1e-6, "D": 1e-15}.get(np.dtype(dtype).char, 0)
    return 8 * eps * max(terms, 1) * max(scale, 1.0)


def _check(got, want, exact: bool, terms: int = 1):
    """``got`` (ooc) has ``want``'s (NumPy's) dtype, shape and value."""
    got = got.to_numpy(force=True) if isinstance(got, ooc.DiskArray) else np.asarray(got)
    want = np.asarray(want)
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    assert got.shape == want.shape, (got.shape, want.shape)
    if exact or want.dtype.kind in "biu":
        np.testing.assert_array_equal(got, want)
        return
    finite = np.abs(want[np.isfinite(want)]) if want.size else np.zeros(0)
    atol = _tol(want.dtype, float(finite.max()) if finite.size else 1.0, terms)
    np.testing.assert_allclose(got, want, rtol=atol, atol=atol, equal_nan=True)


def _outcome(fn):
    """``("ok", value)`` or ``("error", type)``: NumPy's refusals must be ours too."""
    try:
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return "ok", fn()
    except (TypeError, OverflowError, ValueError) as error:
        return "error", type(error)


def _as_jax_value(want):
    """NumPy's 0-d result as JAX holds it (``jnp.asarray``'s: 32 bits for 64 with x64
    off); any other result as it is (a DiskArray keeps NumPy's dtype)."""
    if np.ndim(want):
        return want
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return np.asarray(jnp.asarray(want))


def _held(dtype) -> np.dtype:
    """The dtype JAX holds ``dtype`` values in under the flag in force."""
    return np.asarray(jnp.asarray(np.zeros(0, dtype))).dtype


def _sum_dtype(dtype) -> np.dtype:
    """The dtype of the sum of ``dtype`` data: jax.numpy's under the flag in force
    (NumPy's with x64 on; int32 for small ints with x64 off), never narrower than
    the data."""
    return np.result_type(dtype, jnp.sum(jnp.zeros(1, _held(dtype))).dtype)


def _both(ooc_call, np_call, disk_args, exact=True, terms=1):
    """Compare ``ooc_call(*disk_args)`` eagerly and under jit with ``np_call()``."""
    kind, want = _outcome(np_call)
    if kind == "ok":
        want = _as_jax_value(want)
    for run in (ooc_call, jax.jit(ooc_call)):
        # read inside: a refusal that depends on the data (an int to a negative int
        # power) comes when a lazy result is computed, at the latest when it is read
        got_kind, got = _outcome(lambda run=run: _value(run(*disk_args)))
        if kind == "error":
            assert got_kind == "error", f"NumPy refuses ({want.__name__}); ooc gave {got!r}"
            continue
        assert got_kind == "ok", f"ooc refused ({got.__name__}) what NumPy computes"
        _check(got, want, exact, terms)


def disk(x, budget=None):
    return ooc.DiskArray.from_numpy(np.asarray(x), budget=budget)


# ---------------------------------------------------------------- strategies

dtypes = st.sampled_from(ALL)
seeds = st.integers(0, 2**32 - 1)


@st.composite
def shapes(draw, min_dims=1, max_dims=3, max_side=24):
    nd = draw(st.integers(min_dims, max_dims))
    sides = [draw(st.sampled_from([1, 2, 5, 13, max_side])) for _ in range(nd)]
    return tuple(sides)


@st.composite
def broadcast_pair(draw):
    out = draw(shapes(min_dims=1, max_dims=3))
    b = tuple(n if draw(st.booleans()) else 1 for n in out)[draw(st.integers(0, len(out))) :]
    return (out, b) if draw(st.booleans()) else (b, out)


def _scalar(rng, dtype, how):
    """A scalar operand and its NumPy twin: a Python number, a NumPy scalar, or a
    0-d JAX value (weakly typed like a Python number, or strong)."""
    value = _data(rng, (), dtype).item()
    if how == "python":
        return value, value
    if how == "numpy":
        v = np.dtype(dtype).type(value)
        return v, v
    if how == "jax_weak":
        # a traced weak int that does not fit wraps as in JAX (the guide says so)
        value = abs(value) if isinstance(value, int) else value
        return jnp.asarray(value), value
    # strong: the dtype JAX holds it in (32 bits for 64 with x64 off)
    return jnp.asarray(value, _held(dtype)), np.asarray(value, _held(dtype))


# ---------------------------------------------------------------- forward properties


X64 = pytest.mark.parametrize("x64", [True, False], ids=["x64", "x64_off"])


@X64
@settings(max_examples=150, **SETTINGS)
@given(st.data(), seeds)
def test_elementwise_gives_numpys_dtype_and_value(x64, data, seed):
    rng = np.random.default_rng(seed)
    name = data.draw(st.sampled_from([n for n, o in OPS.items() if o.kind in ("unary", "binary")]))
    op = OPS[name]
    special = data.draw(st.booleans())
    with jax.enable_x64(x64), ooc.MemoryBudget(4096) as budget:
        if op.kind == "unary":
            dtype = data.draw(dtypes)
            X = _data(rng, data.draw(shapes()), dtype, special=special)
            if name == "power":
                p = data.draw(
                    st.sampled_from([0, 2, 3, -1, 0.5, 2.0, -1.5, 1j, np.float32(2), np.int8(2)])
                )
                ooc_call, np_call = (lambda x: ooc.power(x, p)), (lambda: np.power(X, p))
            elif name == "astype":
                to = data.draw(dtypes)
                ooc_call, np_call = (lambda x: ooc.astype(x, to)), (lambda: X.astype(to))
            else:
                ooc_call, np_call = op.ooc_fn, (lambda: op.np_fn(X))
            _both(ooc_call, np_call, [disk(X, budget)])
            return
        sa, sb = data.draw(broadcast_pair())
        da, db = data.draw(dtypes), data.draw(dtypes)
        A = _data(rng, sa, da, special=special)
        how = data.draw(st.sampled_from(["disk", "python", "numpy", "jax_weak", "jax_strong"]))
        if how == "disk":
            B = _data(rng, sb, db, special=special)
            _both(op.ooc_fn, lambda: op.np_fn(A, B), [disk(A, budget), disk(B, budget)])
            return
        s, s_np = _scalar(rng, db, how)
        if data.draw(st.booleans()):  # the scalar on the left
            _both(lambda a: op.ooc_fn(s, a), lambda: op.np_fn(s_np, A), [disk(A, budget)])
        else:
            _both(lambda a: op.ooc_fn(a, s), lambda: op.np_fn(A, s_np), [disk(A, budget)])


@X64
@settings(max_examples=80, **SETTINGS)
@given(st.data(), seeds, dtypes)
def test_reductions_give_numpys_dtype_and_value(x64, data, seed, dtype):
    rng = np.random.default_rng(seed)
    name = data.draw(st.sampled_from(["sum", "mean", "max"]))
    shape = data.draw(shapes(max_side=40))
    X = _data(rng, shape, dtype, special=data.draw(st.booleans()))
    axis = data.draw(
        st.sampled_from([None, 0, -1, tuple(range(len(shape)))[: data.draw(st.integers(1, 3))]])
    )
    keepdims = data.draw(st.booleans())
    terms = X.size if axis is None else int(np.prod([shape[a] for a in np.atleast_1d(axis)]))
    op = OPS[name]
    with jax.enable_x64(x64), ooc.MemoryBudget(4096) as budget:
        kw = dict(dtype=_sum_dtype(X.dtype)) if name == "sum" else {}
        _both(
            lambda x: op.ooc_fn(x, axis=axis, keepdims=keepdims),
            lambda: op.np_fn(X, axis=axis, keepdims=keepdims, **kw),
            [disk(X, budget)],
            exact=op.exact,
            terms=terms,
        )


@X64
@settings(max_examples=25, **SETTINGS)
@given(st.data(), seeds, dtypes, dtypes)
def test_matmul_and_layout_give_numpys_dtype_and_value(x64, data, seed, da, db):
    rng = np.random.default_rng(seed)
    side = st.sampled_from([1, 3, 17, 24])
    m, k, n = data.draw(side), data.draw(side), data.draw(side)
    ta, tb = data.draw(st.booleans()), data.draw(st.booleans())
    A = _data(rng, (k, m) if ta else (m, k), da)
    B = _data(rng, (n, k) if tb else (k, n), db)
    with jax.enable_x64(x64), ooc.MemoryBudget(4096) as budget:
        _both(
            lambda a, b: ooc.matmul(a, b, transpose_a=ta, transpose_b=tb),
            lambda: np.matmul(A.T if ta else A, B.T if tb else B),
            [disk(A, budget), disk(B, budget)],
            exact=False,
            terms=k,
        )
        X = _data(rng, data.draw(shapes()), da)
        axes = tuple(data.draw(st.permutations(range(X.ndim))))
        _both(lambda x: ooc.transpose(x, axes), lambda: np.transpose(X, axes), [disk(X, budget)])
        index = tuple(
            data.draw(st.one_of(st.integers(-n, n - 1), st.builds(slice, st.integers(-n, n))))
            for n in X.shape[: data.draw(st.integers(1, X.ndim))]
        )
        _both(lambda x: x[index], lambda: X[index], [disk(X, budget)])
        _both(lambda x: ooc.slice_rows(x, 1, 3), lambda: X[1:3], [disk(X, budget)])
        if X.ndim == 2:
            _both(lambda x: ooc.slice_tile(x, (0, 2), (1, 9)), lambda: X[0:2, 1:9], [disk(X)])


@settings(max_examples=30, **SETTINGS)
@given(st.data(), seeds, dtypes, dtypes)
def test_update_casts_within_a_kind_and_refuses_across_kinds(data, seed, dt, dv):
    """``update_`` follows ``np.copyto``: same-kind casts are written, others refused."""
    rng = np.random.default_rng(seed)
    T, V = _data(rng, (13, 5), dt), _data(rng, (13, 5), dv)
    target = disk(T)
    want = T.copy()
    kind, err = _outcome(lambda: np.copyto(want, V))
    if kind == "error":
        with pytest.raises(type(err) if isinstance(err, BaseException) else err):
            ooc.update_(target, disk(V))
        np.testing.assert_array_equal(target.to_numpy(), T)  # untouched
        return
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = ooc.update_(target, disk(V))
    _check(out, want, exact=True)


# ---------------------------------------------------------------- gradients


def _grad_case(data, rng):
    """(ooc function, jnp function, differentiated arrays, closed-over arrays)."""
    # comparisons have bool results: no gradient to compare
    name = data.draw(
        st.sampled_from(
            [n for n, o in OPS.items() if o.jnp_fn or (o.ooc_fn is None and o.kind != "update")]
        )
    )
    op = OPS[name]
    dtypes_ = FLOATS if op.ordered else INEXACT
    dtype = data.draw(st.sampled_from(dtypes_))
    pos = op.positive or name in ("divide",)
    if op.kind == "unary":
        X = _data(rng, data.draw(shapes()), dtype, positive=pos)
        if name == "power":
            p = data.draw(st.sampled_from([2, 3, 0.5, -1.5]))
            return (lambda x: ooc.power(x, p)), (lambda x: jnp.power(x, p)), [X]
        if name == "astype":
            to = data.draw(st.sampled_from(dtypes_))
            return (lambda x: ooc.astype(x, to)), (lambda x: x.astype(to)), [X]
        return op.ooc_fn, op.jnp_fn, [X]
    if op.kind == "binary":
        sa, sb = data.draw(broadcast_pair())
        db = data.draw(st.sampled_from(dtypes_))
        A, B = _data(rng, sa, dtype, positive=pos), _data(rng, sb, db, positive=pos)
        if data.draw(st.booleans()):  # a 0-d JAX value as the second operand
            B = B.reshape(-1)[:1].reshape(())
        common = np.result_type(A, B)
        return (
            op.ooc_fn,
            lambda a, b: op.jnp_fn(a.astype(common), b.astype(common)),
            [A, B],
        )
    if op.kind == "reduce":
        X = _data(rng, data.draw(shapes(max_side=40)), dtype)
        axis = data.draw(st.sampled_from([None, 0, -1]))
        keep = data.draw(st.booleans())
        return (
            lambda x: op.ooc_fn(x, axis=axis, keepdims=keep),
            lambda x: op.jnp_fn(x, axis=axis, keepdims=keep),
            [X],
        )
    if op.kind == "matmul":
        side = st.sampled_from([1, 3, 17, 24])
        m, k, n = data.draw(side), data.draw(side), data.draw(side)
        ta, tb = data.draw(st.booleans()), data.draw(st.booleans())
        db = data.draw(st.sampled_from(dtypes_))
        A = _data(rng, (k, m) if ta else (m, k), dtype)
        B = _data(rng, (n, k) if tb else (k, n), db)
        common = np.result_type(A, B)
        return (
            lambda a, b: ooc.matmul(a, b, transpose_a=ta, transpose_b=tb),
            lambda a, b: jnp.matmul(
                (a.T if ta else a).astype(common), (b.T if tb else b).astype(common)
            ),
            [A, B],
        )
    X = _data(rng, data.draw(shapes(min_dims=2)), dtype)
    if name == "transpose":
        axes = tuple(data.draw(st.permutations(range(X.ndim))))
        return (lambda x: ooc.transpose(x, axes)), (lambda x: jnp.transpose(x, axes)), [X]
    if name == "slice_tile":
        X = X.reshape(X.shape[0], -1)
        return (lambda x: ooc.slice_tile(x, (0, 1), (0, 2))), (lambda x: x[0:1, 0:2]), [X]
    if name == "slice_rows":
        return (lambda x: ooc.slice_rows(x, 1, 4)), (lambda x: x[1:4]), [X]
    index = (data.draw(st.integers(0, X.shape[0] - 1)), slice(1, None))
    return (lambda x: x[index]), (lambda x: x[index]), [X]


def _real(v):
    return jnp.real(v) if jnp.iscomplexobj(v) else v


@X64
@settings(max_examples=40, **SETTINGS)
@given(st.data(), seeds)
def test_gradients_have_the_primals_dtype_and_jax_grads_value(x64, data, seed):
    """A DiskArray's gradient has its dtype, an in-memory 0-d operand's the dtype JAX
    holds it in (float32 for float64 with x64 off); values are jax.grad's in 64 bits
    on the operands as ooc sees them."""
    rng = np.random.default_rng(seed)
    f_ooc, f_jnp, arrays = _grad_case(data, rng)
    on_disk = [i == 0 or bool(a.shape) for i, a in enumerate(arrays)]
    with jax.enable_x64(x64):  # a 0-d operand is what JAX holds under the flag
        arrays = [a if d else a.astype(_held(a.dtype)) for a, d in zip(arrays, on_disk)]
    with jax.enable_x64(True):
        with np.errstate(all="ignore"):
            out = jax.eval_shape(f_jnp, *arrays)
            ref = f_jnp(*[jnp.asarray(a) for a in arrays])
        W = None if out.shape == () else _data(rng, out.shape, np.asarray(ref).dtype)

        def loss_jnp(*xs):
            out = f_jnp(*xs)
            return _real(out if W is None else jnp.sum(out * W))

        argnums = tuple(range(len(arrays)))
        want = jax.grad(loss_jnp, argnums)(*[jnp.asarray(a) for a in arrays])
    with jax.enable_x64(x64), ooc.MemoryBudget(4096) as budget:
        w_disk = None if W is None else disk(W, budget)

        def loss_ooc(*xs):  # weighted by W: a cotangent that is not all ones
            out = f_ooc(*xs)
            return _real(out if W is None else ooc.sum(out * w_disk))

        ins = [disk(a, budget) if d else jnp.asarray(a) for a, d in zip(arrays, on_disk)]
        for run in (jax.grad(loss_ooc, argnums), jax.jit(jax.grad(loss_ooc, argnums))):
            got = run(*ins)
            for g, w, a in zip(got, want, arrays):
                g = g.to_numpy(force=True) if isinstance(g, ooc.DiskArray) else np.asarray(g)
                assert g.dtype == a.dtype, (g.dtype, a.dtype)
                assert g.shape == a.shape
                scale = float(np.max(np.abs(w))) if np.size(w) else 1.0
                tol = _tol(a.dtype, scale, 64) * (50 if a.dtype == np.float16 else 1)
                np.testing.assert_allclose(g, np.asarray(w), rtol=tol, atol=tol)


# ---------------------------------------------------------------- the cases found


def _value(r):
    return r.to_numpy(force=True) if isinstance(r, ooc.DiskArray) else np.asarray(r)


@pytest.mark.parametrize("jit", [False, True])
def test_mean_of_integers_is_a_float64_mean(tiny_budget, jit):
    """It was 0 for arange(10): the scale 1/10 was cast to the integer dtype."""
    mean = jax.jit(ooc.mean) if jit else ooc.mean
    with jax.enable_x64(True):
        got = mean(disk(np.arange(10)))
        assert got.dtype == np.float64 and float(got) == 4.5
        big = np.full(3000, 2**62, np.int64)  # accumulated in float64: no overflow
        assert float(mean(disk(big))) == float(np.mean(big))
    rows = ooc.mean(disk(np.arange(12, dtype=np.uint8).reshape(3, 4)), axis=1)
    assert rows.dtype == np.float64  # a DiskArray result needs no x64
    np.testing.assert_array_equal(rows.to_numpy(), [1.5, 5.5, 9.5])


def test_sums_of_small_ints_and_bools_use_the_default_int(tiny_budget):
    """jax.numpy sums int8/uint8/bool in the default int (int64/uint64 with x64, as
    NumPy; int32/uint32 without), on disk too; an int8 accumulator wrapped."""
    X = np.full((50, 40), 100, np.int8)
    with jax.enable_x64(True):
        got = ooc.sum(disk(X))
        assert got.dtype == np.int64 and int(got) == 200_000
        assert int(ooc.sum(disk(X > 0))) == 2000
        assert ooc.sum(disk(X.astype(np.uint8))).dtype == np.uint64
        cols = ooc.sum(disk(X), axis=0)
        assert cols.dtype == np.int64 and (cols.to_numpy() == 5000).all()
    with jax.enable_x64(False):
        cols = ooc.sum(disk(X), axis=0)
        assert cols.dtype == np.int32 and (cols.to_numpy() == 5000).all()
        assert ooc.sum(disk(X.astype(np.uint8)), axis=0).dtype == np.uint32
        assert ooc.sum(disk(X > 0), axis=0).dtype == jnp.sum(jnp.asarray(X > 0), axis=0).dtype


def test_float16_sums_and_means_accumulate_in_float32(tiny_budget):
    """A float16 accumulator stalls (0.1 added 10^4 times gives 256); NumPy's
    pairwise sum accumulates in float32, and so do the tiles."""
    X = np.full((100, 100), 0.1, np.float16)
    got, want = ooc.sum(disk(X)), np.sum(X)
    assert got.dtype == np.float16 and float(got) == float(want) == 1000.0
    got = ooc.mean(disk(X))
    assert got.dtype == np.float16 and float(got) == float(np.mean(X))
    # along axis 0 NumPy rounds each addition to float16 (10.08 here); ooc does not
    cols = ooc.sum(disk(X), axis=0).to_numpy()
    np.testing.assert_array_equal(cols, np.sum(X, axis=0, dtype=np.float32).astype(np.float16))


def test_64_bit_scalar_results_become_32_bit_jax_values_while_x64_is_off(tiny_budget):
    """They were refused; now they are what jnp.asarray makes of NumPy's result
    (tests/ooc/test_x64_off.py has the rest of the rule)."""
    X = np.linspace(0, 1, 64).reshape(8, 8)
    x = disk(X)  # float64
    with jax.enable_x64(False), warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # the once-per-process warning
        for fn, np_fn in [(ooc.sum, np.sum), (jax.jit(ooc.sum), np.sum), (ooc.mean, np.mean)]:
            got = fn(x)
            assert got.dtype == np.float32
            np.testing.assert_allclose(got, jnp.asarray(np_fn(X)), rtol=1e-6)
        assert ooc.max(x) == jnp.asarray(np.max(X))
        assert ooc.sum(disk(np.arange(5, dtype=np.int64))).dtype == np.int32
        assert float(ooc.mean(disk(np.arange(5, dtype=np.int32)))) == 2.0
        # results on disk keep their dtype; 32-bit scalars are kept as they are
        kept = ooc.sum(x, keepdims=True)
        assert kept.dtype == np.float64 and kept.to_numpy()[0, 0] == np.sum(x.to_numpy())
        assert (x * 1.0).dtype == np.float64
        assert ooc.sum(ooc.astype(x, np.float32)).dtype == np.float32
        # a traced float with an int32 array: NumPy's float64 result, on disk
        r = jax.jit(lambda a, s: a + s)(disk(np.arange(4, dtype=np.int32)), 0.5)
        assert r.dtype == np.float64 and r.to_numpy().tolist() == [0.5, 1.5, 2.5, 3.5]


@pytest.mark.parametrize("ta,tb", [(False, False), (True, False), (False, True)])
def test_mixed_precision_gradients_have_each_primals_dtype(tiny_budget, ta, tb):
    """A float32 array used with a float64 one got a float64 gradient, which JAX
    rejected ("Expected cotangent type DiskArray{float32..."); same for real with
    complex (the gradient is the real part) and float16 broadcast against float32."""
    rng = np.random.default_rng(0)
    A = rng.standard_normal((5, 7) if ta else (7, 5)).astype(np.float32)
    B = rng.standard_normal((9, 5) if tb else (5, 9))
    Z = (B + 1j * rng.standard_normal(B.shape)).astype(np.complex64)

    def ooc_loss(a, b):
        return jnp.real(ooc.sum(ooc.square(ooc.matmul(a, b, transpose_a=ta, transpose_b=tb))))

    def jnp_loss(a, b):
        (a, b) = ((a.T if ta else a), (b.T if tb else b))
        c = jnp.result_type(a, b)
        return jnp.real(jnp.sum(jnp.square(a.astype(c) @ b.astype(c))))

    with jax.enable_x64(True):
        for other in (B, Z):
            got = jax.jit(jax.grad(ooc_loss, (0, 1)))(disk(A), disk(other))
            want = jax.grad(jnp_loss, (0, 1))(A, other)
            for g, w, primal in zip(got, want, (A, other)):
                assert g.dtype == primal.dtype
                np.testing.assert_allclose(g.to_numpy(), w, rtol=1e-4, atol=1e-4)
        h = np.ones((1, 5), np.float16)
        loss = lambda h, a: ooc.sum(ooc.square(ooc.multiply(h, a)))
        gh, ga = jax.grad(loss, (0, 1))(disk(h), disk(A if not ta else A.T.copy()))
        assert (gh.dtype, ga.dtype) == (np.float16, np.float32)


def test_integer_inputs_have_no_gradient_as_in_jax(tiny_budget):
    """Integer data closed over by a loss is not differentiated; asked for explicitly
    its gradient is JAX's: jax.grad refuses it, jax.vjp gives float0."""
    Xn = np.arange(12, dtype=np.int16).reshape(3, 4)
    X = disk(Xn)  # int16 @ float32 is float32
    w = disk(np.ones((4, 1), np.float32))
    g = jax.jit(jax.grad(lambda w: ooc.sum(ooc.matmul(X, w))))(w)
    assert g.dtype == np.float32
    np.testing.assert_array_equal(g.to_numpy()[:, 0], Xn.sum(0))
    to_f32 = lambda x: ooc.sum(ooc.astype(x, np.float32))
    (gx,) = jax.vjp(to_f32, X)[1](np.float32(1))
    (ref,) = jax.vjp(lambda x: jnp.sum(x.astype(jnp.float32)), jnp.asarray(Xn))[1](np.float32(1))
    assert gx.dtype == ref.dtype == jax.dtypes.float0 and gx.shape == Xn.shape
    for grad in (jax.grad, jax.value_and_grad):
        with pytest.raises(TypeError, match=r"requires real- or complex.*DiskArray of int16"):
            grad(to_f32)(X)
        with pytest.raises(TypeError, match="requires real- or complex-valued"):
            grad(lambda x: jnp.sum(x.astype(jnp.float32)))(jnp.asarray(Xn))  # as JAX
    with pytest.raises(TypeError, match="DiskArray of bool"):
        jax.grad(to_f32)(disk(Xn > 3))
    assert jax.grad(to_f32, allow_int=True)(X).dtype == jax.dtypes.float0
    # a cast to an int passes no gradient: its cotangent is float0, as in JAX
    x = disk(np.linspace(0, 3, 5, dtype=np.float32))
    _, vjp = jax.vjp(lambda x: ooc.astype(x, np.int16), x)
    (gx,) = vjp(np.zeros(5, jax.dtypes.float0))
    assert gx.dtype == np.float32 and not gx.to_numpy().any()
    # bool and int intermediates carry no gradient, but the float path through them does
    xn = np.array([-1.5, 2.0, 3.25, -4.0], np.float32)
    got = jax.grad(lambda x: ooc.sum(ooc.multiply(ooc.greater(x, 0.0), ooc.square(x))))(disk(xn))
    np.testing.assert_allclose(got.to_numpy(), np.where(xn > 0, 2 * xn, 0))
    got = jax.jit(jax.grad(lambda x: ooc.sum(ooc.multiply(ooc.astype(x, np.int8), x))))(disk(xn))
    np.testing.assert_allclose(got.to_numpy(), xn.astype(np.int8))
    with jax.enable_x64(True):  # exp of ints is a float (NumPy's), its input gets float0
        (gx,) = jax.vjp(lambda x: ooc.sum(ooc.exp(x)), X)[1](np.float32(1))  # int16: float32
        assert gx.dtype == jax.dtypes.float0


def test_scalar_operands_promote_as_in_numpy_2(tiny_budget):
    f32, i8 = disk(np.ones(3, np.float32)), disk(np.array([1, 2, 3], np.int8))
    assert (f32 + 1.0).dtype == np.float32  # a Python float is weak
    assert (f32 * np.float64(2)).dtype == np.float64  # a NumPy scalar is not
    assert (i8 + 1).dtype == np.int8
    got = i8 + 1.5  # the float was cast to int8: [2, 3, 4]
    assert got.dtype == np.float64 and got.to_numpy().tolist() == [2.5, 3.5, 4.5]
    assert (i8 * 1j).dtype == np.complex128
    with pytest.raises(OverflowError, match="300"):
        disk(np.ones(2, np.uint8)) + 300
    assert (i8 - np.int16(1)).dtype == np.int16
    with jax.enable_x64(True):
        assert jax.jit(lambda a, s: a * s)(f32, 2.0).dtype == np.float32  # weak traced
        assert (f32 * jnp.asarray(2.0, jnp.float64)).dtype == np.float64  # strong


def test_division_and_functions_of_ints_are_floats(tiny_budget):
    i = disk(np.array([1, 2, 7], np.int64))
    assert (i / 2).to_numpy().tolist() == [0.5, 1.0, 3.5]
    assert (2 / i).dtype == np.float64
    assert ooc.exp(disk(np.array([1], np.int8))).dtype == np.float16  # as np.exp
    assert ooc.power(i, 0.5).dtype == np.float64
    assert ooc.power(i, 2).to_numpy().tolist() == [1, 4, 49]
    X = np.array([0.0, 2.0], np.float32)  # x ** 0 has gradient 0 at 0 (it was NaN)
    for p in (0, 0.0, 2):
        got = jax.grad(lambda x: ooc.sum(ooc.power(x, p)))(disk(X)).to_numpy()
        np.testing.assert_array_equal(got, jax.grad(lambda x: jnp.sum(jnp.power(x, p)))(X))
    with pytest.raises(ValueError, match="negative integer powers"):
        ooc.power(i, -1)
    with pytest.raises(TypeError, match=r"subtract.*bool"):
        disk(np.ones(2, bool)) - disk(np.ones(2, bool))


def test_max_propagates_nan_and_refuses_an_empty_axis(tiny_budget):
    X = np.arange(60, dtype=np.float32).reshape(6, 10)
    X[4, 7] = np.nan
    assert np.isnan(float(ooc.max(disk(X))))
    np.testing.assert_array_equal(ooc.max(disk(X), axis=0).to_numpy(), np.max(X, axis=0))
    for fn in (ooc.max, jax.jit(ooc.max, static_argnames="axis")):
        with pytest.raises(ValueError, match=r"max over axes \(0,\).*no identity"):
            fn(disk(np.zeros((0, 3), np.float32)), axis=0)
    assert ooc.max(disk(np.zeros((0, 3), np.float32)), axis=1).shape == (0,)
    # the gradient of a NaN maximum is NaN over its group, as in JAX (it was 0)
    for f_ooc, f_jnp in [
        (lambda x: ooc.max(x), lambda x: jnp.max(x)),
        (lambda x: ooc.sum(ooc.max(x, axis=1)), lambda x: jnp.sum(jnp.max(x, axis=1))),
    ]:
        got = jax.grad(f_ooc)(disk(X)).to_numpy()
        np.testing.assert_array_equal(got, jax.grad(f_jnp)(X))


def test_complex_abs_gradient_is_conjugated_as_in_jax(tiny_budget):
    """d|z| is conj(z)/|z| in JAX's convention; it was z/|z|."""
    z = np.array([1 + 2j, -3 + 0.5j], np.complex64)
    got = jax.grad(lambda z: jnp.real(ooc.sum(ooc.abs(z))))(disk(z)).to_numpy()
    want = jax.grad(lambda z: jnp.real(jnp.sum(jnp.abs(z))))(z)
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_astype_warns_when_it_drops_the_imaginary_part(tiny_budget):
    z = disk(np.array([1 + 2j], np.complex64))
    with pytest.warns(np.exceptions.ComplexWarning, match="imaginary"):
        r = ooc.astype(z, np.float32)
    assert r.dtype == np.float32 and r.to_numpy().tolist() == [1.0]


def test_an_op_whose_file_disagrees_with_its_dtype_is_refused(tiny_budget):
    @dataclasses.dataclass(frozen=True)
    class Widen(ooc.CustomOp):
        def output_shape(self, s):
            return s

        def forward(self, driver, x):  # claims x's dtype, writes float64
            out = driver.allocate(x.shape, np.float64)
            out.write(None, x.read(None))
            return out.commit()

    with pytest.raises(TypeError, match="float64 array where its output type says float32"):
        ooc.make_op(Widen)(disk(np.ones(3, np.float32)))


def test_a_0d_disk_array_gets_a_0d_disk_array_gradient(tiny_budget):
    """Its gradient was summed in memory and handed to JAX as a bare NumPy value."""
    a, b = disk(np.float32(2.0)), disk(np.ones((2, 3), np.float32))
    for grad in (jax.grad, lambda f, n: jax.jit(jax.grad(f, n))):
        ga, gb = grad(lambda a, b: ooc.sum(a * b), (0, 1))(a, b)
        assert isinstance(ga, ooc.DiskArray) and ga.shape == () and ga.dtype == np.float32
        assert float(ga.to_numpy()) == 6.0 and (gb.to_numpy() == 2.0).all()


def test_comparisons_give_bools_and_no_gradient(tiny_budget):
    X = np.arange(-3, 3, dtype=np.float32)
    x = disk(X)
    for got, want in [(x < 0, X < 0), (0 <= x, X >= 0), (x > 1, X > 1), (x >= x, X >= X)]:
        assert got.dtype == np.bool_
        np.testing.assert_array_equal(got.to_numpy(), want)
    np.testing.assert_array_equal(ooc.equal(x, 0.0).to_numpy(), X == 0)
    loss = lambda x: ooc.sum(ooc.astype(x > 0, np.float32) * x)
    g = jax.jit(jax.grad(loss))(x).to_numpy()
    np.testing.assert_array_equal(g, jax.grad(lambda x: jnp.sum((x > 0) * x))(X))


def test_max_splits_many_float16_ties(tiny_budget):
    """The tie count was kept in float16, where 70000 is inf: a zero gradient. (JAX
    in memory gives 0 here too, for the same reason; the guide says so.)"""
    X = np.ones(70_000, np.float16)
    g = jax.grad(lambda x: ooc.max(x))(disk(X)).to_numpy(force=True)
    assert g.dtype == np.float16
    np.testing.assert_array_equal(g, np.full(X.shape, 1 / 70_000, np.float16))


def test_mean_gradient_of_a_long_float16_array(tiny_budget):
    """1/count was taken in float16, where 70000 is inf: a zero gradient."""
    X = np.ones((70_000, 1), np.float16)
    for axis in (None, 0):
        f = lambda x: ooc.mean(x) if axis is None else ooc.sum(ooc.mean(x, axis=axis))
        g = jax.grad(f)(disk(X)).to_numpy(force=True)
        want = jax.grad(lambda x: jnp.sum(jnp.mean(x, axis=axis)))(X)
        assert g.dtype == np.float16 and g[0, 0] > 0
        np.testing.assert_array_equal(g, want)
