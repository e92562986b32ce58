"""Dict fields, lists of models and static strings through a RemoteComponent."""

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from served_components import nested_forward

from gradpipe.serve import RemoteComponent


def test_nested_paths_under_grad_and_the_endpoints(nested_url):
    remote = RemoteComponent(nested_url)
    rng = np.random.default_rng(4)
    bands = {"red": jnp.asarray(rng.normal(size=3), jnp.float32),
             "a.b": jnp.asarray(rng.normal(size=2), jnp.float32)}  # fmt: skip
    layers = [{"w": jnp.asarray(rng.normal(size=4), jnp.float32)} for _ in range(2)]

    def loss(f, bands, layers):
        out = f({"bands": bands, "layers": layers, "label": "abc"})
        return out["total"] + 2 * out["per_band"]["red"]

    got = jax.value_and_grad(partial(loss, remote), argnums=(0, 1))(bands, layers)
    want = jax.value_and_grad(partial(loss, nested_forward), argnums=(0, 1))(bands, layers)
    for u, v in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        np.testing.assert_allclose(np.asarray(u), np.asarray(v), rtol=2e-5, atol=1e-6)

    ext = remote.schema["x-gradpipe"]
    assert set(ext["differentiable_inputs"]) == {"bands[*]", "layers[*].w"}
    inputs = {"bands": bands, "layers": layers}
    vjp = remote.vjp(inputs, ['bands["a.b"]', "layers[1].w"], ["total"], {"total": np.float32(1)})
    assert vjp['bands["a.b"]'].shape == (2,) and vjp["layers[1].w"].shape == (4,)
    remote.close()
