"""Every binary operator between a DiskArray and every kind of operand, under JAX.

One matrix: operator (the Python operators and the namespace functions taking two
arrays) × left operand kind × right operand kind × transformation. Each case runs
the same program on DiskArrays with ``gradpipe.ooc`` and in memory with
``jax.numpy`` and compares the values and dtypes, or the gradients with respect
to every differentiable argument: a non-0-d JAX array, traced or not, is held in
memory (a resident operand) and gets its gradient as a JAX array. An operation
JAX rejects (``@`` with a 0-d operand) is rejected with the same exception
class. Never a Python "unsupported operand" error.

The kinds: ``disk`` (a slice of a DiskArray argument), ``reduction`` (a 0-d JAX
value coming back from ``ooc.min`` of that slice: under tracing, a tracer of the
same Python class as the traced DiskArray, so Python never tries the reflected
operator), ``jax0`` and ``jaxnd`` (JAX arrays passed as arguments, so traced and
differentiated),
``python`` (a Python number), ``numpy0`` and ``numpynd`` (a 0-d and a
broadcastable NumPy array). x64 is on: the DiskArray is float64, the other
floating operands float32, so the result's dtype and each gradient's dtype are
checked too.
"""

from __future__ import annotations

import dataclasses
import functools
import operator
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gradpipe import ooc
from gradpipe.ooc.arrays._hijax import type_of

BASE_SHAPE = (8, 9)
BUDGET = 64 * 2**10
TOLERANCE = dict(rtol=1e-7, atol=1e-9)

KINDS = ("disk", "reduction", "jax0", "jaxnd", "python", "numpy0", "numpynd")
JAX_KINDS = ("jax0", "jaxnd")
# every ordered pair with a DiskArray among the operands (the rest is jax.numpy's)
PAIRS = [(a, b) for a in KINDS for b in KINDS if "disk" in (a, b)]


def _left_v(base):
    return base[1:7, 2:8]


def _right_v(base):  # overlaps the left slice: the gradients add up
    return base[2:8, 1:7]


# ---------------------------------------------------------------- operators


@dataclasses.dataclass(frozen=True)
class Binary:
    """``apply(xp, a, b, v)``: one binary operation; ``v`` is the left DiskArray slice."""

    name: str
    apply: Callable
    family: str  # "float" (differentiable), "compare" (bool result), "int" (bitwise)


def _operator(name, fn, family):
    return Binary(name, lambda xp, a, b, v: fn(a, b), family)


def _function(name, family="float"):
    return Binary(name, lambda xp, a, b, v: getattr(xp, name)(a, b), family)


OPERATORS = [
    _operator("+", operator.add, "float"),
    _operator("-", operator.sub, "float"),
    _operator("*", operator.mul, "float"),
    _operator("/", operator.truediv, "float"),
    _operator("//", operator.floordiv, "float"),
    _operator("%", operator.mod, "float"),
    _operator("**", operator.pow, "float"),
    _operator("@", operator.matmul, "float"),
    _operator("==", operator.eq, "compare"),
    _operator("!=", operator.ne, "compare"),
    _operator("<", operator.lt, "compare"),
    _operator("<=", operator.le, "compare"),
    _operator(">", operator.gt, "compare"),
    _operator(">=", operator.ge, "compare"),
    _operator("&", operator.and_, "int"),
    _operator("|", operator.or_, "int"),
    _operator("^", operator.xor, "int"),
    _operator("<<", operator.lshift, "int"),
    _operator(">>", operator.rshift, "int"),
    _function("add"),
    _function("multiply"),
    _function("maximum"),
    _function("atan2"),
    _function("hypot"),
    _function("logaddexp"),
    _function("less", "compare"),
    _function("bitwise_xor", "int"),
    Binary("where", lambda xp, a, b, v: xp.where(v > 1.25, a, b), "float"),
]

# what each family runs under: bitwise operands are integers (no gradient); a
# comparison's gradient is checked through `where`, which its result selects for
EAGER_JIT = ("eager", "jit")
GRADS = ("grad", "value_and_grad", "jit(grad)", "grad(jit)")
JAX_ARG_GRADS = ("grad_wrt_disk", "grad_wrt_jax")  # one argument traced, the other not
TRANSFORMS = {"float": EAGER_JIT + GRADS, "compare": (*EAGER_JIT, "grad(jit)"), "int": EAGER_JIT}


def _cases():
    for op in OPERATORS:
        functions = op.name.isidentifier()
        for pair in PAIRS:
            transforms = TRANSFORMS[op.family]
            if op.family == "float" and set(pair) & set(JAX_KINDS):
                transforms += JAX_ARG_GRADS
            if functions:  # no operator dispatch there: eager and one traced form
                transforms = ("eager", "jit" if op.family == "int" else "jit(grad)")
            for transform in transforms:
                yield pytest.param(
                    op, pair, transform, id=f"{op.name}-{'-'.join(pair)}-{transform}"
                )


# ---------------------------------------------------------------- operands


def _constants(family):
    if family == "int":
        return {
            "python": 2,
            "numpy0": np.asarray(1, np.int16),
            "numpynd": np.arange(6, dtype=np.int16) % 4,
        }
    return {
        "python": 0.75,
        "numpy0": np.asarray(1.25, np.float32),
        "numpynd": np.linspace(0.6, 1.9, 6, dtype=np.float32),
    }


def _jax_argument(kind, family):
    if family == "int":
        return jnp.asarray(3, jnp.int32) if kind == "jax0" else jnp.arange(6, dtype=jnp.int32) % 5
    if kind == "jax0":
        return jnp.asarray(1.5, jnp.float32)
    return jnp.linspace(0.7, 1.7, 6, dtype=jnp.float32)


def _base(family, rng):
    if family == "int":
        return rng.integers(0, 8, BASE_SHAPE).astype(np.int32)
    return rng.uniform(0.5, 2.0, BASE_SHAPE)  # positive: / // % ** are smooth there


def _program(op, pair, family):
    """``program(xp, base, arg)``: the operation on the operands ``pair`` names."""
    constants = _constants(family)

    def program(xp, base, arg):
        v = _left_v(base)
        operands = []
        for side, kind in enumerate(pair):
            if kind == "disk":
                operands.append(_right_v(base) if side and pair[0] == "disk" else v)
            elif kind == "reduction":
                operands.append(xp.min(v, axis=(0, 1)))
            elif kind in JAX_KINDS:
                operands.append(arg)
            else:
                operands.append(constants[kind])
        return op.apply(xp, *operands, v)

    return program


def _loss(xp, program):
    """A scalar of the program's result; a bool result selects between two branches."""

    def loss(base, arg):
        out = program(xp, base, arg)
        if out.dtype == np.bool_:
            v = _left_v(base)
            out = xp.where(out, xp.sin(v), xp.cos(v))
        return xp.sum(xp.sin(out))

    return loss


# ---------------------------------------------------------------- transformations


def _transformed(transform, program, argnums):
    """The program on gradpipe.ooc under ``transform``."""
    value = lambda base, arg: program(ooc, base, arg)
    loss = _loss(ooc, program)
    if transform == "eager":
        return value
    if transform == "jit":
        return jax.jit(value)
    if transform in ("grad", "grad_wrt_disk", "grad_wrt_jax"):
        return jax.grad(loss, argnums)
    if transform == "value_and_grad":
        return jax.value_and_grad(loss, argnums)
    if transform == "jit(grad)":
        return jax.jit(jax.grad(loss, argnums))
    assert transform == "grad(jit)"
    return jax.grad(jax.jit(loss), argnums)


@functools.cache
def _references(op):
    """``op`` on jax.numpy for every pair, in one compiled call: ``({pair: (value,
    (loss, grads))}, {pair: exception class})``, the gradients with respect to the
    base and the JAX argument if any. (Eagerly, jax.numpy would compile each of its
    operations anew for every pair's dtypes: most of this module's time.)"""
    family = _family(op)
    base, jax_args = _inputs(family)
    errors = {}

    def every_pair(base, jax_args):
        out = {}
        for pair in PAIRS:
            program, arg = _program(op, pair, family), _jax_arg(pair, jax_args)
            try:
                value = program(jnp, base, arg)
                grads = None
                if family == "float":
                    argnums = (0, 1) if arg is not None else (0,)
                    grads = jax.value_and_grad(_loss(jnp, program), argnums)(base, arg)
            except (TypeError, ValueError) as error:  # e.g. `@` with a 0-d operand
                errors[pair] = type(error)
                continue
            out[pair] = (value, grads)
        return out

    return jax.jit(every_pair)(jnp.asarray(base), jax_args), errors


def _expected(op, pair, transform, argnums):
    """What gradpipe.ooc must give: the reference's value, gradients, or exception class."""
    results, errors = _references(op)
    if pair in errors:
        return errors[pair]
    value, differentiated = results[pair]
    if transform in EAGER_JIT:
        return value
    loss, grads = differentiated
    grads = tuple(grads[i] for i in argnums)
    return (loss, grads) if transform == "value_and_grad" else grads


def _argnums(transform, has_jax_arg):
    if transform == "grad_wrt_disk":
        return (0,)
    if transform == "grad_wrt_jax":
        return (1,)
    return (0, 1) if has_jax_arg else (0,)


def _leaves(tree):
    return jax.tree.leaves(tree, is_leaf=lambda x: type_of(x) is not None)


def _assert_same(got, want, what):
    got, want = _leaves(got), _leaves(want)
    assert len(got) == len(want), what
    for i, (g, w) in enumerate(zip(got, want)):
        if type_of(g) is not None:
            g = g.to_numpy()
        else:
            assert isinstance(g, jax.Array), (what, i, type(g))
        g, w = np.asarray(g), np.asarray(w)
        assert (g.dtype, g.shape) == (w.dtype, w.shape), (what, i)
        if g.dtype == np.bool_ or g.dtype.kind in "iu":
            np.testing.assert_array_equal(g, w, err_msg=f"{what}: output {i}")
        else:
            np.testing.assert_allclose(g, w, **TOLERANCE, err_msg=f"{what}: output {i}")


# ---------------------------------------------------------------- the matrix


@pytest.fixture(autouse=True)
def x64():
    """float64 0-d results are JAX values: they need x64."""
    with jax.enable_x64(True):
        yield


def _family(op):
    return "int" if op.family == "int" else "float"


def _inputs(family):
    """The base array (NumPy) and the JAX arguments, by kind."""
    base = _base(family, np.random.default_rng(0))
    return base, {kind: _jax_argument(kind, family) for kind in JAX_KINDS}


def _jax_arg(pair, jax_args):
    return next((jax_args[kind] for kind in pair if kind in JAX_KINDS), None)


@pytest.mark.parametrize(("op", "pair", "transform"), list(_cases()))
def test_binary_operation_matches_jax_numpy(op, pair, transform):
    family = _family(op)
    base, jax_args = _inputs(family)
    arg = _jax_arg(pair, jax_args)
    argnums = _argnums(transform, arg is not None)
    want = _expected(op, pair, transform, argnums)
    with ooc.MemoryBudget(BUDGET):
        run = _transformed(transform, _program(op, pair, family), argnums)
        disk = ooc.DiskArray.from_numpy(base)
        if isinstance(want, type):  # jax.numpy raised it
            with pytest.raises(want, match=op.name if op.name.isidentifier() else "matmul"):
                run(disk, arg)
            return
        got = run(disk, arg)
    _assert_same(got, want, f"{op.name} on {pair} under {transform}")


def test_the_reported_program_differentiates():
    """``ooc.min(v, axis=(0, 1)) + ooc.std(v, axis=0)`` under jax.grad, x64 on."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal((40, 60))

    def program(xp, a):
        v = a[2:37, 3:54]
        return xp.sum(xp.min(v, axis=(0, 1)) + xp.std(v, axis=0))

    with ooc.MemoryBudget(BUDGET):
        got = jax.grad(lambda a: program(ooc, a))(ooc.DiskArray.from_numpy(x))
        want = jax.grad(lambda a: program(jnp, a))(x)
        np.testing.assert_allclose(got.to_numpy(), want, **TOLERANCE)
