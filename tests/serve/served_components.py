"""The component the serve tests run in a server subprocess (and locally, to compare)."""

import jax.numpy as jnp
import numpy as np
import pydantic

from gradpipe.component import Array, Component, Differentiable


class Params(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid")
    a: Differentiable[Array[np.float32, (None,)]]


class Inputs(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid")
    x: Differentiable[Array[np.float32, (None,)]]
    w: Differentiable[Array[np.float32, ()]]
    p: Params
    n: int = 1


class Outputs(pydantic.BaseModel):
    y: Differentiable[Array[np.float32, (None,)]]
    s: Differentiable[Array[np.float32, ()]]
    k: Array[np.int32, ()]


def forward(d):
    x, w, a = d["x"], d["w"], d["p"]["a"]
    return {
        "y": jnp.sin(x) * w + a**2 * x,
        "s": jnp.sum(x * x) * d["n"] + w**3,
        "k": jnp.int32(x.shape[0] * d["n"]),
    }


component = Component(forward, inputs=Inputs, outputs=Outputs)


class Layer(pydantic.BaseModel):
    w: Differentiable[Array[np.float32, (None,)]]


class NestedInputs(pydantic.BaseModel):
    bands: dict[str, Differentiable[Array[np.float32, (None,)]]]
    layers: list[Layer]
    label: str = "run"


class NestedOutputs(pydantic.BaseModel):
    per_band: dict[str, Differentiable[Array[np.float32, ()]]]
    total: Differentiable[Array[np.float32, ()]]


def nested_forward(d):
    weight = sum(jnp.sum(layer["w"] ** 2) for layer in d["layers"])
    per_band = {k: jnp.sum(jnp.sin(v)) * weight for k, v in d["bands"].items()}
    return {"per_band": per_band, "total": sum(per_band.values()) * len(d["label"])}


nested_component = Component(nested_forward, inputs=NestedInputs, outputs=NestedOutputs)
