"""What the residual cache's keys and bounds promise, pinned one by one: every part of
an input takes part in its key, equality (never the fingerprint) decides a hit, and
the byte and entry bounds are exact."""

import jax
import jax.numpy as jnp
import numpy as np
import pydantic
import pytest

from gradpipe.component import (
    Array,
    CacheLimits,
    Component,
    ContentKey,
    Differentiable,
    ResidualCache,
    Residuals,
    _keys,
)


class In(pydantic.BaseModel):
    x: Differentiable[Array[np.float32, (None,)]]
    w: Differentiable[Array[np.float32, (None,)]]
    c: Array[np.complex64, (None,)]


class Out(pydantic.BaseModel):
    y: Differentiable[Array[np.float32, (None,)]]


def forward(d):
    # The gradient with respect to w depends on x and on both parts of c.
    return {"y": d["w"] * d["x"] * jnp.real(d["c"] * d["c"])}


def expected_grad_w(x, c):
    return np.asarray(x) * np.real(np.asarray(c) ** 2)


ONES = np.ones(3, np.float32)


def inputs(x=1.0, w=1.0, c=1 + 0.5j):
    return {
        "x": jnp.full(3, x, jnp.float32),
        "w": jnp.full(3, w, jnp.float32),
        "c": jnp.full(3, c, jnp.complex64),
    }


@pytest.mark.parametrize(
    "first, second",
    [
        (inputs(c=1 + 0.5j), inputs(c=1 + 2j)),  # only the imaginary part differs
        (inputs(x=1.0), inputs(x=2.0)),  # only the first device array differs
    ],
)
def test_an_input_differing_in_one_part_is_never_served_the_other_gradient(first, second):
    comp = Component(forward, inputs=In, outputs=Out)
    comp.apply(first)
    grad = comp.vjp(second, ["w"], ["y"], {"y": ONES})["w"]
    np.testing.assert_allclose(grad, expected_grad_w(second["x"], second["c"]), rtol=1e-6)


def test_equality_decides_even_when_every_fingerprint_collides(monkeypatch):
    monkeypatch.setattr(_keys, "fingerprint", lambda arrays: jnp.uint32(7))
    comp = Component(forward, inputs=In, outputs=Out)
    firsts = [inputs(x=1.0), inputs(x=2.0)]
    for first in firsts:
        comp.apply(first)
    second = inputs(x=3.0)
    grad = comp.vjp(second, ["w"], ["y"], {"y": ONES})["w"]
    np.testing.assert_allclose(grad, expected_grad_w(second["x"], second["c"]), rtol=1e-6)
    grad = comp.vjp(firsts[1], ["w"], ["y"], {"y": ONES})["w"]
    np.testing.assert_allclose(grad, expected_grad_w(firsts[1]["x"], firsts[1]["c"]))


def test_a_weak_type_is_part_of_a_device_key():
    weak, strong = jnp.asarray(2.0), jnp.asarray(2.0, jnp.float32)
    assert weak.weak_type and not strong.weak_type
    assert ContentKey("s", (weak,)) != ContentKey("s", (strong,))
    assert ContentKey("s", (weak,)) == ContentKey("s", (jnp.asarray(2.0),))


def test_a_permuted_array_gets_another_fingerprint():
    a = jnp.arange(8, dtype=jnp.float32)
    assert int(_keys.fingerprint((a,))) != int(_keys.fingerprint((a[::-1],)))


# -- bounds ------------------------------------------------------------------------------


def entry_bytes(comp, first):
    probe = Component(forward, inputs=In, outputs=Out)
    probe.apply(first)
    return probe.residual_cache.info().nbytes


def test_an_entry_of_exactly_max_bytes_is_kept():
    first = inputs()
    size = entry_bytes(None, first)
    comp = Component(forward, inputs=In, outputs=Out, residual_cache=CacheLimits(8, size))
    comp.apply(first)
    assert comp.residual_cache.info().nbytes == size
    comp2 = Component(forward, inputs=In, outputs=Out, residual_cache=CacheLimits(8, 2 * size))
    comp2.apply(first)
    comp2.apply(inputs(x=2.0))
    assert len(comp2.residual_cache) == 2  # two entries fill max_bytes exactly
    comp3 = Component(forward, inputs=In, outputs=Out, residual_cache=CacheLimits(8, size - 1))
    comp3.apply(first)
    assert len(comp3.residual_cache) == 0


def test_bytes_are_given_back_on_eviction_and_clear():
    size = entry_bytes(None, inputs())
    comp = Component(forward, inputs=In, outputs=Out, residual_cache=CacheLimits(max_entries=2))
    for x in (1.0, 2.0, 3.0, 4.0):
        comp.apply(inputs(x=x))
    info = comp.residual_cache.info()
    assert (info.entries, info.nbytes) == (2, 2 * size)
    comp.residual_cache.clear()
    assert comp.residual_cache.info().nbytes == 0
    comp.apply(inputs())
    assert comp.residual_cache.info().nbytes == size


def test_a_hit_makes_an_entry_recently_used():
    comp = Component(forward, inputs=In, outputs=Out, residual_cache=CacheLimits(max_entries=2))
    a, b, c = inputs(x=1.0), inputs(x=2.0), inputs(x=3.0)
    comp.apply(a)
    comp.apply(b)
    comp.vjp(a, ["w"], ["y"], {"y": ONES})  # a hit: a is now the most recent
    comp.apply(c)  # evicts b
    hits = comp.residual_cache.info().hits
    comp.vjp(a, ["w"], ["y"], {"y": ONES})
    assert comp.residual_cache.info().hits == hits + 1
    comp.vjp(b, ["w"], ["y"], {"y": ONES})
    assert comp.residual_cache.info().hits == hits + 1


def test_applying_another_numpy_input_of_the_same_kind_keeps_its_residuals():
    comp = Component(forward, inputs=In, outputs=Out)
    host = [{k: np.asarray(v) for k, v in inputs(x=x).items()} for x in (1.0, 2.0)]
    for each in host:
        comp.apply(each)
    assert len(comp.residual_cache) == 2
    comp.vjp(host[1], ["w"], ["y"], {"y": ONES})
    assert comp.residual_cache.info().hits == 1


def test_touch_of_an_entry_dropped_meanwhile_says_it_is_gone():
    cache = ResidualCache()
    key = ContentKey("s", (jnp.ones(2),))
    cache.put(key, Residuals(None, None, None))
    twin = cache.twin(key)
    assert twin is not None
    cache.clear()
    assert cache.touch(twin) is False


def test_a_dead_key_is_dropped_even_when_its_residuals_live():
    comp = Component(forward, inputs=In, outputs=Out, residuals="auto")
    first = inputs()
    comp.apply(first)
    first["x"].delete()
    second = inputs(x=2.0)
    grad = comp.vjp(second, ["w"], ["y"], {"y": ONES})["w"]
    np.testing.assert_allclose(grad, expected_grad_w(second["x"], second["c"]), rtol=1e-6)
    assert jax.tree.leaves(second)  # the new input is untouched
