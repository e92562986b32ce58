"""Weights blobs: safetensors keyed by PyTree path, checked on load, through the registry."""

import json

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_pytree import Affine, Combine, Invert

import gradpipe as gp
from gradpipe.jax import (
    JaxModelOp,
    JaxOperator,
    JaxSequential,
    WeightsError,
    from_registry,
    serialize_weights,
    with_weights,
)

K = np.array([0.002, 0.004, 0.006, 0.008, 0.010])


class BandInversion(eqx.Module):
    log_k: jax.Array

    def __call__(self, y):
        return -jnp.log(y) / jnp.exp(self.log_k)


def _floats(tree):
    if isinstance(tree, float):
        return [tree]
    if isinstance(tree, dict):
        tree = list(tree.values())
    if isinstance(tree, list):
        return [f for item in tree for f in _floats(item)]
    return []


def _trained(x64_dtype=jnp.float64):
    log_k = jnp.log(jnp.asarray(K, x64_dtype)) + jnp.linspace(-0.05, 0.05, 5)
    return JaxSequential([Invert(log_k), Combine(log_k * 1.01)])


def test_blob_is_keyed_by_path_and_deterministic(x64):
    import safetensors.numpy

    seq = _trained()
    blob = seq.serialize_weights()
    assert blob == serialize_weights(seq)
    tensors = safetensors.numpy.load(blob)
    assert sorted(tensors) == [".operators[0].log_k", ".operators[1].log_k"]
    np.testing.assert_array_equal(tensors[".operators[1].log_k"], seq.operators[1].log_k)


def test_registry_round_trip_is_byte_identical(tmp_path, x64):
    seq = _trained()
    blob = seq.serialize_weights()
    reg = gp.Registry(tmp_path)
    ref = reg.store(seq, weights=blob, tags=["trained"])
    assert reg.load_weights(ref) == blob
    assert not _floats(json.loads(json.dumps(reg.load_state(ref))))  # no array values
    back = from_registry(reg, "trained")
    assert type(back) is JaxSequential and back.serialize_weights() == blob
    for a, b in zip(back.operators, seq.operators):
        np.testing.assert_array_equal(a.log_k, b.log_k)
    # a state without weights would run on NaN placeholders, never on plausible zeros
    assert np.isnan(np.asarray(reg.load(ref)(jnp.full(5, 0.5)))).all()


def test_model_op_round_trips_through_a_template(tmp_path, x64):
    module = BandInversion(jnp.log(jnp.asarray(K)) + 0.01)
    op = JaxModelOp(module)
    reg = gp.Registry(tmp_path)
    ref = reg.store(op, weights=op.serialize_weights())
    state = reg.load_state(ref)
    assert state["config"]["module"] == {
        "class": f"{BandInversion.__module__}:BandInversion",
        "arrays": {".log_k": {"shape": [5], "dtype": "float64"}},
    }
    with pytest.raises(gp.ConfigError, match="like=JaxModelOp"):
        reg.load(ref)
    back = from_registry(reg, ref, like=JaxModelOp(BandInversion(jnp.zeros(5))))
    np.testing.assert_array_equal(back.module.log_k, module.log_k)
    assert back.serialize_weights() == reg.load_weights(ref)
    y = jnp.exp(-100.0 * jnp.asarray(K))
    np.testing.assert_array_equal(back(y), op(y))


def test_template_of_another_structure_is_refused(tmp_path, x64):
    reg = gp.Registry(tmp_path)
    op = JaxModelOp(BandInversion(jnp.zeros(5)))
    ref = reg.store(op, weights=op.serialize_weights())
    with pytest.raises(gp.ConfigError, match="differs"):
        from_registry(reg, ref, like=JaxModelOp(BandInversion(jnp.zeros(4))))
    with pytest.raises(gp.ConfigError, match="JaxSequential"):
        from_registry(reg, ref, like=_trained())


def test_mismatched_blobs_raise_naming_the_path(x64):
    seq = _trained()
    blob = seq.serialize_weights()
    shorter = JaxSequential([Invert(jnp.zeros(5)), Combine(jnp.zeros(4))])
    with pytest.raises(WeightsError, match=r"\.operators\[1\]\.log_k.*float64\[4\].*float64\[5\]"):
        shorter.with_weights(blob)
    as_float32 = JaxSequential([Invert(jnp.zeros(5, jnp.float32)), Combine(jnp.zeros(5))])
    with pytest.raises(WeightsError, match=r"\.operators\[0\]\.log_k.*float32\[5\]"):
        as_float32.with_weights(blob)
    one_step = JaxSequential([Invert(jnp.zeros(5))])
    with pytest.raises(WeightsError, match=r"\.operators\[1\]\.log_k.*has no array"):
        one_step.with_weights(blob)
    three = JaxSequential([Invert(jnp.zeros(5)), Combine(jnp.zeros(5)), Invert(jnp.zeros(5))])
    with pytest.raises(WeightsError, match=r"no tensor for \.operators\[2\]\.log_k"):
        three.with_weights(blob)
    with pytest.raises(WeightsError, match="not a safetensors"):
        seq.with_weights(b"\x80\x04not a blob")


def test_with_weights_leaves_the_original_alone_and_keeps_static_fields(x64):
    op = Affine(jnp.array([1.0, 2.0]), offset=3.0, mode="abs")
    other = Affine(jnp.array([5.0, 6.0]), offset=3.0, mode="abs")
    loaded = with_weights(op, other.serialize_weights())
    np.testing.assert_array_equal(loaded.weight, [5.0, 6.0])
    np.testing.assert_array_equal(op.weight, [1.0, 2.0])
    assert (loaded.offset, loaded.mode) == (3.0, "abs")


def test_numpy_leaves_stay_numpy():
    module = BandInversion(np.arange(5.0))
    loaded = with_weights(module, serialize_weights(BandInversion(np.ones(5))))
    assert isinstance(loaded.log_k, np.ndarray)
    np.testing.assert_array_equal(loaded.log_k, np.ones(5))


_DTYPES = ["float16", "float32", "int8", "int32", "uint8", "bool"]


@settings(max_examples=40, deadline=None)
@given(
    specs=st.lists(
        st.tuples(st.sampled_from(_DTYPES), st.lists(st.integers(0, 4), min_size=0, max_size=3)),
        min_size=0,
        max_size=4,
    ),
    seed=st.integers(0, 2**32 - 1),
)
def test_any_tree_of_arrays_round_trips_exactly(specs, seed):
    rng = np.random.default_rng(seed)
    tree = {
        f"leaf{i}": (rng.standard_normal(shape) * 50).astype(dtype)
        for i, (dtype, shape) in enumerate(specs)
    }
    tree["nested"] = [tuple(tree.values())]
    blob = serialize_weights(tree)
    empty = jax.tree_util.tree_map(np.zeros_like, tree)
    back = with_weights(empty, blob)
    assert serialize_weights(back) == blob
    for a, b in zip(jax.tree_util.tree_leaves(back), jax.tree_util.tree_leaves(tree)):
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_array_equal(a, b)


class Rate(JaxOperator):
    rate: jax.Array

    def _apply(self, x):
        return self.rate * x


def test_weakly_typed_arrays_stay_weak_through_weights_and_registry(tmp_path):
    op = Rate(jnp.asarray(0.25))  # weakly typed: takes the dtype of what it meets
    x = jnp.ones(3, jnp.float16)
    assert op(x).dtype == jnp.float16
    blob = op.serialize_weights()
    assert op.with_weights(blob)(x).dtype == jnp.float16
    reg = gp.Registry(tmp_path / "reg")
    back = from_registry(reg, reg.store(op, weights=blob))
    assert back(x).dtype == jnp.float16
    np.testing.assert_array_equal(back(x), op(x))
    strong = Rate(jnp.asarray(0.25, jnp.float32))
    assert strong.state["config"]["rate"] == {"shape": [], "dtype": "float32"}
    assert from_registry(reg, reg.store(strong, weights=strong.serialize_weights()))(x).dtype == (
        jnp.float32
    )


def test_float64_weights_without_x64_say_how_to_load_them():
    with jax.enable_x64(True):
        op = Rate(jnp.asarray([0.25], jnp.float64))
        blob, state = op.serialize_weights(), op.state
        assert Rate.from_state(state).with_weights(blob).rate.dtype == jnp.float64
    with jax.enable_x64(False):
        with pytest.raises(WeightsError, match=r"\.rate.*float64.*64-bit types are off.*x64"):
            Rate.from_state(state).with_weights(blob)
