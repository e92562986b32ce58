"""The gradient table, elementwise part: every differentiable elementwise function of
`gradpipe.ooc` has jax.grad's gradient for the same `jax.numpy` function, eagerly and
under jit, in float32 and float64, with broadcasting; one without a derivative is
refused by name under `jax.grad`."""

import jax
import jax.numpy as jnp
import pytest
from gradcases import MODE_IDS, MODES, GradCase, check

from gradpipe import ooc

SAME = ((37, 29),)
PAIR = ((37, 29), (37, 29))
BROADCAST = ((37, 1), (1, 29))
ROW = ((37, 29), (29,))


def _unary(name, domain="real"):
    return GradCase(name, lambda xp, x: getattr(xp, name)(x), SAME, domain=domain)


def _binary(name, shapes=PAIR, domain="real"):
    return GradCase(name, lambda xp, a, b: getattr(xp, name)(a, b), shapes, domain=domain)


UNARY = {
    "abs": "real",
    "acos": "unit",
    "acosh": "above1",
    "asin": "unit",
    "asinh": "real",
    "atan": "real",
    "atanh": "unit",
    "ceil": "real",
    "conj": "real",
    "cos": "real",
    "cosh": "real",
    "exp": "real",
    "expm1": "real",
    "floor": "real",
    "imag": "real",
    "log": "positive",
    "log1p": "positive",
    "log2": "positive",
    "log10": "positive",
    "negative": "real",
    "positive": "real",
    "real": "real",
    "reciprocal": "positive",
    "round": "real",
    "sign": "real",
    "sin": "real",
    "sinh": "real",
    "square": "real",
    "sqrt": "positive",
    "tan": "unit",
    "tanh": "real",
    "trunc": "real",
}
BINARY = {
    "add": "real",
    "atan2": "positive",
    "copysign": "positive",
    "divide": "positive",
    "floor_divide": "positive",
    "hypot": "positive",
    "logaddexp": "real",
    "maximum": "real",
    "minimum": "real",
    "multiply": "real",
    "pow": "positive",
    "remainder": "positive",
    "subtract": "real",
}


def _jax_differentiates(fn, *args) -> bool:
    try:
        jax.grad(lambda *a: jnp.sum(fn(*a)))(*args)
    except NotImplementedError:
        return False
    return True


NEXTAFTER_REFUSED = not _jax_differentiates(jnp.nextafter, 1.0, 2.0)

CASES = [
    *(_unary(name, domain) for name, domain in UNARY.items()),
    *(_binary(name, PAIR, domain) for name, domain in BINARY.items()),
    *(_binary(name, BROADCAST, domain) for name, domain in BINARY.items()),
    _binary("multiply", ROW),
    _binary("divide", ROW, "positive"),
    GradCase("where", lambda xp, a, b: xp.where(a > b, a * 2.0, b), BROADCAST),
    GradCase("where", lambda xp, a, b: xp.where(a > 0, a, 1.5), SAME[:1] * 2, argnums=(0,)),
    GradCase("clip", lambda xp, x: xp.clip(x, -0.5, 0.7), SAME),
    GradCase("clip", lambda xp, x, lo: xp.clip(x, lo, 2.0), ROW),
    GradCase("astype", lambda xp, x: xp.astype(x, xp.float32) * x, SAME),
    GradCase("pow", lambda xp, x: x**3, SAME),
    GradCase("pow", lambda xp, x: 2.0**x, SAME),
    GradCase("power", lambda xp, x: xp.pow(x, 2.5), SAME, domain="positive"),
    GradCase("sigmoid", lambda xp, x: 1 / (1 + xp.exp(-x)), SAME),
    GradCase("sigmoid", lambda xp, x: ooc.sigmoid(x) if xp is ooc else jax.nn.sigmoid(x), SAME),
    GradCase("relu", lambda xp, x: ooc.relu(x) if xp is ooc else jax.nn.relu(x), SAME),
    # jax 0.10 has no derivative of nextafter (the gradient is refused by name); 0.12 has
    GradCase("nextafter", lambda xp, a, b: xp.nextafter(a, b), PAIR, refuses=NEXTAFTER_REFUSED),
]


@pytest.mark.parametrize("dtype, jit", MODES, ids=MODE_IDS)
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_elementwise_gradients_equal_jax(case, dtype, jit):
    check(case, dtype, jit)
