"""Times tesseract-core's JAX recipe (`tesseract_core.runtime.jax_recipes`) in-process
on the function of `peer_component_function.py`: ``jax_apply`` then ``jax_vjp``,
each from a validated input model, as the peer's runtime serves two requests.

Run by `benchmarks/components.py` with the peer's own Python (``$PEER_PYTHON``);
prints one JSON line ``{"cache_off": seconds, "cache_on": seconds, ...}``.
"""

import json
import pathlib
import statistics
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

import equinox as eqx
import jax
import pydantic
import tesseract_core
from tesseract_core.runtime import (
    Array,
    Differentiable,
    Float32,
    jax_recipes,
)
from tesseract_core.runtime.experimental import set_jax_vjp_cache_size

from peer_component_function import inputs, simulate


class InputSchema(pydantic.BaseModel):
    x: Differentiable[Array[(None,), Float32]]


class OutputSchema(pydantic.BaseModel):
    y: Differentiable[Array[(None,), Float32]]


@eqx.filter_jit
def apply_jit(inputs: dict) -> dict:
    return {"y": simulate(inputs["x"])}


def apply_and_vjp(payload, cotangent):
    outputs = jax_recipes.jax_apply(apply_jit, InputSchema.model_validate(payload))
    grads = jax_recipes.jax_vjp(
        apply_jit, InputSchema.model_validate(payload), {"x"}, {"y"}, {"y": cotangent}
    )
    jax.block_until_ready((outputs, grads))
    return grads


def main(repeats: int) -> None:
    x, ct = inputs()
    payload = {"x": x}
    result = {"tesseract_core": tesseract_core.__version__, "jax": jax.__version__}
    for name, size in (("cache_off", 0), ("cache_on", 8)):
        set_jax_vjp_cache_size(size)
        apply_and_vjp(payload, ct)  # compile
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            apply_and_vjp(payload, ct)
            times.append(time.perf_counter() - start)
        result[name] = statistics.median(times)
    print(json.dumps(result))


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 7)
