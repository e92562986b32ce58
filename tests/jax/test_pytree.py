"""JaxOperator and JaxSequential: PyTree operators that keep the Operator interface."""

import json

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradpipe as gp
from gradpipe.jax import JaxOperator, JaxSequential

K = np.array([0.002, 0.004, 0.006, 0.008, 0.010])


class Invert(JaxOperator):
    log_k: jax.Array

    def _apply(self, y):
        return -jnp.log(y) / jnp.exp(self.log_k)


class Combine(JaxOperator):
    log_k: jax.Array

    def _apply(self, z):
        k = jnp.exp(self.log_k)
        w = (k * jnp.exp(-k * z)) ** 2
        return jnp.sum(w * z, axis=-1) / jnp.sum(w, axis=-1)


class Affine(JaxOperator):
    """A custom __init__: parameters stored under their own names, one static."""

    weight: jax.Array
    offset: float = eqx.field(static=True)
    mode: str = eqx.field(static=True)

    def __init__(self, weight, offset=0.0, mode="plain"):
        self.weight = jnp.asarray(weight)
        self.offset = float(offset)
        self.mode = mode

    def _apply(self, x):
        out = self.weight * x + self.offset
        return jnp.abs(out) if self.mode == "abs" else out


def _pipeline(log_k=None):
    log_k = jnp.log(K) if log_k is None else log_k
    return JaxSequential([Invert(log_k), Combine(log_k)])


def _data():
    alpha = jnp.array([10.0, 150.0, 290.0])
    noise = 1e-3 * jnp.cos(jnp.arange(15.0)).reshape(3, 5)
    return alpha, jnp.exp(-alpha[:, None] * K) * (1 + noise)


def test_array_fields_are_leaves_and_config_fields_are_not():
    assert len(jax.tree_util.tree_leaves(_pipeline())) == 2
    op = Affine(jnp.ones(3), offset=2.0, mode="abs")
    assert jax.tree_util.tree_leaves(op) == [op.weight]


def test_config_value_left_as_a_leaf_is_refused_with_the_fix():
    class Scale(JaxOperator):
        factor: float

        def _apply(self, x):
            return self.factor * x

    with pytest.raises(TypeError, match=r"Scale\.factor .*eqx\.field\(static=True\).*jnp\.asarray"):
        Scale(2.0)


def test_custom_init_keeps_get_config_and_state_round_trips(x64):
    op = Affine(jnp.array([1.0, -2.0]), offset=0.5, mode="abs")
    assert op.get_config() == {
        "weight": {"shape": [2], "dtype": "float64"},
        "offset": 0.5,
        "mode": "abs",
    }
    rebuilt = gp.from_state(json.loads(json.dumps(op.state)))
    assert type(rebuilt) is Affine and (rebuilt.offset, rebuilt.mode) == (0.5, "abs")
    # rebuilt from the state alone: placeholders are NaN until the weights arrive
    assert np.isnan(np.asarray(rebuilt.weight)).all()
    loaded = rebuilt.with_weights(op.serialize_weights())
    np.testing.assert_array_equal(loaded(jnp.array([3.0, 1.0])), op(jnp.array([3.0, 1.0])))


def test_custom_init_without_the_attribute_names_the_parameter():
    class Renamed(JaxOperator):
        log_k: jax.Array

        def __init__(self, k):
            self.log_k = jnp.log(jnp.asarray(k))

        def _apply(self, x):
            return x

    with pytest.raises(gp.ConfigError, match="'k'"):
        Renamed(K).get_config()


def test_state_json_holds_shapes_and_dtypes_never_values(x64):
    seq = _pipeline(jnp.log(jnp.asarray(K)) + 0.123456789)
    text = json.dumps(seq.state)
    assert "0.123456" not in text and "-6.09" not in text
    inner = seq.state["config"]["operators"][0]["$operator"]["config"]
    assert inner == {"log_k": {"shape": [5], "dtype": "float64"}}


def test_filter_grad_reaches_every_operator_and_tree_at_replaces_a_step(x64):
    alpha, y = _data()
    seq = _pipeline()

    def loss(s):
        return jnp.mean((jax.vmap(s)(y) - alpha) ** 2)

    grads = eqx.filter_grad(loss)(seq)
    assert all(jnp.any(g.log_k != 0) for g in grads.operators)
    swapped = eqx.tree_at(lambda s: s.operators[0], seq, Invert(jnp.log(K * 1.1)))
    assert type(swapped) is JaxSequential and eqx.tree_equal(swapped.operators[1], seq.operators[1])
    np.testing.assert_allclose(swapped(y[1]), seq(y[1]) / 1.1, rtol=1e-4)


def test_two_pipelines_of_equal_config_share_one_compiled_function(x64):
    alpha, y = _data()
    traces = []

    def loss(s, y):
        traces.append(1)
        return jnp.mean((jax.vmap(s)(y) - alpha) ** 2)

    a, b = _pipeline(), _pipeline(jnp.log(K * 1.05))
    for jit in (eqx.filter_jit, jax.jit):
        traces.clear()
        f = jit(loss)
        assert f(a, y) != f(b, y)
        assert len(traces) == 1
    traces.clear()
    f = eqx.filter_jit(loss)
    f(JaxSequential([Affine(1.0, offset=1.0), Combine(jnp.log(K))]), y)
    f(JaxSequential([Affine(2.0, offset=1.0), Combine(jnp.log(K))]), y)
    f(JaxSequential([Affine(2.0, offset=3.0), Combine(jnp.log(K))]), y)  # new config
    assert len(traces) == 2


def test_sequential_interface_is_kept():
    inv, comb = Invert(jnp.log(K)), Combine(jnp.log(K))
    seq = inv | comb
    assert type(seq) is JaxSequential and seq.operators == (inv, comb)
    assert isinstance(seq, gp.Sequential) and isinstance(seq, eqx.Module)
    assert len(seq | seq) == 4 and len(seq | gp.Sequential([gp.Identity()])) == 3
    left = gp.Identity() | seq  # a plain operator on the left joins the JaxSequential
    assert type(left) is JaxSequential and len(left) == 3
    assert seq[0] is inv and type(seq[1:]) is JaxSequential and seq[1:].operators == (comb,)
    assert list(seq) == [inv, comb]
    y = jnp.exp(-100.0 * jnp.asarray(K, jnp.float32))
    table = seq.summary(y)
    assert "Invert" in table and "float32[5]" in table
    assert "Invert(log_k=float32[5])" in repr(seq)


def test_filter_grad_reaches_a_pipeline_that_starts_with_a_plain_operator():
    seq = Affine(jnp.asarray([2.0, 3.0])) | Affine(jnp.asarray([1.0, 1.0]))
    pipe = gp.Identity() | seq
    grads = eqx.filter_grad(lambda p, x: jnp.sum(p(x)))(pipe, jnp.ones(2))
    np.testing.assert_array_equal(grads.operators[1].weight, [1.0, 1.0])
    np.testing.assert_array_equal(grads.operators[2].weight, [2.0, 3.0])


def test_jit_of_an_operator_itself_uses_identity_hashing():
    seq = _pipeline(jnp.log(jnp.asarray(K, jnp.float32)))
    y = jnp.exp(-100.0 * jnp.asarray(K, jnp.float32))
    assert hash(seq) == object.__hash__(seq)
    assert seq == seq and seq != _pipeline(seq.operators[0].log_k)
    np.testing.assert_allclose(jax.jit(seq)(y), seq(y), rtol=1e-6)


def test_plain_operator_step_is_an_opaque_leaf():
    seq = JaxSequential([Invert(jnp.log(K)), gp.Lambda(jnp.sum)])
    y = jnp.exp(-100.0 * K)
    assert eqx.filter_jit(lambda s, y: s(y))(seq, y) == pytest.approx(500.0, rel=1e-5)
    with pytest.raises(TypeError, match=r"JaxSequential\.operators\[1\]"):
        JaxSequential([Invert(jnp.log(K)), jnp.sum])


def test_vmap_over_a_batch_of_whole_pipelines(x64):
    _, y = _data()
    pipelines = [_pipeline(jnp.log(K * f)) for f in (0.9, 1.0, 1.1)]
    stacked = jax.tree_util.tree_map(lambda *leaves: jnp.stack(leaves), *pipelines)
    assert type(stacked) is JaxSequential and stacked.operators[0].log_k.shape == (3, 5)
    batched = jax.vmap(lambda p: p(y[1]))(stacked)
    np.testing.assert_allclose(batched, [p(y[1]) for p in pipelines], rtol=1e-12)
