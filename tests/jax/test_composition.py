"""Composition never depends on bracketing, and parameters are found wherever they sit.

``pre | Lin | Lin`` with a `Lambda` first once built a plain `Sequential` (an opaque
leaf to ``eqx.filter_grad``) while ``pre | (Lin | Lin)`` built a `JaxSequential`:
the same pipeline trained in one bracketing and silently not in the other. The
property tests build random pipelines from every kind of step in random
bracketings and check that the class, the steps, the output and the gradient of
every parameter are the same.
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gradpipe as gp
from gradpipe.jax import JaxOperator, JaxSequential, from_registry, serialize_weights


class Lin(JaxOperator):
    w: jax.Array

    def _apply(self, x):
        return self.w * x + 0.5


class Shift(gp.Operator):
    def __init__(self, by: float):
        self.by = by

    def _apply(self, x):
        return x + self.by


def _sin():
    return gp.Lambda(jnp.sin, name="sin")


def _graph_of(step):
    x = gp.Input("x")
    return gp.Graph(inputs=[x], outputs=step(x))


def _fanout_of(a, b):
    return gp.Fanout([a, b]) | gp.Lambda(lambda t: t[0] * t[1], name="product")


# Each atom builds one fresh step: (kind, number of Lin parameters it holds).
ATOMS = {
    "lambda": (_sin, 0),
    "operator": (lambda: Shift(0.25), 0),
    "lin": (lambda: Lin(jnp.linspace(0.5, 1.5, 3)), 1),
    "sequential": (lambda: gp.Sequential([Shift(0.1), _sin()]), 0),
    "sequential_of_lin": (lambda: gp.Sequential([Lin(jnp.full(3, 0.9)), _sin()]), 1),
    "jax_sequential": (lambda: JaxSequential([Lin(jnp.full(3, 1.1))]), 1),
    "graph": (lambda: _graph_of(Lin(jnp.full(3, 0.8))), 1),
    "fanout": (lambda: _fanout_of(Lin(jnp.full(3, 0.7)), _sin()), 1),
    "identity": (gp.Identity, 0),
}


def _bracketings(n):
    """A strategy for binary trees with ``n`` leaves (leaf = its index)."""

    def split(lo, hi):
        if hi - lo == 1:
            return st.just(lo)
        return st.integers(lo + 1, hi - 1).flatmap(
            lambda mid: st.tuples(split(lo, mid), split(mid, hi))
        )

    return split(0, n)


def _compose(tree, steps):
    if isinstance(tree, int):
        return steps[tree]
    return _compose(tree[0], steps) | _compose(tree[1], steps)


def _flat(pipeline):
    """The steps of a pipeline, flattening only what ``|`` flattens."""
    if type(pipeline) in (gp.Sequential, JaxSequential):
        return list(pipeline.operators)
    return [pipeline]


def _loss(pipeline, x):
    return jnp.sum(pipeline(x) ** 2)


def _grads(pipeline, x):
    grads = eqx.filter_grad(_loss)(pipeline, x)
    return [leaf for leaf in jax.tree_util.tree_leaves(grads) if eqx.is_array(leaf)]


@settings(max_examples=40, deadline=None)
@given(
    kinds=st.lists(st.sampled_from(sorted(ATOMS)), min_size=2, max_size=5),
    data=st.data(),
)
def test_random_compositions_do_not_depend_on_bracketing(kinds, data):
    steps = [ATOMS[kind][0]() for kind in kinds]
    params = sum(ATOMS[kind][1] for kind in kinds)
    first = data.draw(_bracketings(len(steps)), label="first")
    second = data.draw(_bracketings(len(steps)), label="second")
    a, b = _compose(first, steps), _compose(second, steps)
    assert type(a) is type(b)
    assert [id(s) for s in _flat(a)] == [id(s) for s in _flat(b)]
    x = jnp.linspace(0.1, 0.3, 3)
    np.testing.assert_allclose(a(x), b(x), rtol=1e-6)
    grads_a, grads_b = _grads(a, x), _grads(b, x)
    assert len(grads_a) == len(grads_b) == params  # every parameter found, in both
    for ga, gb in zip(grads_a, grads_b):
        np.testing.assert_allclose(ga, gb, rtol=1e-6)
        assert np.any(ga != 0)
    if any(isinstance(s, JaxOperator) for s in _flat(a)):
        assert isinstance(a, JaxSequential)


def test_lambda_first_then_two_parameters_trains():
    """The issue's example: an optax loop over ``pre | Lin | Lin`` trains."""
    pre = gp.Lambda(lambda x: x / 2.0, name="half")
    pipeline = pre | Lin(jnp.ones(3)) | Lin(jnp.ones(3))
    assert isinstance(pipeline, JaxSequential)
    assert type(pre | (Lin(jnp.ones(3)) | Lin(jnp.ones(3)))) is JaxSequential
    x, target = jnp.ones(3), jnp.full(3, 3.0)

    def loss(p):
        return jnp.sum((p(x) - target) ** 2)

    optimizer = optax.adam(0.05)
    state = optimizer.init(eqx.filter(pipeline, eqx.is_array))
    before = loss(pipeline)
    for _ in range(50):
        grads = eqx.filter_grad(loss)(pipeline)
        updates, state = optimizer.update(grads, state)
        pipeline = eqx.apply_updates(pipeline, updates)
    assert loss(pipeline) < 0.01 * before


@pytest.mark.parametrize("kind", ["sequential", "fanout", "graph"])
def test_parameters_inside_core_containers_train(kind):
    """A Lin inside a plain Sequential, a Fanout or a Graph is reached and updated."""
    pipeline = {
        "sequential": lambda: gp.Sequential([Lin(jnp.ones(3)), Lin(jnp.ones(3))]),
        "fanout": lambda: _fanout_of(Lin(jnp.ones(3)), Lin(jnp.ones(3))),
        "graph": lambda: _graph_of(Lin(jnp.ones(3))) | _graph_of(Lin(jnp.ones(3))),
    }[kind]()
    x, target = jnp.ones(3), jnp.full(3, 3.0)

    def loss(p):
        return jnp.sum((p(x) - target) ** 2)

    optimizer = optax.adam(0.05)
    state = optimizer.init(eqx.filter(pipeline, eqx.is_array))
    before = loss(pipeline)
    for _ in range(50):
        grads = eqx.filter_grad(loss)(pipeline)
        updates, state = optimizer.update(grads, state)
        pipeline = eqx.apply_updates(pipeline, updates)
    assert loss(pipeline) < 0.05 * before
    assert type(pipeline).__name__ in ("Sequential", "JaxSequential")


def test_nested_compositions_round_trip_through_the_registry(tmp_path):
    """State and weights of a nested composition survive a store and a load."""
    inner = gp.Sequential([Shift(0.5), Lin(jnp.asarray([1.0, 2.0, 3.0]))])
    pipeline = Shift(1.0) | gp.Fanout([inner, Lin(jnp.full(3, 2.0))]) | gp.Lambda(sum)
    pipeline = pipeline[:2]  # the Lambda cannot be saved
    assert type(pipeline) is gp.Sequential  # its parameters sit in the Fanout
    reg = gp.Registry(tmp_path)
    ref = reg.store(pipeline, weights=serialize_weights(pipeline))
    back = from_registry(reg, ref)
    x = jnp.asarray([0.1, 0.2, 0.3])
    for got, want in zip(back(x), pipeline(x)):
        np.testing.assert_array_equal(got, want)
    assert back.state == pipeline.state


def test_a_subclass_of_sequential_stays_one_step():
    class Loud(gp.Sequential):
        pass

    loud, s0, s2 = Loud([Shift(1.0)]), Shift(0.0), Shift(2.0)
    assert (loud | s2).operators == [loud, s2]
    assert (s2 | loud).operators == [s2, loud]
    assert ((s0 | loud) | s2).operators == (s0 | (loud | s2)).operators == [s0, loud, s2]
