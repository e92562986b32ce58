"""`Cache` on JAX arrays: the key holds everything that decides the result."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradpipe as gp
from gradpipe import UnkeyableError, content_key


def _half_precision_product():
    return gp.Lambda(lambda x: x * jnp.ones(2, jnp.float16), name="times_f16")


@pytest.mark.parametrize("dtype", [jnp.float32, "float64"])
def test_weak_and_strong_scalars_of_equal_value_do_not_share_an_entry(dtype, x64):
    """A weak scalar promotes to float16 against a float16 array, a strong one does
    not: serving one's result for the other changes the dtype of the answer."""
    cache = gp.Cache(_half_precision_product())
    strong = jnp.asarray(2.0, jnp.dtype(dtype))
    assert jnp.asarray(2.0).weak_type and not strong.weak_type
    first = cache(jnp.asarray(2.0))
    second = cache(strong)
    assert first.dtype == jnp.float16
    assert second.dtype == _half_precision_product()(strong).dtype != jnp.float16
    assert cache.info()["misses"] == 2


def test_weak_type_is_part_of_the_content_key(x64):
    weak = jnp.asarray(2.0)
    strong = jnp.asarray(2.0, jnp.float64)
    assert weak.dtype == strong.dtype
    assert content_key(weak) != content_key(strong)
    assert content_key(weak) == content_key(jnp.asarray(2.0))
    assert content_key(strong) == content_key(jnp.asarray(2.0, jnp.float64))


def test_jax_and_numpy_arrays_of_equal_bytes_do_not_share_a_key():
    assert content_key(jnp.arange(3.0)) != content_key(np.arange(3.0, dtype=np.float32))


def test_a_tracer_has_no_key():
    def f(x):
        with pytest.raises(UnkeyableError, match="tracer"):
            content_key(x)
        return x

    jax.jit(f)(jnp.ones(2))
