"""Random programs under x64 off: JAX parameters of every dtype with DiskArrays of every dtype.

A program's inputs are DiskArrays (bool, ints, floats of every width) and
parameters: JAX arrays (float16, bfloat16, float32, int32, bool; 0-d or n-d),
Python numbers written into the program, and Python numbers passed as arguments
(weakly typed once JAX traces them). Its steps mix them: arithmetic, `clip` with
bounds of every kind, `where`, comparisons, `maximum`, casts, `full_like`, smooth
functions, reductions, products, layout and slicing (`programs.py`'s builders).

Each program runs in three worlds with ``jax_enable_x64`` off:

- **gradpipe.ooc** on DiskArrays under a small budget, eagerly or under ``jax.jit``;
- **the rule** (the out-of-core guide, "Dtypes"): NumPy on the data, a parameter
  entering as NumPy sees it (a weak one as a Python number), a 0-d result
  becoming a JAX value as ``jnp.asarray`` converts it; steps on parameters alone are
  ``jax.numpy``'s. It gives every result's dtype and, at the same precision, its value;
- **jax.numpy** in memory, whose values and gradients gradpipe.ooc must reach within
  the precision of the narrowest float of the program.

Steps whose jump depends on a value (comparisons, `clip`, `maximum`, casts to ints,
the gradient of a maximum) only read values that the rule and jax.numpy compute
exactly alike (small dyadic data and parameters keep many so), and a step is drawn
only where the rule and jax.numpy agree: a difference is then gradpipe.ooc's. A
bfloat16 parameter that meets a DiskArray is refused with a `TypeError` (its
kernels compute in NumPy's dtypes), which the program then expects.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import strategies as st
from programs import Step, layout, slicing

from gradpipe import ooc
from gradpipe.ooc.arrays._hijax import type_of

DISK_DTYPES = ("bool", "int8", "uint8", "int16", "int32", "int64", "float16", "float32", "float64")
PARAM_DTYPES = ("float16", "bfloat16", "float32", "int32", "bool")
BUDGETS = (4096, 16384, 65536)
MAX_SIZE = 400  # elements of any one value
FLOAT_PARAMS = (-1.5, -0.5, 0.25, 0.75, 1.25, 2.0)  # dyadic: exact in every float dtype
INT_PARAMS = (-2, -1, 1, 2, 3)
#: Tolerance of gradpipe.ooc against jax.numpy, by the narrowest float of the program
#: (jax.numpy computes float64 data in float32, and mixed int/float16 steps in float16).
LOOSE = {"float16": 3e-2, "float32": 2e-4}
#: Tolerance against the rule (the same dtypes; sums add in another order).
TIGHT = {"float16": 1e-2, "float32": 2e-5, "float64": 1e-10}


# ---------------------------------------------------------------- programs


@dataclasses.dataclass(frozen=True)
class Param:
    """A parameter: ``"python"`` (a number written into the program), ``"weak"`` (a
    Python number passed as an argument: weakly typed when traced) or ``"jax"``."""

    kind: str
    value: Any  # a Python number, or a NumPy array for a JAX one
    dtype: str = ""

    def jax(self) -> Any:
        return jnp.asarray(self.value, self.dtype) if self.kind == "jax" else self.value

    @property
    def float(self) -> bool:
        """Differentiable: a float JAX parameter, or a float passed as an argument."""
        if self.kind == "jax":
            return jnp.issubdtype(self.dtype, jnp.floating)
        return self.kind == "weak" and isinstance(self.value, float)

    def __str__(self) -> str:
        if self.kind == "jax":
            return f"jnp.asarray({self.value.tolist()!r}, {self.dtype})"
        return f"{self.value!r} ({'an argument' if self.kind == 'weak' else 'a constant'})"


@dataclasses.dataclass(frozen=True, eq=False)
class X64Program:
    data: tuple[np.ndarray, ...]  # the DiskArrays' data
    params: tuple[Param, ...]
    steps: tuple[Step, ...]
    budget: int
    jit_values: bool
    jit_grad: bool
    precision: str = "float32"  # the narrowest float jax.numpy computes in
    refused: bool = False  # the last step mixes a bfloat16 value with a DiskArray

    @property
    def outputs(self) -> tuple[int, ...]:
        """The values no step reads (the inputs' data included, not the parameters)."""
        read = {a for s in self.steps for a in s.args}
        n, first = len(self.data), len(self.data) + len(self.params)
        candidates = [*range(n), *range(first, first + len(self.steps))]
        return tuple(i for i in candidates if i not in read)

    def run(self, world: str, values: Sequence[Any]) -> list:
        env = list(values)
        for step in self.steps:
            env.append(run_step(world, step, [env[a] for a in step.args]))
        return [env[i] for i in self.outputs]

    def __str__(self) -> str:
        lines = [f"budget {self.budget} B, values jit={self.jit_values}, grad jit={self.jit_grad}"]
        lines += [f"v{i} = DiskArray {d.shape} {d.dtype}" for i, d in enumerate(self.data)]
        k = len(self.data)
        lines += [f"v{k + i} = {p}" for i, p in enumerate(self.params)]
        k += len(self.params)
        lines += [
            f"v{k + j} = " + s.text.format(*(f"v{a}" for a in s.args))
            for j, s in enumerate(self.steps)
        ]
        lines.append("outputs: " + ", ".join(f"v{i}" for i in self.outputs))
        if self.refused:
            lines.append("expected: the last step is refused (a bfloat16 value with a DiskArray)")
        return "\n".join(lines)


# ---------------------------------------------------------------- the three worlds


def _on_disk(x: Any) -> bool:
    return type_of(x) is not None or isinstance(x, np.ndarray)


def _as_numpy_sees(x: Any) -> Any:
    """An in-memory operand as NumPy meets it beside a DiskArray: a weakly typed JAX
    value as a Python number of its kind, any other JAX value with its dtype."""
    if isinstance(x, (bool, int, float, np.ndarray)):
        return x
    return x.item() if x.weak_type else np.asarray(x)


def run_step(world: str, step: Step, args: list) -> Any:
    """One step in ``world``: ``"ooc"``, ``"rule"`` or ``"jnp"``. A step with no
    DiskArray among its operands is ``jax.numpy``'s in every world."""
    if world == "jnp" or not any(_on_disk(a) for a in args):
        return step.fn(jnp, *args)
    if world == "ooc":
        return step.fn(ooc, *args)
    with np.errstate(all="ignore"):
        out = np.asarray(step.fn(np, *[_as_numpy_sees(a) for a in args]))
    if out.ndim:
        return out
    return jnp.asarray(out, jax.dtypes.canonicalize_dtype(out.dtype))  # a 0-d result


def sum_(xp, x, axis=None, keepdims=False):
    """``xp.sum``; NumPy is given the dtype gradpipe.ooc documents for the sum of
    bools and ints with x64 off (jax.numpy's: int32, uint32 unsigned; 64-bit stays)."""
    if xp is not np:
        return xp.sum(x, axis=axis, keepdims=keepdims)
    dtype = x.dtype
    if dtype.kind in "bi" and dtype.itemsize < 8:
        dtype = np.dtype(np.int32)
    elif dtype.kind == "u" and dtype.itemsize < 8:
        dtype = np.dtype(np.uint32)
    return np.sum(x, axis=axis, keepdims=keepdims, dtype=dtype)


# ---------------------------------------------------------------- step builders
#
# A builder takes `draw` and the values so far (`Known`: the rule's value, whether it
# is exact) and returns a Step, or None. `exact` values may meet a jump.


@dataclasses.dataclass(frozen=True)
class Adds(Step):
    """A step that adds values up (a sum, a mean, a product): gradpipe.ooc adds in
    another order than NumPy, so its result is exact only where no order rounds."""

    exact: bool = True


@dataclasses.dataclass(frozen=True)
class Fill(Step):
    """``full_like``: its fill value is converted to the array's dtype in JAX, so a
    bfloat16 one is not refused."""


@dataclasses.dataclass
class Known:
    rule: Any  # the value in the rule's world
    jnp: Any  # the value in jax.numpy's world
    exact: bool  # equal in both worlds, element by element

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(np.shape(self.rule))

    @property
    def dtype(self) -> np.dtype:
        return _dtype(self.rule)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)


def _dtype(x: Any) -> np.dtype:
    return np.dtype(x.dtype) if hasattr(x, "dtype") else np.asarray(x).dtype


def _pick(draw, env, ok=lambda v: True):
    choices = [i for i, v in enumerate(env) if ok(v)]
    return draw(st.sampled_from(choices)) if choices else None


def _broadcast(a: Known, b: Known) -> bool:
    try:
        return math.prod(np.broadcast_shapes(a.shape, b.shape)) <= MAX_SIZE
    except ValueError:
        return False


def _kind(v: Known) -> str:
    return _dtype(v.rule).kind


MIXED = {
    "add": ("{0} + {1}", lambda xp, a, b: a + b),
    "subtract": ("{0} - {1}", lambda xp, a, b: a - b),
    "multiply": ("{0} * {1}", lambda xp, a, b: a * b),
    "maximum": ("xp.maximum({0}, {1})", lambda xp, a, b: xp.maximum(a, b)),
    "minimum": ("xp.minimum({1}, {0})", lambda xp, a, b: xp.minimum(b, a)),
    "greater": ("{0} > {1}", lambda xp, a, b: a > b),
    "equal": ("{0} == {1}", lambda xp, a, b: a == b),
}
JUMPS = {"maximum", "minimum", "greater", "equal"}


def mixed(draw, env):
    """An operator between two values (a DiskArray and a parameter, most often)."""
    name = draw(st.sampled_from(sorted(MIXED)))
    exact = (lambda v: v.exact) if name in JUMPS else (lambda v: True)
    i = _pick(draw, env, lambda v: exact(v) and v.ndim > 0)
    if i is None:
        return None
    j = _pick(draw, env, lambda v: exact(v) and _broadcast(v, env[i]))
    args = (i, j) if draw(st.booleans()) else (j, i)
    text, fn = MIXED[name]
    return Step(text, args, fn)


def divide(draw, env):
    """A value over a nonzero float parameter or a positive denominator."""
    i = _pick(draw, env, lambda v: v.ndim > 0)
    if i is None:
        return None
    j = _pick(draw, env, lambda v: _kind(v) == "f" and v.ndim == 0 and _nonzero(v))
    if j is None:
        return Step("{0} / (2.0 + {0} * {0})", (i,), lambda xp, x: x / (2.0 + x * x))
    return Step("{0} / {1}", (i, j), lambda xp, a, b: a / b)


def _nonzero(v: Known) -> bool:
    return bool(np.all(np.asarray(v.rule, np.float64) != 0))


def clip(draw, env):
    """`clip` of an exact value by bounds of every kind: values (DiskArrays,
    parameters), Python numbers, None; of the value's kind or another."""
    i = _pick(draw, env, lambda v: v.exact and v.ndim > 0)
    if i is None:
        return None
    args, spec, shown = [i], [], []
    for _ in range(2):
        how = draw(st.sampled_from(["value", "value", "number", "none"]))
        j = (
            _pick(draw, env, lambda v: v.exact and _broadcast(v, env[i]))
            if how == "value"
            else None
        )
        if j is not None:
            spec.append("arg")
            shown.append(f"{{{len(args)}}}")
            args.append(j)
        elif how == "number":
            c = draw(st.sampled_from(FLOAT_PARAMS + INT_PARAMS))
            spec.append(c)
            shown.append(repr(c))
        else:
            spec.append(None)
            shown.append("None")
    if spec == [None, None]:
        return None

    def fn(xp, x, *bounds):
        it = iter(bounds)
        lo, hi = [next(it) if s == "arg" else s for s in spec]
        return xp.clip(x, lo, hi)

    return Step(f"xp.clip({{0}}, {shown[0]}, {shown[1]})", tuple(args), fn)


def where(draw, env):
    """``xp.where(cond, a, b)``: a bool value (a comparison of exact ones, bool data
    or a bool parameter: equal in every world) picks between any two."""
    i = _pick(draw, env, lambda v: _kind(v) == "b" and v.ndim > 0)
    if i is None:
        return None
    j = _pick(draw, env, lambda v: _broadcast(v, env[i]))
    k = _pick(draw, env, lambda v: _broadcast(v, env[i]))
    return Step("xp.where({0}, {1}, {2})", (i, j, k), lambda xp, c, a, b: xp.where(c, a, b))


SMOOTH = {
    "tanh": lambda xp, x: xp.tanh(x),
    "sin": lambda xp, x: xp.sin(x),
    "exp(tanh)": lambda xp, x: xp.exp(xp.tanh(x)),
    "negative": lambda xp, x: -x,
    "square": lambda xp, x: x * x,
}


def unary(draw, env):
    """A smooth function of any value; ``abs`` of an exact one (its slope jumps at 0)."""
    name = draw(st.sampled_from([*sorted(SMOOTH), "abs"]))
    i = _pick(draw, env, (lambda v: v.exact) if name == "abs" else (lambda v: True))
    if i is None:
        return None
    if name == "abs":
        return Step("xp.abs({0})", (i,), lambda xp, x: xp.abs(x))
    return Step(f"{name}({{0}})", (i,), SMOOTH[name])


def cast(draw, env):
    """``astype`` to any dtype: of an exact value where it would truncate."""
    to = draw(st.sampled_from(DISK_DTYPES))
    exact = np.dtype(to).kind in "biu"
    i = _pick(draw, env, lambda v: (v.exact or not exact) and v.ndim > 0)
    if i is None:
        return None
    return Step(f"xp.astype({{0}}, np.{to})", (i,), lambda xp, x: xp.astype(x, np.dtype(to)))


def reduction(draw, env):
    """``sum`` (in the documented dtype), ``mean``, or ``max`` of an exact value (its
    gradient goes to the ties), over all axes, one or several."""
    name = draw(st.sampled_from(["sum", "mean", "max"]))
    i = _pick(draw, env, lambda v: v.ndim > 0 and v.size > 0 and (v.exact or name != "max"))
    if i is None:
        return None
    nd = env[i].ndim
    axis = draw(
        st.one_of(
            st.none(),
            st.integers(-nd, nd - 1),
            st.sets(st.integers(0, nd - 1), min_size=1).map(lambda s: tuple(sorted(s))),
        )
    )
    keepdims = draw(st.booleans())
    kw = f"axis={axis}, keepdims={keepdims}"
    if name == "sum":
        return Adds(
            f"xp.sum({{0}}, {kw})", (i,), lambda xp, x: sum_(xp, x, axis=axis, keepdims=keepdims)
        )
    return (Step if name == "max" else Adds)(
        f"xp.{name}({{0}}, {kw})",
        (i,),
        lambda xp, x: getattr(xp, name)(x, axis=axis, keepdims=keepdims),
    )


def product(draw, env):
    """``a @ b`` with ``b`` a vector (a parameter, most often) or a matrix."""
    i = _pick(draw, env, lambda v: v.ndim >= 1)
    if i is None:
        return None
    k = env[i].shape[-1]
    j = _pick(draw, env, lambda v: v.ndim in (1, 2) and v.shape[0] == k and v.size <= MAX_SIZE)
    if j is None:
        return None
    return Adds("{0} @ {1}", (i, j), lambda xp, a, b: a @ b, exact=False)


def full_like(draw, env):
    """``full_like(x, c)``: ``c`` a 0-d parameter (traced under jit and grad)."""
    i = _pick(draw, env, lambda v: v.ndim > 0)
    j = _pick(draw, env, lambda v: v.ndim == 0)
    if i is None or j is None:
        return None
    x, c = env[i], env[j]
    if isinstance(c.rule, float) and x.dtype.kind in "biu":
        return None  # refused by gradpipe.ooc (a fraction into ints); truncated by NumPy
    return Fill("xp.full_like({0}, {1})", (i, j), lambda xp, x, c: xp.full_like(x, c))


BUILDERS = {
    mixed: 6,
    divide: 1,
    clip: 3,
    where: 2,
    unary: 3,
    cast: 2,
    reduction: 3,
    product: 1,
    full_like: 1,
    layout: 1,
    slicing: 1,
}


# ---------------------------------------------------------------- the strategy


def _data(rng, shape, dtype: str, dyadic: bool) -> np.ndarray:
    kind = np.dtype(dtype).kind
    if kind == "b":
        return rng.random(shape) < 0.5
    if kind == "u":
        return rng.integers(0, 9, shape).astype(dtype)
    if kind == "i":
        return rng.integers(-4, 5, shape).astype(dtype)
    if dyadic:  # exact in every float dtype: comparisons agree everywhere
        return (rng.integers(-24, 25, shape) / 8).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


@st.composite
def parameters(draw, first: tuple[int, ...], rng) -> Param:
    kind = draw(st.sampled_from(["jax", "jax", "jax n-d", "weak", "python"]))
    if kind in ("weak", "python"):
        python = draw(st.sampled_from([float, float, int, bool]))
        values = {float: FLOAT_PARAMS, int: INT_PARAMS, bool: (True, False)}[python]
        return Param(kind, draw(st.sampled_from(values)))
    dtype = draw(st.sampled_from(PARAM_DTYPES))
    shape: tuple[int, ...] = ()
    if kind == "jax n-d" and first:  # broadcasts against the data: trailing axes, some 1
        tail = first[len(first) - draw(st.integers(1, len(first))) :]
        shape = tuple(draw(st.sampled_from([1, d])) for d in tail)
        if math.prod(shape) > 32:  # in memory: within the budget's share for them
            shape = (1,) * len(shape)
    pool = {"b": (True, False), "i": INT_PARAMS}.get(jnp.dtype(dtype).kind, FLOAT_PARAMS)
    value = (
        rng.choice(np.asarray(pool), shape) if shape else np.asarray(draw(st.sampled_from(pool)))
    )
    return Param("jax", value, dtype)


def _shape_ok(rule: Any) -> bool:
    """Whether the rule's value is small enough: an n-d JAX value (in memory, then a
    resident operand of gradpipe.ooc) within the budget's share for them."""
    if not isinstance(rule, (np.ndarray, jax.Array)):
        return False
    size = math.prod(np.shape(rule))
    if isinstance(rule, jax.Array) and np.ndim(rule):
        return size <= 32
    return size <= MAX_SIZE


def _as_float64(x: Any) -> np.ndarray:
    return np.asarray(np.asarray(x).astype(np.float64) if _dtype(x).kind != "c" else x)


def _narrow(*values: Any) -> bool:
    return any(_dtype(v) in (np.float16, jnp.bfloat16) for v in values)


def _agree(rule: Any, ref: Any, narrow: bool) -> bool:
    """Whether the rule's value and jax.numpy's agree (ints exactly, floats within
    the tolerance of the narrower float), finite and of a tame size."""
    a, b = _as_float64(rule), _as_float64(ref)
    if a.shape != b.shape or not (np.isfinite(a).all() and np.isfinite(b).all()):
        return False
    if np.abs(a).max(initial=0) > 1e4:
        return False
    if _dtype(rule).kind in "biu" and _dtype(ref).kind in "biu":
        return bool((a == b).all())
    tol = LOOSE["float16" if narrow else "float32"]
    return bool(np.allclose(a, b, rtol=tol, atol=tol * (1 + np.abs(b).max(initial=0))))


def _sums_exactly(x: Any) -> bool:
    """Whether any order of adding ``x`` up in float32 or wider is exact (multiples of
    1/256 whose magnitudes add up to less than 2**24 of them)."""
    a = _as_float64(x) * 256
    return bool((a == np.round(a)).all() and np.abs(a).sum() < 2**24)


def _refused(args: Sequence[Known]) -> bool:
    """A bfloat16 value meets a DiskArray: gradpipe.ooc refuses it."""
    return any(isinstance(v.rule, np.ndarray) for v in args) and any(
        not isinstance(v.rule, np.ndarray) and _dtype(v.rule) == jnp.bfloat16 for v in args
    )


def _try(step: Step, env: list[Known]) -> Known | None:
    """The step's value in the rule's world and in jax.numpy's, if both compute it
    alike (else None: not a program this test judges)."""
    args = [env[a] for a in step.args]
    if all(isinstance(v.rule, (bool, int, float)) for v in args):
        return None  # Python arithmetic, in every world
    try:
        rule = run_step("rule", step, [v.rule for v in args])
        ref = run_step("jnp", step, [v.jnp for v in args])
    except (TypeError, ValueError, IndexError, OverflowError, ZeroDivisionError):
        return None
    if not _shape_ok(rule):
        return None
    narrow = _narrow(rule, ref, *[v.rule for v in args], *[v.jnp for v in args])
    if not _agree(rule, ref, narrow):
        return None
    exact = all(v.exact for v in args) and bool((_as_float64(rule) == _as_float64(ref)).all())
    if isinstance(step, Adds):  # in another order in gradpipe.ooc: exact if no order rounds
        exact = exact and step.exact and not narrow and all(_sums_exactly(v.rule) for v in args)
    return Known(rule, ref, exact)


@st.composite
def x64_programs(draw, max_steps: int = 6) -> X64Program:
    """A random program: 1-2 DiskArrays, 1-3 parameters, up to `max_steps` steps."""
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    dims = st.sampled_from([1, 2, 3, 5, 7, 12])
    first = tuple(draw(st.lists(dims, min_size=1, max_size=3)))
    if math.prod(first) > MAX_SIZE:
        first = tuple(min(d, 5) for d in first)
    dyadic = draw(st.booleans()) or draw(st.booleans())
    data = [_data(rng, first, draw(st.sampled_from(DISK_DTYPES)), dyadic)]
    if draw(st.booleans()):
        tail = first[len(first) - draw(st.integers(1, len(first))) :]
        shape = tuple(draw(st.sampled_from([1, d])) for d in tail)
        data.append(_data(rng, shape, draw(st.sampled_from(DISK_DTYPES)), dyadic))
    params = [draw(parameters(first, rng)) for _ in range(draw(st.integers(1, 3)))]
    with jax.enable_x64(False), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        env = [Known(d, jnp.asarray(d), True) for d in data]
        env += [Known(p.jax(), p.jax(), True) for p in params]
        for v in env:  # float64 data is float32 in jax.numpy
            v.exact = bool((_as_float64(v.rule) == _as_float64(v.jnp)).all())
        builders = sorted(BUILDERS, key=lambda b: (-BUILDERS[b], b.__name__))
        pool = [b for b in builders for _ in range(BUILDERS[b])]
        steps: list[Step] = []
        refused = False
        for _ in range(draw(st.integers(1, max_steps))):
            step = draw(st.sampled_from(pool))(draw, env)
            if step is None:
                continue
            if not isinstance(step, Fill) and _refused([env[a] for a in step.args]):
                steps.append(step)
                refused = True
                break
            known = _try(step, env)
            if known is None:
                continue
            steps.append(step)
            env.append(known)
    values = [v for v in env if not refused]
    narrow = any(_narrow(v.rule, v.jnp) for v in values) or refused
    return X64Program(
        tuple(data),
        tuple(params),
        tuple(steps),
        budget=draw(st.sampled_from(BUDGETS)),
        jit_values=draw(st.booleans()),
        jit_grad=draw(st.booleans()),
        precision="float16" if narrow else "float32",
        refused=refused,
    )


# ---------------------------------------------------------------- the judge


def _weights(rng, out: Any) -> np.ndarray | None:
    """Dyadic weights of an output's shape (exact in every float dtype), None for ints."""
    if _dtype(out).kind != "f" and _dtype(out) != jnp.bfloat16:
        return None
    return rng.integers(-4, 5, np.shape(out)) / 4


def _close(got: Any, want: Any, tol: float, what: str) -> None:
    got, want = _as_float64(got), _as_float64(want)
    assert got.shape == want.shape, f"{what}: shape {got.shape}, expected {want.shape}"
    scale = 1.0 + np.abs(want).max(initial=0)
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * scale, err_msg=what)


def _value(x: Any) -> Any:
    return x.to_numpy(force=True) if type_of(x) is not None else np.asarray(x)


def check(program: X64Program) -> None:
    """Run `program` in gradpipe.ooc with x64 off and judge it: every output's kind
    (DiskArray or JAX value) and dtype by the rule, its value against the rule's and
    jax.numpy's, and the value and gradient of a weighted sum of the float outputs
    with respect to every float input and parameter against jax.numpy's."""
    p = program
    with jax.enable_x64(False), warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # the rounding notice, jnp's float64 note
        traced = [i for i, q in enumerate(p.params) if q.kind != "python"]

        def inputs(disk: Sequence[Any], args: Sequence[Any]) -> list:
            it = iter(args)
            return [*disk, *[next(it) if q.kind != "python" else q.value for q in p.params]]

        args = [p.params[i].jax() for i in traced]
        with ooc.MemoryBudget(p.budget):
            disk = [ooc.DiskArray.from_numpy(d) for d in p.data]

            def values(*xs):
                return p.run("ooc", inputs(xs[: len(disk)], xs[len(disk) :]))

            run = jax.jit(values) if p.jit_values else values
            if p.refused:
                with pytest.raises(TypeError, match="bfloat16"):
                    run(*disk, *args)
                return
            got = run(*disk, *args)
            rule = p.run("rule", inputs(p.data, args))
            ref = p.run("jnp", inputs([jnp.asarray(d) for d in p.data], args))
            tight = TIGHT[p.precision if p.precision == "float16" else _finest(rule)]
            loose = LOOSE[p.precision]
            for k, (g, r, j) in enumerate(zip(got, rule, ref)):
                what = f"output {k}"
                on_disk = isinstance(r, np.ndarray)
                assert (type_of(g) is not None) == on_disk, f"{what}: {type(g).__name__}"
                assert g.dtype == _dtype(r), f"{what}: dtype {g.dtype}, the rule gives {_dtype(r)}"
                _close(_value(g), r, tight, f"{what} against the rule")
                _close(_value(g), j, loose, f"{what} against jax.numpy")
            _check_gradients(p, disk, args, traced, rule, loose)


def _finest(values: Sequence[Any]) -> str:
    """The tight tolerance's key: float32 where a float32 (or narrower) value is about."""
    kinds = {_dtype(v).name for v in values}
    return "float32" if kinds & {"float32", "float16", "bfloat16"} or not kinds else "float64"


def _check_gradients(p, disk, args, traced, rule, loose) -> None:
    floats_d = [i for i, d in enumerate(p.data) if d.dtype.kind == "f"]
    floats_p = [k for k, i in enumerate(traced) if p.params[i].float]
    rng = np.random.default_rng(len(p.steps))
    weights = [_weights(rng, r) for r in rule]
    if not any(w is not None for w in weights) or not (floats_d or floats_p):
        return
    disk_weights = [
        ooc.DiskArray.from_numpy(w.astype(_dtype(r)))
        if w is not None and isinstance(r, np.ndarray)
        else w
        for w, r in zip(weights, rule)
    ]

    def loss(world, xs, ws):
        n = len(p.data)
        it = iter(xs[n:])
        values = [*xs[:n], *[next(it) if q.kind != "python" else q.value for q in p.params]]
        total = 0.0
        for out, w in zip(p.run(world, values), ws):
            if w is None:
                continue
            if type_of(out) is not None:
                total = total + ooc.sum(ooc.multiply(out, w))
            else:
                total = total + jnp.sum(out * jnp.asarray(w, out.dtype))
        return total

    wrt = (*floats_d, *[len(p.data) + k for k in floats_p])
    grad = jax.value_and_grad(lambda *xs: loss("ooc", xs, disk_weights), argnums=wrt)
    got_loss, got = (jax.jit(grad) if p.jit_grad else grad)(*disk, *args)
    ref = jax.value_and_grad(lambda *xs: loss("jnp", xs, weights), argnums=wrt)
    want_loss, want = ref(*[jnp.asarray(d) for d in p.data], *args)
    _close(got_loss, want_loss, loose, "loss against jax.numpy")
    for i, g, w in zip(wrt, got, want):
        what = f"gradient of v{i}"
        if i < len(p.data):  # a DiskArray's: on disk, in its dtype (float64 stays)
            assert type_of(g) is not None and g.dtype == p.data[i].dtype, f"{what}: {g.dtype}"
        else:  # a parameter's: a JAX value, as jax.grad gives
            assert type_of(g) is None and g.dtype == w.dtype, f"{what}: {g.dtype} vs {w.dtype}"
        _close(_value(g), w, loose, f"{what} against jax.numpy")
