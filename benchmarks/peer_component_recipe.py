"""Runs tesseract-core's JAX recipe (`tesseract_core.runtime.jax_recipes`) in-process
on the function of `peer_component_function.py`: ``jax_apply`` then ``jax_vjp``,
each from a validated input model, as the peer's runtime serves two requests.

Started by `benchmarks/components.py` with the peer's own Python (``$PEER_PYTHON``)
as ``peer_component_recipe.py NEWTON_STEPS``. It compiles, prints ``ready``, then
answers each line ``cache_off`` or ``cache_on`` on stdin with the seconds one
apply+vjp took in that setting, so that the two sides can be timed in turns.
"""

import json
import pathlib
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

import equinox as eqx
import jax
import pydantic
import tesseract_core
from tesseract_core.runtime import Array, Differentiable, Float32, jax_recipes
from tesseract_core.runtime.experimental import set_jax_vjp_cache_size

from peer_component_function import inputs, make_simulate


class InputSchema(pydantic.BaseModel):
    x: Differentiable[Array[(None,), Float32]]


def main(newton_steps: int) -> None:
    simulate = make_simulate(newton_steps)

    @eqx.filter_jit
    def apply_jit(inputs: dict) -> dict:
        return {"y": simulate(inputs["x"])}

    x, ct = inputs()
    payload = {"x": x}

    def apply_and_vjp():
        outputs = jax_recipes.jax_apply(apply_jit, InputSchema.model_validate(payload))
        grads = jax_recipes.jax_vjp(
            apply_jit, InputSchema.model_validate(payload), {"x"}, {"y"}, {"y": ct}
        )
        jax.block_until_ready((outputs, grads))

    sizes = {"cache_off": 0, "cache_on": 8}
    for size in sizes.values():
        set_jax_vjp_cache_size(size)
        apply_and_vjp()
    print(json.dumps({"ready": True, "tesseract_core": tesseract_core.__version__}), flush=True)
    for line in sys.stdin:
        setting = line.strip()
        if setting not in sizes:
            break
        set_jax_vjp_cache_size(sizes[setting])
        start = time.perf_counter()
        apply_and_vjp()
        print(time.perf_counter() - start, flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]))
