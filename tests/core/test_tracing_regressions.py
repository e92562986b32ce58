"""Known failure modes of pipeline libraries under JAX, each shown handled.

ARCHITECTURE.md ("Where the anchors stand", pipelines) lists them.
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradpipe as gp
from gradpipe import Cache, Graph, Input, Lambda, Operator, Registry


def test_cache_under_jit_refuses_instead_of_returning_first_entry():
    cache = Cache(Lambda(lambda x: x + 1))
    twice = gp.Sequential([cache, Lambda(lambda x: 10 * x), cache])
    x = jnp.arange(1.0, 6.0)
    np.testing.assert_array_equal(twice(x), [21, 31, 41, 51, 61])
    with pytest.raises(TypeError, match=r"Cache cannot key a traced value.*outside the jitted"):
        jax.jit(twice)(x)
    # no tracer was stored: the cache still answers correctly afterwards
    assert cache.info()["size"] == 2
    np.testing.assert_array_equal(twice(x), [21, 31, 41, 51, 61])


def test_cache_keys_containers_of_large_arrays_by_content_not_repr():
    cache = Cache(Lambda(lambda pair: float(pair[0].sum() + pair[1].sum())))
    a = np.zeros(10_000)
    b = a.copy()
    b[5_000] = 7.0  # repr of both arrays is the same truncated text
    assert repr(a) == repr(b)
    assert cache((a, a)) == 0.0
    assert cache((a, b)) == 7.0


@pytest.mark.parametrize("name", ["Snapshot", "Tap", "Sink", "Profile"])
def test_observers_refuse_to_run_at_trace_time_and_leak_no_tracer(name):
    snap, sink, prof = gp.Snapshot(), gp.Sink(), gp.Profile()
    seen = []
    op = {
        "Snapshot": snap.at("z"),
        "Tap": gp.Tap(seen.append),
        "Sink": sink,
        "Profile": prof.wrap(Lambda(jnp.sin)),
    }[name]
    with pytest.raises(TypeError, match=name):
        jax.jit(op)(jnp.ones(3))
    assert snap.captures == {} and sink.items == [] and seen == [] and prof.stats == {}


@jax.tree_util.register_dataclass
@dataclasses.dataclass
class State:
    value: jax.Array


@pytest.mark.parametrize("name", ["Snapshot", "Tap", "Sink", "Profile", "Branch", "Cache"])
def test_tracers_inside_a_registered_pytree_are_refused(name):
    snap, sink, prof, seen = gp.Snapshot(), gp.Sink(), gp.Profile(), []
    op = {
        "Snapshot": snap.at("z"),
        "Tap": gp.Tap(seen.append),
        "Sink": sink,
        "Profile": prof.wrap(gp.Identity()),
        "Branch": gp.Branch(lambda s: True, gp.Identity(), gp.Identity()),
        "Cache": Cache(gp.Identity()),
    }[name]
    with pytest.raises(TypeError, match=rf"{name} cannot"):
        jax.jit(lambda s: op(s).value * 2)(State(jnp.ones(3)))
    assert snap.captures == {} and sink.items == [] and seen == [] and prof.stats == {}


@pytest.mark.parametrize("name, alternative", [("Branch", "CondBranch"), ("Switch", "CondSwitch")])
def test_branching_on_a_tracer_names_the_alternative(name, alternative):
    op = (
        gp.Branch(lambda x: x.sum() > 0, Lambda(jnp.sin), Lambda(jnp.cos))
        if name == "Branch"
        else gp.Switch(lambda x: 0, [Lambda(jnp.sin)])
    )
    with pytest.raises(TypeError, match=rf"{name} cannot choose.*gradpipe\.jax\.{alternative}"):
        jax.jit(op)(jnp.ones(3))


class Scale(Operator):
    def __init__(self, factor):
        self.factor = factor

    def _apply(self, x):
        return self.factor * x


def test_registry_refuses_numpy_scalars_instead_of_storing_a_string(tmp_path):
    reg = Registry(tmp_path)
    with pytest.raises(gp.ConfigError, match=r"Scale\.factor = np\.float32\(2\.0\)"):
        reg.store(Scale(np.float32(2.0)))
    assert reg.list() == []
    ref = reg.store(Scale(float(np.float32(2.0))))
    back = reg.load(ref)
    assert type(back.factor) is float and back.factor == 2.0


def test_graph_mode_keeps_keyword_arguments():
    class Affine(Operator):
        def _apply(self, x, *, scale=1.0, shift=0.0):
            return scale * x + shift

    x = Input("x")
    g = Graph(inputs=[x], outputs=Affine()(x, scale=3.0, shift=1.0))
    assert g(2.0) == 7.0


def test_graph_node_holding_a_dict_can_be_indexed():
    x = Input("x")
    stats = Lambda(lambda v: {"mean": v.mean(), "max": v.max()})(x)
    g = Graph(inputs=[x], outputs=Lambda(lambda a, b: a - b)(stats["max"], stats["mean"]))
    assert g(np.array([1.0, 2.0, 6.0])) == 3.0
    assert float(jax.jit(g)(jnp.array([1.0, 2.0, 6.0]))) == 3.0
