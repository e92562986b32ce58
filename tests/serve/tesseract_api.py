"""A component in tesseract-core's own format (its JAX recipe), served by the peer's
``tesseract-runtime serve`` in the tesseract tests. It runs in the peer's virtual
environment only; gradpipe never imports it. ``forward`` is the same function as
`served_components.forward`."""

from typing import Any

import equinox as eqx
import jax.numpy as jnp
from pydantic import BaseModel
from tesseract_core.runtime import Array, Differentiable, Float32, Int32
from tesseract_core.runtime.jax_recipes import (
    jax_abstract_eval,
    jax_apply,
    jax_jacobian,
    jax_jvp,
    jax_vjp,
)


class Params(BaseModel):
    a: Differentiable[Array[(None,), Float32]]


class InputSchema(BaseModel):
    x: Differentiable[Array[(None,), Float32]]
    w: Differentiable[Float32]
    p: Params
    n: int = 1


class OutputSchema(BaseModel):
    y: Differentiable[Array[(None,), Float32]]
    s: Differentiable[Float32]
    k: Int32


def forward(d):
    x, w, a = d["x"], d["w"], d["p"]["a"]
    return {
        "y": jnp.sin(x) * w + a**2 * x,
        "s": jnp.sum(x * x) * d["n"] + w**3,
        "k": jnp.int32(x.shape[0] * d["n"]),
    }


@eqx.filter_jit
def apply_jit(inputs: dict) -> dict:
    return forward(inputs)


def apply(inputs: InputSchema) -> OutputSchema:
    return OutputSchema(**jax_apply(apply_jit, inputs))


def jacobian(inputs: InputSchema, jac_inputs: set[str], jac_outputs: set[str]):
    return jax_jacobian(apply_jit, inputs, jac_inputs, jac_outputs)


def jacobian_vector_product(
    inputs: InputSchema, jvp_inputs: set[str], jvp_outputs: set[str], tangent_vector: dict[str, Any]
):
    return jax_jvp(apply_jit, inputs, jvp_inputs, jvp_outputs, tangent_vector)


def vector_jacobian_product(
    inputs: InputSchema,
    vjp_inputs: set[str],
    vjp_outputs: set[str],
    cotangent_vector: dict[str, Any],
):
    return jax_vjp(apply_jit, inputs, vjp_inputs, vjp_outputs, cotangent_vector)


def abstract_eval(abstract_inputs):
    return jax_abstract_eval(apply_jit, abstract_inputs)
