"""Every operator of gradpipe.jax under jax.jit, jax.vmap and jax.grad.

The layer's promise is stronger than the core's: none of these operators refuses a
tracer. Each must give what the equivalent plain JAX function gives under the same
transformation.
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradpipe as gp
from gradpipe.jax import (
    CondBranch,
    CondSwitch,
    DebugTap,
    JaxModelOp,
    JaxOperator,
    JaxSequential,
    ODEForwardModel,
)


class Scale(JaxOperator):
    weight: jax.Array
    power: int = eqx.field(static=True, default=1)

    def _apply(self, x):
        return self.weight * x**self.power


class Quadratic(eqx.Module):
    a: jax.Array

    def __call__(self, x):
        return self.a * x**2


W = jnp.array([0.5, -2.0, 1.5])
sq = gp.Lambda(lambda x: x**2, name="sq")


def _index(x):
    return (jnp.sum(x) > 0).astype(jnp.int32) + (jnp.sum(x) > 2).astype(jnp.int32)


# name -> (operator factory, the plain JAX function it must equal)
CASES = {
    "JaxOperator": (lambda: Scale(W, power=2), lambda x: W * x**2),
    "JaxSequential": (
        lambda: JaxSequential([Scale(W), Scale(W, power=3)]),
        lambda x: W * (W * x) ** 3,
    ),
    "JaxModelOp": (lambda: JaxModelOp(Quadratic(W)), lambda x: W * x**2),
    "CondBranch": (
        lambda: CondBranch(lambda x: jnp.sum(x) > 0, sq, gp.Lambda(jnp.sin)),
        lambda x: jnp.where(jnp.sum(x) > 0, x**2, jnp.sin(x)),
    ),
    "CondSwitch": (
        lambda: CondSwitch(_index, [sq, gp.Lambda(jnp.sin), gp.Lambda(jnp.cos)]),
        lambda x: jnp.stack([x**2, jnp.sin(x), jnp.cos(x)])[_index(x)],
    ),
    "DebugTap": (lambda: DebugTap(lambda x: None), lambda x: x),
    "ODEForwardModel": (
        lambda: ODEForwardModel(
            lambda t, c, lam: -lam * c,
            dt=1.0,
            dt0=0.25,
            solver="euler",
            max_steps=8,
            args=jnp.asarray(0.5),
        ),
        lambda x: x * (1 - 0.5 * 0.25) ** 4,
    ),
}

TRANSFORMS = {
    "jit": lambda f: jax.jit(f),
    "vmap": lambda f: jax.vmap(f),
    "grad": lambda f: jax.grad(lambda x: jnp.sum(f(x))),
}

X = jnp.array([0.3, -1.2, 2.0])
XS = jnp.array([[0.3, -1.2, 2.0], [1.0, 0.5, -0.1], [-1.0, -0.5, 0.2]])


@pytest.mark.parametrize("transform", list(TRANSFORMS))
@pytest.mark.parametrize("name", list(CASES))
def test_trace_matrix(name, transform):
    factory, reference = CASES[name]
    op = factory()
    x = XS if transform == "vmap" else X
    np.testing.assert_allclose(op(X), reference(X), rtol=1e-6)  # eager, too
    got = TRANSFORMS[transform](op)(x)
    expected = TRANSFORMS[transform](reference)(x)
    np.testing.assert_allclose(np.asarray(got), np.asarray(expected), rtol=1e-5, atol=1e-6)


def test_every_public_operator_is_in_the_matrix():
    import gradpipe.jax as gj

    operators = {
        name
        for name in gj.__all__
        if isinstance(getattr(gj, name), type) and issubclass(getattr(gj, name), gp.Operator)
    }
    assert operators == set(CASES)
