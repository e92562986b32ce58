"""Weights of every dtype JAX trains in save and load back bit for bit."""

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

import gradpipe as gp
from gradpipe.jax import JaxOperator, WeightsError, from_registry, with_weights


class Scale(JaxOperator):
    w: jax.Array

    def _apply(self, x):
        return self.w * x


@pytest.mark.parametrize(
    "dtype",
    [jnp.bfloat16, ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2, jnp.float16, jnp.int8],
)
def test_low_precision_weights_round_trip_through_the_registry(tmp_path, dtype):
    op = Scale(jnp.asarray([1.5, -2.25, 0.125], dtype=dtype))
    reg = gp.Registry(tmp_path)
    ref = reg.store(op, weights=op.serialize_weights())
    back = from_registry(reg, ref)
    assert back.w.dtype == op.w.dtype
    np.testing.assert_array_equal(np.asarray(back.w), np.asarray(op.w))
    assert reg.load(ref).w.dtype == op.w.dtype  # the placeholder has the dtype too


def test_bfloat16_blob_into_a_float32_operator_is_refused():
    blob = Scale(jnp.ones(3, jnp.bfloat16)).serialize_weights()
    with pytest.raises(WeightsError, match=r"\.w.*float32\[3\].*bfloat16\[3\]"):
        with_weights(Scale(jnp.ones(3, jnp.float32)), blob)


def test_a_dtype_safetensors_cannot_write_is_refused_at_save(x64):
    with pytest.raises(WeightsError, match="complex128"):
        Scale(jnp.ones(2, jnp.complex128)).serialize_weights()
