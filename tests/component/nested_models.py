"""The nested models and function the gradpipe.component tests share.

A nonlinear function of several inputs with several outputs, reaching nested
models, list items and dict entries, plus a static float, an integer array input
and an integer output.
"""

import jax.numpy as jnp
import numpy as np
import pydantic

from gradpipe.component import Array, Differentiable

F32 = np.float32


class Layer(pydantic.BaseModel):
    w: Differentiable[Array[F32, (3,)]]
    b: Differentiable[Array[F32, ()]]


class NestedIn(pydantic.BaseModel):
    x: Differentiable[Array[F32, (None,)]]
    layers: list[Layer]
    table: dict[str, Differentiable[Array[F32, (2,)]]]
    k: Differentiable[Array[np.int32, (3,)]]
    scale: float
    label: str = "run"


class Stats(pydantic.BaseModel):
    s: Differentiable[Array[F32, ()]]


class NestedOut(pydantic.BaseModel):
    y: Differentiable[Array[F32, (None,)]]
    stats: Stats
    parts: list[Differentiable[Array[F32, (3,)]]]
    count: Differentiable[Array[np.int32, ()]]


def nested_fn(d):
    x = d["x"]
    w0, b0 = d["layers"][0]["w"], d["layers"][0]["b"]
    w1, b1 = d["layers"][1]["w"], d["layers"][1]["b"]
    a, b = d["table"]["a"], d["table"]["b c"]
    kf = d["k"].astype(jnp.float32)
    y = jnp.sin(x * d["scale"]) * jnp.sum(w0 * w1) + jnp.tanh(b0) * x**2 + jnp.sum(a * b)
    s = jnp.sum(jnp.cos(y)) * b1 + jnp.prod(a)
    parts = [jnp.exp(0.3 * w0) * b1 + kf, w1 * jnp.sum(b**2) + jnp.tanh(b0)]
    return {"y": y, "stats": {"s": s}, "parts": parts, "count": jnp.sum(d["k"])}


def nested_inputs(seed=0):
    rng = np.random.default_rng(seed)

    def r(*shape):
        return rng.uniform(-0.8, 0.8, size=shape).astype(F32)

    return {
        "x": r(4),
        "layers": [{"w": r(3), "b": r()}, {"w": r(3), "b": r()}],
        "table": {"a": r(2), "b c": r(2)},
        "k": np.array([1, 2, 3], np.int32),
        "scale": 1.3,
    }
