"""DebugTap: a callback on every run of the compiled function."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradpipe as gp
from gradpipe.jax import DebugTap, JaxSequential

X = jnp.array([0.3, -1.2, 2.0])


def test_three_jitted_calls_give_three_callbacks():
    seen = []
    tap = DebugTap(lambda x: seen.append(np.asarray(x).copy()))
    f = jax.jit(lambda x: tap(x * 2) + 1)
    for i in range(3):
        np.testing.assert_allclose(f(X + i), (X + i) * 2 + 1)
    jax.effects_barrier()
    assert len(seen) == 3
    np.testing.assert_allclose(seen[2], (X + 2) * 2)
    assert all(isinstance(v, np.ndarray) for v in seen)


def test_core_tap_refuses_where_debug_tap_works():
    with pytest.raises(TypeError, match="Tap"):
        jax.jit(gp.Tap(print))(X)


def test_vmap_calls_once_per_element_and_grad_sees_forward_values():
    seen = []
    tap = DebugTap(lambda x: seen.append(float(x)))
    jax.vmap(tap)(X)
    jax.effects_barrier()
    assert sorted(seen) == sorted(np.asarray(X).tolist())
    seen.clear()
    assert jax.grad(lambda x: tap(x) ** 2)(3.0) == 6.0
    jax.effects_barrier()
    assert seen == [3.0]


def test_ordered_taps_keep_program_order_and_cannot_be_saved():
    seen = []
    first = DebugTap(lambda x: seen.append("first"), ordered=True)
    second = DebugTap(lambda x: seen.append("second"), ordered=True)
    jax.jit(JaxSequential([first, second]))(X)
    jax.effects_barrier()
    assert seen == ["first", "second"]
    with pytest.raises(gp.ConfigError, match="DebugTap"):
        first.state
    with pytest.raises(TypeError, match="callable"):
        DebugTap(3)
