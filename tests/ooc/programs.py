"""Random programs over gradpipe.ooc's namespace, judged against jax.numpy.

A `Program` is a few inputs and a list of `Step`s, each one call written once
against an array namespace ``xp`` (``v3 = xp.concat([v1, v2], axis=0)``). The same
program runs with ``xp = gradpipe.ooc`` on DiskArrays under a small `MemoryBudget`
and with ``xp = jax.numpy`` in memory; `check` compares the values, dtypes and
gradients of its outputs (the values no later step reads), eagerly or under
``jax.jit`` as the program says.

`programs()` is the hypothesis strategy. Each step is drawn from the values
computed so far, and its shape and dtype come from ``jax.eval_shape`` of the
jax.numpy version, so a step the reference refuses is never drawn. Values stay
bounded (the unary functions are bounded or grow slowly; ``log`` and ``sqrt`` see
only positive arguments) so that a difference is a bug, not an overflow.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import HealthCheck, given, note, seed, settings
from hypothesis import strategies as st

from gradpipe import ooc
from gradpipe.ooc.arrays._hijax import type_of
from gradpipe.ooc.planning._resident import RESIDENT_SHARE

BUDGETS = (4096, 8192, 16384, 65536)
FLOATS = ("float32", "float64")
INTS = ("int32", "int64")
MAX_SIZE = 3000  # elements of any one value: programs stay fast under tiny budgets
TOLERANCE = {"float32": 2e-4, "float64": 1e-9}


# ---------------------------------------------------------------- programs


@dataclasses.dataclass(frozen=True)
class Step:
    """One call: ``fn(xp, *values[args])``; `text` is how it reads in a report."""

    text: str
    args: tuple[int, ...]
    fn: Callable


@dataclasses.dataclass(frozen=True)
class Input:
    shape: tuple[int, ...]
    dtype: str
    #: held in memory as a JAX array (a parameter), not on disk: traced under jit
    #: and grad, it enters every out-of-core operation as a resident operand
    resident: bool = False


@dataclasses.dataclass(frozen=True)
class Program:
    inputs: tuple[Input, ...]
    steps: tuple[Step, ...]
    budget: int
    jit_values: bool
    jit_grad: bool
    dtypes: tuple[str, ...] = ()  # of every value, inputs first
    #: the in-memory inputs handed over as NumPy arrays rather than JAX arrays (what
    #: JAX's eager grad passes on to each operation as NumPy values)
    numpy_params: bool = False
    #: the device the passes compute on (`MemoryBudget(device=...)`): None, the
    #: default (the host here); "cpu", JAX's CPU device (a loss's pass then runs
    #: as on an accelerator: each piece sent there, its program compiled there)
    device: str | None = None

    @property
    def precision(self) -> str:
        """float32 where any value of the program is float32 (or complex64): a
        float64 result computed through one is only as good as float32."""
        narrow = {"float32", "complex64"}
        return "float32" if narrow & set(self.dtypes) else "float64"

    @property
    def outputs(self) -> tuple[int, ...]:
        """The values no step reads (inputs included when nothing reads them)."""
        n = len(self.inputs) + len(self.steps)
        read = {a for s in self.steps for a in s.args}
        return tuple(i for i in range(n) if i not in read)

    def run(self, xp, *inputs) -> list:
        values = list(inputs)
        for step in self.steps:
            args = [values[a] for a in step.args]
            values.append(step.fn(_namespace(xp, args), *args))
        return [values[i] for i in self.outputs]

    def __str__(self) -> str:
        lines = [f"budget {self.budget} B, values jit={self.jit_values}, grad jit={self.jit_grad}"]
        if self.device is not None:
            lines[0] += f", device {self.device!r}"
        lines += [
            f"v{i} = input {x.shape} {x.dtype}"
            + (f" ({'NumPy' if self.numpy_params else 'JAX'}, in memory)" if x.resident else "")
            for i, x in enumerate(self.inputs)
        ]
        k = len(self.inputs)
        lines += [
            f"v{k + j} = " + s.text.format(*(f"v{a}" for a in s.args))
            for j, s in enumerate(self.steps)
        ]
        lines.append("outputs: " + ", ".join(f"v{i}" for i in self.outputs))
        return "\n".join(lines)


def _namespace(xp, args):
    """The namespace a step runs in: gradpipe.ooc where a DiskArray is among its
    operands, else jax.numpy (a step on in-memory parameters alone is JAX code)."""
    if xp is ooc and not any(type_of(a) is not None for a in args):
        return jnp
    return xp


def persist(xp, x):
    """A persist point: the value is written to disk and read back (identity in JAX)."""
    return xp.persist(x) if xp is ooc and type_of(x) is not None else x


def sigmoid(xp, x):
    return xp.sigmoid(x) if xp is ooc else jax.nn.sigmoid(x)


# ---------------------------------------------------------------- step builders
#
# A builder takes the hypothesis `draw` and the shapes and dtypes of the values so
# far (a list of jax.ShapeDtypeStruct) and returns a Step, or None when it does not
# apply to them.


def _pick(draw, env, ok=lambda v: True):
    choices = [i for i, v in enumerate(env) if ok(v)]
    return draw(st.sampled_from(choices)) if choices else None


def _kind(v) -> str:
    return "float" if jnp.issubdtype(v.dtype, jnp.floating) else "int"


def _is_float(v) -> bool:
    return _kind(v) == "float"


def _axis(draw, ndim):
    return draw(st.integers(-ndim, ndim - 1))


UNARY = {
    "sin": lambda xp, x: xp.sin(x),
    "cos": lambda xp, x: xp.cos(x),
    "tanh": lambda xp, x: xp.tanh(x),
    "atan": lambda xp, x: xp.atan(x),
    "asinh": lambda xp, x: xp.asinh(x),
    "abs": lambda xp, x: xp.abs(x),
    "negative": lambda xp, x: -x,
    "positive": lambda xp, x: +x,
    "square(tanh)": lambda xp, x: xp.square(xp.tanh(x)),
    "exp(tanh)": lambda xp, x: xp.exp(xp.tanh(x)),
    "expm1(sin)": lambda xp, x: xp.expm1(xp.sin(x)),
    "log1p(square)": lambda xp, x: xp.log1p(xp.square(x)),
    "log(1+abs)": lambda xp, x: xp.log(1.0 + xp.abs(x)),
    "log2(2+cos)": lambda xp, x: xp.log2(2.0 + xp.cos(x)),
    "sqrt(1+x*x)": lambda xp, x: xp.sqrt(1.0 + x * x),
    "sigmoid": sigmoid,
    "clip": lambda xp, x: xp.clip(x, -0.5, 0.7),
    "floor": lambda xp, x: xp.floor(x),
    "round": lambda xp, x: xp.round(x),
    "sign": lambda xp, x: xp.sign(x),
    "reciprocal(1+x*x)": lambda xp, x: xp.reciprocal(1.0 + x * x),
}
UNARY_TEXT = {
    "negative": "-{0}",
    "positive": "+{0}",
    "square(tanh)": "xp.square(xp.tanh({0}))",
    "exp(tanh)": "xp.exp(xp.tanh({0}))",
    "expm1(sin)": "xp.expm1(xp.sin({0}))",
    "log1p(square)": "xp.log1p(xp.square({0}))",
    "log(1+abs)": "xp.log(1.0 + xp.abs({0}))",
    "log2(2+cos)": "xp.log2(2.0 + xp.cos({0}))",
    "sqrt(1+x*x)": "xp.sqrt(1.0 + {0} * {0})",
    "sigmoid": "sigmoid(xp, {0})",
    "clip": "xp.clip({0}, -0.5, 0.7)",
    "reciprocal(1+x*x)": "xp.reciprocal(1.0 + {0} * {0})",
}
INT_UNARY = ("abs", "negative", "positive", "square")


def unary(draw, env):
    i = _pick(draw, env)
    if i is None:
        return None
    if _is_float(env[i]):
        name = draw(st.sampled_from(sorted(UNARY)))
        return Step(UNARY_TEXT.get(name, f"xp.{name}({{0}})"), (i,), UNARY[name])
    name = draw(st.sampled_from(INT_UNARY))
    fns = {
        "abs": lambda xp, x: xp.abs(x),
        "negative": lambda xp, x: -x,
        "positive": lambda xp, x: +x,
        "square": lambda xp, x: xp.square(x),
    }
    return Step(UNARY_TEXT.get(name, f"xp.{name}({{0}})"), (i,), fns[name])


def _broadcasts(a, b) -> bool:
    try:
        np.broadcast_shapes(a.shape, b.shape)
    except ValueError:
        return False
    return math.prod(np.broadcast_shapes(a.shape, b.shape)) <= MAX_SIZE


FLOAT_BINARY = {
    "add": ("{0} + {1}", lambda xp, a, b: a + b),
    "subtract": ("{0} - {1}", lambda xp, a, b: a - b),
    "multiply": ("{0} * {1}", lambda xp, a, b: a * b),
    "divide": ("{0} / (1.0 + {1} * {1})", lambda xp, a, b: a / (1.0 + b * b)),
    "maximum": ("xp.maximum({0}, {1})", lambda xp, a, b: xp.maximum(a, b)),
    "minimum": ("xp.minimum({0}, {1})", lambda xp, a, b: xp.minimum(a, b)),
    "atan2": ("xp.atan2({0}, {1})", lambda xp, a, b: xp.atan2(a, b)),
    "hypot": ("xp.hypot({0}, {1})", lambda xp, a, b: xp.hypot(a, b)),
    "logaddexp": ("xp.logaddexp({0}, {1})", lambda xp, a, b: xp.logaddexp(a, b)),
    "where": ("xp.where({0} > {1}, {0}, {1} * 0.5)", lambda xp, a, b: xp.where(a > b, a, b * 0.5)),
    "copysign": ("xp.copysign({0}, {1})", lambda xp, a, b: xp.copysign(a, b)),
    "pow": (
        "(1.0 + xp.abs({0})) ** xp.tanh({1})",
        lambda xp, a, b: (1.0 + xp.abs(a)) ** xp.tanh(b),
    ),
}
INT_BINARY = {
    "add": ("{0} + {1}", lambda xp, a, b: a + b),
    "subtract": ("{0} - {1}", lambda xp, a, b: a - b),
    "multiply": ("{0} * {1}", lambda xp, a, b: a * b),
    "maximum": ("xp.maximum({0}, {1})", lambda xp, a, b: xp.maximum(a, b)),
    "where": ("xp.where({0} < {1}, {0}, {1})", lambda xp, a, b: xp.where(a < b, a, b)),
    "floor_divide": ("{0} // (xp.abs({1}) + 1)", lambda xp, a, b: a // (xp.abs(b) + 1)),
}


def binary(draw, env):
    i = _pick(draw, env)
    if i is None:
        return None
    j = _pick(draw, env, lambda v: _kind(v) == _kind(env[i]) and _broadcasts(v, env[i]))
    if j is None:
        return None
    table = FLOAT_BINARY if _is_float(env[i]) else INT_BINARY
    text, fn = table[draw(st.sampled_from(sorted(table)))]
    return Step(text, (i, j), fn)


def with_constant(draw, env):
    """An operator between a value and a Python scalar, a NumPy scalar, a 0-d or an
    n-d NumPy array, on either side."""
    i = _pick(draw, env)
    if i is None:
        return None
    v = env[i]
    kind = draw(st.sampled_from(["python", "numpy scalar", "numpy 0-d", "numpy array"]))
    op = draw(st.sampled_from(["+", "-", "*"] + (["/", "**"] if _is_float(v) else [])))
    left = draw(st.booleans()) and op != "**"
    if _is_float(v):
        c = draw(st.sampled_from([0.5, 1.5, 2.0, -0.75]))
        if op == "**":
            c = draw(st.sampled_from([2, 3]))
        dtype = draw(st.sampled_from(FLOATS))
    else:
        c = draw(st.sampled_from([1, 2, -3]))
        dtype = v.dtype.name
    if kind == "python":
        const, shown = c, repr(c)
    elif kind == "numpy scalar":
        const, shown = np.dtype(dtype).type(c), f"np.{dtype}({c!r})"
    elif kind == "numpy 0-d":
        const, shown = np.asarray(c, dtype), f"np.asarray({c!r}, {dtype!r})"
    else:
        ndim = draw(st.integers(0, v.ndim))
        shape = tuple(draw(st.sampled_from([1, d])) if d else 1 for d in v.shape[v.ndim - ndim :])
        seed = draw(st.integers(0, 2**16))
        const = np.random.default_rng(seed).uniform(0.5, 1.5, shape).astype(dtype)
        if not _is_float(v) or op == "**":  # whole powers: a negative base stays real
            const = np.random.default_rng(seed).integers(1, 4, shape).astype(dtype)
        shown = f"const{shape}"
    if op == "/" and left:  # a constant over a value: keep the divisor away from 0
        text = f"{shown} / (1.0 + {{0}} * {{0}})"
        return Step(text, (i,), lambda xp, x: const / (1.0 + x * x))
    if op == "**":
        return Step(f"{{0}} ** {shown}", (i,), lambda xp, x: x**const)
    ops = {
        "+": lambda a, b: a + b,
        "-": lambda a, b: a - b,
        "*": lambda a, b: a * b,
        "/": lambda a, b: a / b,
    }
    f = ops[op]
    if left:
        return Step(f"{shown} {op} {{0}}", (i,), lambda xp, x: f(const, x))
    return Step(f"{{0}} {op} {shown}", (i,), lambda xp, x: f(x, const))


def layout(draw, env):
    i = _pick(draw, env, lambda v: v.ndim >= 1)
    if i is None:
        return None
    v = env[i]
    nd = v.ndim
    what = draw(
        st.sampled_from(
            [
                "permute_dims",
                "reshape",
                "expand_dims",
                "squeeze",
                "flip",
                "moveaxis",
                "roll",
                "broadcast_to",
                "matrix_transpose",
                "tile",
                "repeat",
            ]
        )
    )
    if what == "permute_dims":
        perm = tuple(draw(st.permutations(range(nd))))
        return Step(f"xp.permute_dims({{0}}, {perm})", (i,), lambda xp, x: xp.permute_dims(x, perm))
    if what == "reshape":
        shape = _reshape_target(draw, v.shape)
        return Step(f"xp.reshape({{0}}, {shape})", (i,), lambda xp, x: xp.reshape(x, shape))
    if what == "expand_dims":
        axis = draw(st.integers(-nd - 1, nd))
        return Step(
            f"xp.expand_dims({{0}}, axis={axis})", (i,), lambda xp, x: xp.expand_dims(x, axis=axis)
        )
    if what == "squeeze":
        ones = [a for a, d in enumerate(v.shape) if d == 1]
        if not ones:
            return None
        axis = draw(st.sampled_from(ones))
        return Step(f"xp.squeeze({{0}}, axis={axis})", (i,), lambda xp, x: xp.squeeze(x, axis=axis))
    if what == "flip":
        axis = draw(st.one_of(st.none(), st.integers(-nd, nd - 1)))
        return Step(f"xp.flip({{0}}, axis={axis})", (i,), lambda xp, x: xp.flip(x, axis=axis))
    if what == "moveaxis":
        a, b = _axis(draw, nd), _axis(draw, nd)
        return Step(f"xp.moveaxis({{0}}, {a}, {b})", (i,), lambda xp, x: xp.moveaxis(x, a, b))
    if what == "roll":
        shift = draw(st.integers(-7, 7))
        axis = draw(st.one_of(st.none(), st.integers(-nd, nd - 1)))
        return Step(
            f"xp.roll({{0}}, {shift}, axis={axis})",
            (i,),
            lambda xp, x: xp.roll(x, shift, axis=axis),
        )
    if what == "broadcast_to":
        lead = draw(st.sampled_from([(), (1,), (2,), (3,)]))
        shape = lead + tuple(draw(st.sampled_from([d, 2])) if d == 1 else d for d in v.shape)
        if math.prod(shape) > MAX_SIZE:
            return None
        return Step(
            f"xp.broadcast_to({{0}}, {shape})", (i,), lambda xp, x: xp.broadcast_to(x, shape)
        )
    if what == "matrix_transpose":
        if nd < 2:
            return None
        return Step("xp.matrix_transpose({0})", (i,), lambda xp, x: xp.matrix_transpose(x))
    if what == "tile":
        reps = tuple(draw(st.integers(1, 3)) for _ in range(draw(st.integers(1, nd + 1))))
        if math.prod(reps) * math.prod(v.shape) > MAX_SIZE:
            return None
        return Step(f"xp.tile({{0}}, {reps})", (i,), lambda xp, x: xp.tile(x, reps))
    repeats = draw(st.integers(1, 3))
    axis = draw(st.one_of(st.none(), st.integers(-nd, nd - 1)))
    if repeats * math.prod(v.shape) > MAX_SIZE:
        return None
    return Step(
        f"xp.repeat({{0}}, {repeats}, axis={axis})",
        (i,),
        lambda xp, x: xp.repeat(x, repeats, axis=axis),
    )


def _reshape_target(draw, shape):
    how = draw(st.sampled_from(["flatten", "merge", "split", "insert one"]))
    size = math.prod(shape)
    if how == "flatten" or (len(shape) < 2 and how == "merge"):
        return (size,)
    if how == "merge":
        a = draw(st.integers(0, len(shape) - 2))
        return (*shape[:a], shape[a] * shape[a + 1], *shape[a + 2 :])
    if how == "split":
        a = draw(st.integers(0, len(shape) - 1))
        d = shape[a]
        factors = [f for f in range(1, d + 1) if d % f == 0] if d else [1]
        f = draw(st.sampled_from(factors))
        return (*shape[:a], f, d // f if f else 0, *shape[a + 1 :])
    a = draw(st.integers(0, len(shape)))
    return (*shape[:a], 1, *shape[a:])


def slicing(draw, env):
    i = _pick(draw, env, lambda v: v.ndim >= 1)
    if i is None:
        return None
    v = env[i]
    key = []
    for d in v.shape:
        how = draw(st.sampled_from(["all", "slice", "slice", "index"] if d else ["all", "slice"]))
        if how == "all":
            key.append(slice(None))
        elif how == "index":
            key.append(draw(st.integers(-d, d - 1)))
        else:
            start = draw(st.one_of(st.none(), st.integers(-d - 2, d + 2)))
            stop = draw(st.one_of(st.none(), st.integers(-d - 2, d + 2)))
            step = draw(st.sampled_from([None, 1, 2, 3, -1, -2]))
            key.append(slice(start, stop, step))
    key = tuple(key)
    if draw(st.booleans()) and len(key) > 1:  # trailing full slices left out, or an Ellipsis
        key = key[:-1] if key[-1] == slice(None) else (Ellipsis, *key[1:])
    return Step(f"{{0}}[{_show_key(key)}]", (i,), lambda xp, x: x[key])


def _show_key(key):
    def one(k):
        if k is Ellipsis:
            return "..."
        if isinstance(k, slice):
            parts = ["" if p is None else str(p) for p in (k.start, k.stop, k.step)]
            return ":".join(parts[:2]) + (f":{parts[2]}" if parts[2] else "")
        return str(k)

    return ", ".join(one(k) for k in key) or "()"


def indexing(draw, env):
    i = _pick(draw, env, lambda v: v.ndim >= 1 and v.size > 0)
    if i is None:
        return None
    v = env[i]
    axis = draw(st.integers(0, v.ndim - 1))
    n = v.shape[axis]
    positions = st.lists(st.integers(0, n - 1), min_size=0, max_size=6)
    pattern = draw(st.sampled_from(["any", "runs", "repeats"]))
    if pattern == "any":
        idx = np.asarray(draw(positions), np.int64)
    elif pattern == "runs":  # neighbouring rows, as a month's days: read through
        k = draw(st.integers(1, 4))
        idx = np.asarray([i for s in draw(positions) for i in range(s, min(s + k, n))], np.int64)
    else:  # each row repeated, as a climatology expanded to every day
        idx = np.repeat(np.asarray(draw(positions), np.int64), draw(st.integers(1, 4)))
    how = draw(st.sampled_from(["take", "getitem", "take_along_axis"]))
    if how == "take":
        return Step(
            f"xp.take({{0}}, np.array({idx.tolist()}), axis={axis})",
            (i,),
            lambda xp, x: xp.take(x, idx, axis=axis),
        )
    if how == "getitem":
        key = (slice(None),) * axis + (idx,)
        return Step(
            f"{{0}}[{', '.join([':'] * axis + [f'np.array({idx.tolist()})'])}]",
            (i,),
            lambda xp, x: x[key],
        )
    seed = draw(st.integers(0, 2**16))
    shape = (*v.shape[:axis], draw(st.integers(0, 4)), *v.shape[axis + 1 :])
    along = np.random.default_rng(seed).integers(0, n, shape)
    return Step(
        f"xp.take_along_axis({{0}}, indices{shape}, axis={axis})",
        (i,),
        lambda xp, x: xp.take_along_axis(x, along, axis=axis),
    )


def joining(draw, env):
    i = _pick(draw, env, lambda v: v.ndim >= 1)
    if i is None:
        return None
    v = env[i]
    stack = draw(st.booleans())
    if stack:
        j = _pick(draw, env, lambda u: u.shape == v.shape and _kind(u) == _kind(v))
        axis = draw(st.integers(-v.ndim - 1, v.ndim))
    else:
        axis = _axis(draw, v.ndim)

        def fits(u):
            return (
                u.ndim == v.ndim
                and _kind(u) == _kind(v)
                and all(
                    a == b for k, (a, b) in enumerate(zip(u.shape, v.shape)) if k != axis % v.ndim
                )
            )

        j = _pick(draw, env, fits)
    if 2 * v.size > MAX_SIZE:
        return None
    args = (i, j) if draw(st.booleans()) else (j, i)
    if stack:
        return Step(
            f"xp.stack([{{0}}, {{1}}], axis={axis})",
            args,
            lambda xp, a, b: xp.stack([a, b], axis=axis),
        )
    return Step(
        f"xp.concat([{{0}}, {{1}}], axis={axis})",
        args,
        lambda xp, a, b: xp.concat([a, b], axis=axis),
    )


def _axes(draw, ndim):
    how = draw(st.sampled_from(["none", "one", "several"]))
    if how == "none" or ndim == 0:
        return None
    if how == "one":
        return _axis(draw, ndim)
    return tuple(sorted(draw(st.sets(st.integers(0, ndim - 1), min_size=1, max_size=ndim))))


def reduction(draw, env):
    i = _pick(draw, env)
    if i is None:
        return None
    v = env[i]
    names = ["sum", "mean", "max", "min", "prod", "var", "std"] if _is_float(v) else ["sum", "max"]
    name = draw(st.sampled_from(names))
    axis = _axes(draw, v.ndim)
    keepdims = draw(st.booleans())
    reduced = range(v.ndim) if axis is None else np.atleast_1d(axis)
    if name in ("max", "min") and any(v.shape[a] == 0 for a in reduced):
        return None  # no identity: both refuse
    if name in ("mean", "var", "std") and any(v.shape[a] == 0 for a in reduced):
        return None  # 0/0: NaN in both, and NaN gradients say nothing
    kw = f"axis={axis}, keepdims={keepdims}"
    if name == "prod":  # factors near 1: a product of many stays well conditioned
        return Step(
            f"xp.prod(1.0 + 0.1 * xp.tanh({{0}}), {kw})",
            (i,),
            lambda xp, x: xp.prod(1.0 + 0.1 * xp.tanh(x), axis=axis, keepdims=keepdims),
        )
    if name in ("var", "std"):
        n = math.prod(v.shape[a] for a in reduced)
        correction = draw(st.sampled_from([0, 1])) if n > 1 else 0
        return Step(
            f"xp.{name}({{0}}, {kw}, correction={correction})",
            (i,),
            lambda xp, x: getattr(xp, name)(x, axis=axis, keepdims=keepdims, correction=correction),
        )
    return Step(
        f"xp.{name}({{0}}, {kw})",
        (i,),
        lambda xp, x: getattr(xp, name)(x, axis=axis, keepdims=keepdims),
    )


def cumulative(draw, env):
    i = _pick(draw, env, lambda v: v.ndim >= 1)
    if i is None:
        return None
    v = env[i]
    axis = _axis(draw, v.ndim) if v.ndim > 1 or draw(st.booleans()) else None
    initial = draw(st.booleans())
    if _is_float(v) and draw(st.booleans()):
        return Step(
            "xp.cumulative_prod(1.0 + 0.1 * xp.tanh({0}), "
            + f"axis={axis}, include_initial={initial})",
            (i,),
            lambda xp, x: xp.cumulative_prod(
                1.0 + 0.1 * xp.tanh(x), axis=axis, include_initial=initial
            ),
        )
    return Step(
        f"xp.cumulative_sum({{0}}, axis={axis}, include_initial={initial})",
        (i,),
        lambda xp, x: xp.cumulative_sum(x, axis=axis, include_initial=initial),
    )


def contraction(draw, env):
    i = _pick(draw, env, lambda v: v.ndim >= 1 and _is_float(v))
    if i is None:
        return None
    v = env[i]
    how = draw(st.sampled_from(["matmul", "gram", "tensordot", "vecdot", "outer"]))
    if how == "gram":  # a value against itself: one input read twice
        if v.ndim < 2 or v.shape[-2] ** 2 * math.prod(v.shape[:-2]) > MAX_SIZE:
            return None
        return Step(
            "{0} @ xp.matrix_transpose({0})", (i,), lambda xp, x: x @ xp.matrix_transpose(x)
        )
    if how == "matmul":
        k = v.shape[-1]
        j = _pick(
            draw,
            env,
            lambda u: (
                _is_float(u)
                and u.ndim >= 1
                and u.shape[-2 if u.ndim >= 2 else 0] == k
                and _matmul_size(v.shape, u.shape) is not None
            ),
        )
        if j is None:
            return None
        return Step("{0} @ {1}", (i, j), lambda xp, a, b: a @ b)
    if how == "vecdot":
        j = _pick(draw, env, lambda u: _is_float(u) and u.ndim >= 1 and _broadcasts(u, v))
        if j is None:
            return None
        return Step("xp.vecdot({0}, {1})", (i, j), lambda xp, a, b: xp.vecdot(a, b))
    if how == "outer":
        j = _pick(draw, env, lambda u: _is_float(u) and u.ndim == 1)
        if v.ndim != 1 or j is None or v.size * env[j].size > MAX_SIZE:
            return None
        return Step("xp.linalg.outer({0}, {1})", (i, j), lambda xp, a, b: xp.linalg.outer(a, b))
    # tensordot over the last axis of one and the first of another
    j = _pick(draw, env, lambda u: _is_float(u) and u.ndim >= 1 and u.shape[0] == v.shape[-1])
    if (
        j is None
        or v.size // max(v.shape[-1], 1) * env[j].size // max(env[j].shape[0], 1) > MAX_SIZE
    ):
        return None
    return Step(
        "xp.tensordot({0}, {1}, axes=1)", (i, j), lambda xp, a, b: xp.tensordot(a, b, axes=1)
    )


def _matmul_size(a, b):
    try:
        out = jax.eval_shape(
            jnp.matmul, jax.ShapeDtypeStruct(a, "f4"), jax.ShapeDtypeStruct(b, "f4")
        )
    except (TypeError, ValueError):
        return None
    return math.prod(out.shape) if math.prod(out.shape) <= MAX_SIZE else None


def cast(draw, env):
    i = _pick(draw, env)
    if i is None:
        return None
    to = draw(st.sampled_from(FLOATS + INTS))
    if to in INTS and _is_float(env[i]):  # through a bounded value: no overflow
        return Step(
            f"xp.astype(xp.round(4.0 * xp.tanh({{0}})), xp.{to})",
            (i,),
            lambda xp, x: xp.astype(xp.round(4.0 * xp.tanh(x)), getattr(xp, to)),
        )
    return Step(f"xp.astype({{0}}, xp.{to})", (i,), lambda xp, x: xp.astype(x, getattr(xp, to)))


def sorting(draw, env):
    i = _pick(draw, env, lambda v: v.ndim >= 1)
    if i is None:
        return None
    v = env[i]
    axis = _axis(draw, v.ndim)
    descending = draw(st.booleans())
    how = draw(st.sampled_from(["sort", "argsort", "argmax", "argmin"]))
    if how == "sort":
        return Step(
            f"xp.sort({{0}}, axis={axis}, descending={descending})",
            (i,),
            lambda xp, x: xp.sort(x, axis=axis, descending=descending),
        )
    if how == "argsort":
        return Step(
            f"xp.argsort({{0}}, axis={axis}, descending={descending})",
            (i,),
            lambda xp, x: xp.argsort(x, axis=axis, descending=descending),
        )
    if v.shape[axis] == 0:
        return None
    keepdims = draw(st.booleans())
    return Step(
        f"xp.{how}({{0}}, axis={axis}, keepdims={keepdims})",
        (i,),
        lambda xp, x: getattr(xp, how)(x, axis=axis, keepdims=keepdims),
    )


def spectral(draw, env):
    """fft and linalg where they apply to any shape: parts of an FFT, norms, traces."""
    i = _pick(draw, env, lambda v: v.ndim >= 1 and _is_float(v))
    if i is None:
        return None
    v = env[i]
    how = draw(st.sampled_from(["fft", "rfft", "vector_norm", "matrix_norm", "trace", "diagonal"]))
    if how in ("fft", "rfft"):
        if v.shape[-1] == 0:
            return None
        part = draw(st.sampled_from(["real", "imag"]))
        return Step(
            f"xp.{part}(xp.fft.{how}({{0}}))",
            (i,),
            lambda xp, x: getattr(xp, part)(getattr(xp.fft, how)(x)),
        )
    if how == "vector_norm":
        axis = _axes(draw, v.ndim)
        keepdims = draw(st.booleans())
        ord_ = draw(st.sampled_from([1, 2]))
        if v.size == 0:
            return None  # the gradient of a norm at 0 is undefined
        return Step(
            f"xp.linalg.vector_norm({{0}}, axis={axis}, keepdims={keepdims}, ord={ord_})",
            (i,),
            lambda xp, x: xp.linalg.vector_norm(x, axis=axis, keepdims=keepdims, ord=ord_),
        )
    if v.ndim < 2:
        return None
    if how == "matrix_norm":
        if v.size == 0:
            return None
        return Step("xp.linalg.matrix_norm({0})", (i,), lambda xp, x: xp.linalg.matrix_norm(x))
    offset = draw(st.integers(-2, 2))
    return Step(
        f"xp.linalg.{how}({{0}}, offset={offset})",
        (i,),
        lambda xp, x: getattr(xp.linalg, how)(x, offset=offset),
    )


def persisting(draw, env):
    i = _pick(draw, env, lambda v: v.ndim >= 1)
    if i is None:
        return None
    return Step("persist(xp, {0})", (i,), persist)


BUILDERS = {
    unary: 4,
    binary: 4,
    with_constant: 3,
    layout: 3,
    slicing: 2,
    indexing: 2,
    joining: 2,
    reduction: 3,
    cumulative: 1,
    contraction: 2,
    cast: 1,
    sorting: 1,
    spectral: 1,
    persisting: 1,
}


# ---------------------------------------------------------------- the strategy


def _shape_of(step: Step, env):
    with jax.enable_x64(True):
        return jax.eval_shape(lambda *a: step.fn(jnp, *a), *(env[a] for a in step.args))


@st.composite
def programs(draw, max_steps: int = 8) -> Program:
    """A random program: 1-3 inputs, then up to `max_steps` steps over them."""
    dims = st.sampled_from([0, 1, 1, 2, 3, 5, 7, 12, 17, 29])
    first = tuple(draw(st.lists(dims, min_size=1, max_size=3)))
    if math.prod(first) > MAX_SIZE:
        first = tuple(min(d, 7) for d in first)
    kinds = draw(st.sampled_from([FLOATS] * 5 + [INTS]))
    inputs = [Input(first, draw(st.sampled_from(kinds)))]
    for _ in range(draw(st.integers(0, 2))):
        # later inputs broadcast against the first: trailing axes, some set to 1
        tail = first[len(first) - draw(st.integers(0, len(first))) :]
        shape = tuple(draw(st.sampled_from([1, d])) for d in tail)
        resident = bool(shape) and draw(st.booleans())
        inputs.append(Input(shape, draw(st.sampled_from(kinds)), resident))
    env = [jax.ShapeDtypeStruct(x.shape, x.dtype) for x in inputs]
    steps = []
    builders = sorted(BUILDERS, key=lambda b: b.__name__)
    weights = [BUILDERS[b] for b in builders]
    pool = [b for b, w in zip(builders, weights) for _ in range(w)]
    for _ in range(draw(st.integers(1, max_steps))):
        step = draw(st.sampled_from(pool))(draw, env)
        if step is None:
            continue
        try:
            out = _shape_of(step, env)
        except (TypeError, ValueError, IndexError):
            continue  # the reference refuses it: not a program
        if not isinstance(out, jax.ShapeDtypeStruct) or math.prod(out.shape) > MAX_SIZE:
            continue
        steps.append(step)
        env.append(out)
    budget = draw(st.sampled_from(BUDGETS))
    # in-memory inputs above their share of the budget (with their gradients) are
    # refused by design (`test_jax_parameters.py` checks it): such a program's are
    # on disk instead
    held = sum(2 * math.prod(x.shape) * np.dtype(x.dtype).itemsize for x in inputs if x.resident)
    if held > RESIDENT_SHARE * budget:
        inputs = [dataclasses.replace(x, resident=False) for x in inputs]
    return Program(
        tuple(inputs),
        tuple(steps),
        budget=budget,
        jit_values=draw(st.booleans()),
        jit_grad=draw(st.booleans()),
        dtypes=tuple(v.dtype.name for v in env),
        numpy_params=any(x.resident for x in inputs) and draw(st.booleans()),
        device=draw(st.sampled_from([None, "cpu"])),
    )


# ---------------------------------------------------------------- the judge


def _draw_input(rng, x: Input) -> np.ndarray:
    if x.dtype in INTS:
        return rng.integers(-5, 6, x.shape).astype(x.dtype)
    return rng.standard_normal(x.shape).astype(x.dtype)


def _numpy(x) -> np.ndarray:
    return x.to_numpy(force=True) if type_of(x) is not None else np.asarray(x)


def _close(got, want, what: str, precision: str = "float64") -> None:
    got, want = _numpy(got), np.asarray(want)
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype}, jax.numpy gives {want.dtype}"
    assert got.shape == want.shape, f"{what}: shape {got.shape}, jax.numpy gives {want.shape}"
    if want.dtype.kind in "fc":
        # relative to the largest magnitude: reductions and products sum in another order
        narrow = want.dtype in (np.float32, np.complex64)
        tol = TOLERANCE["float32" if narrow else precision]
        finite = np.abs(want[np.isfinite(want)])
        scale = 1.0 + (float(finite.max()) if finite.size else 0.0)
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol * scale, err_msg=what)
    else:
        np.testing.assert_array_equal(got, want, err_msg=what)


def _loss(xp, run, weights: Sequence, inputs: Sequence, disk_weights: Sequence = ()):
    """Sum of each float output times its fixed weights: every output's gradient.
    An output on disk is weighted by ``disk_weights`` (the weights as DiskArrays)."""
    total = 0.0
    disk_weights = disk_weights or weights
    for out, w, dw in zip(run(xp, *inputs), weights, disk_weights):
        if w is None:
            continue
        if xp is ooc and type_of(out) is not None:
            total = total + ooc.sum(ooc.multiply(out, dw))
        else:
            total = total + jnp.sum(out * w)
    return total


def check(program: Program, seed: int = 0) -> None:
    """Run `program` on gradpipe.ooc and on jax.numpy and compare everything."""
    rng = np.random.default_rng(seed)
    arrays = [_draw_input(rng, x) for x in program.inputs]
    compare(
        program.run,
        arrays,
        budget=program.budget,
        jit_values=program.jit_values,
        jit_grad=program.jit_grad,
        precision=program.precision,
        names=[f"v{i}" for i in program.outputs],
        seed=seed,
        resident=[x.resident for x in program.inputs],
        numpy_params=program.numpy_params,
        device=program.device,
    )


def compare(
    run: Callable,
    arrays: Sequence[np.ndarray],
    *,
    budget: int,
    jit_values: bool,
    jit_grad: bool,
    precision: str = "float64",
    names: Sequence[str] | None = None,
    seed: int = 0,
    resident: Sequence[bool] = (),
    numpy_params: bool = False,
    device: str | None = None,
) -> None:
    """``run(xp, *arrays)`` (a list of outputs) with ``xp = gradpipe.ooc`` on
    DiskArrays under `budget` against ``xp = jax.numpy`` in memory, x64 on: the
    outputs' values and dtypes, then the value and gradient of a weighted sum of the
    float outputs with respect to every float input. Arrays marked ``resident``
    are passed as JAX arrays (parameters held in memory), not DiskArrays; as the
    NumPy arrays themselves where ``numpy_params``. ``device``: the budget's
    (`MemoryBudget(device=...)`)."""
    rng = np.random.default_rng(seed)
    floats = tuple(i for i, a in enumerate(arrays) if a.dtype.kind == "f")
    with jax.enable_x64(True):
        want = run(jnp, *arrays)
        names = names or [f"output {k}" for k in range(len(want))]
        weights = [
            rng.standard_normal(np.shape(o)).astype(o.dtype)
            if jnp.issubdtype(o.dtype, jnp.floating)
            else None
            for o in want
        ]

        def reference(*xs):
            return _loss(jnp, run, weights, xs)

        want_grad = jax.value_and_grad(reference, argnums=floats)(*arrays) if floats else None
        with ooc.MemoryBudget(budget, device=device):
            held = list(resident) + [False] * (len(arrays) - len(resident))
            param = (lambda a: a) if numpy_params else jnp.asarray
            disk = [param(a) if r else ooc.DiskArray.from_numpy(a) for a, r in zip(arrays, held)]
            values = lambda *xs: run(ooc, *xs)
            got = (jax.jit(values) if jit_values else values)(*disk)
            for name, g, w in zip(names, got, want):
                _close(g, w, f"output {name}", precision)
            if not floats:
                return
            disk_weights = [
                ooc.DiskArray.from_numpy(w) if w is not None and w.ndim else w for w in weights
            ]

            def loss(ws, *xs):
                return _loss(ooc, run, weights, xs, ws)

            grad = jax.value_and_grad(loss, argnums=tuple(i + 1 for i in floats))
            if jit_grad:
                grad = jax.jit(grad)
            value, grads = grad(disk_weights, *disk)
    _close(value, want_grad[0], "loss", precision)
    for i, g, r in zip(floats, grads, want_grad[1]):
        _close(g, r, f"gradient of input {i}", precision)


# ---------------------------------------------------------------- running a shard


def run_shard(judge: Callable, strategies: Sequence, seed_value: int, examples: int) -> None:
    """``judge(*drawn)`` on ``examples`` draws of ``strategies``, seeded by ``seed_value``,
    with the settings every random-program test runs under: no deadline and no
    example database (a run is repeated by its seed), every health check off, and the
    failing program printed (`note`) with hypothesis's blob to reproduce it."""

    @seed(seed_value)
    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        derandomize=False,
        suppress_health_check=list(HealthCheck),
        print_blob=True,
    )
    @given(st.tuples(*strategies))
    def run(drawn):
        note(str(drawn[0]))
        judge(*drawn)

    run()
