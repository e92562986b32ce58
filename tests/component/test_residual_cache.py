"""The residual cache: an adversarial key suite (cache on and off bitwise equal),
bounds, ownership, no forward recomputation on a hit, and 8 threads at once."""

import threading

import jax
import jax.numpy as jnp
import numpy as np
import pydantic
import pytest

from gradpipe.component import Array, CacheLimits, Component, Differentiable
from gradpipe.component import _keys as keys

X = Differentiable[Array[np.float32, (4,)]]
X0 = np.array([0.3, -1.2, 0.7, 2.0], np.float32)


class Out(pydantic.BaseModel):
    y: Differentiable[Array[np.float32, (4,)]]


def same_bits(a, b):
    la, lb = jax.tree.leaves(a), jax.tree.leaves(b)
    assert jax.tree.structure(a) == jax.tree.structure(b)
    for u, v in zip(la, lb):
        u, v = np.asarray(u), np.asarray(v)
        assert u.dtype == v.dtype and u.shape == v.shape
        assert u.tobytes() == v.tobytes(), (u, v)


def check_pair(make, first, second, same_input=False):
    """With the cache on, ``first`` is applied (its residuals kept), then every
    endpoint runs on ``second``; each result must be bitwise the cache-off result, and
    ``second`` must miss the cache unless it is ``same_input``."""
    on, off = make(True), make(False)
    ct = {"y": np.linspace(0.5, 2.0, 4, dtype=np.float32)}
    on.apply(first)
    before = on.residual_cache.info()
    same_bits(on.vjp(second, ["x"], ["y"], ct), off.vjp(second, ["x"], ["y"], ct))
    after = on.residual_cache.info()
    if same_input:
        assert after.hits == before.hits + 1, "an equal input missed the cache"
    else:
        assert after.misses == before.misses + 1, "a different input hit the cache"
    same_bits(on.apply(second), off.apply(second))
    same_bits(on.vjp(second, ["x"], ["y"], ct), off.vjp(second, ["x"], ["y"], ct))
    same_bits(on.vjp(first, ["x"], ["y"], ct), off.vjp(first, ["x"], ["y"], ct))
    tangent = {"x": np.ones(4, np.float32)}
    same_bits(on.jvp(second, ["x"], ["y"], tangent), off.jvp(second, ["x"], ["y"], tangent))
    same_bits(on.jacobian(second, ["x"], ["y"]), off.jacobian(second, ["x"], ["y"]))
    return on


def component_of(model, fn):
    return lambda cache: Component(fn, inputs=model, outputs=Out, residual_cache=cache)


# -- the adversarial key suite -------------------------------------------------------


@pytest.fixture(params=["fingerprint", "colliding"])
def fingerprints(request, monkeypatch):
    """Run a case with the real fingerprint, then with one where every key collides,
    so that the exact comparison alone must tell the inputs apart."""
    if request.param == "colliding":
        monkeypatch.setattr(keys, "fingerprint", lambda arrays: 0)


def test_integers_minus_one_and_minus_two():
    class In(pydantic.BaseModel):
        x: X
        n: int

    make = component_of(In, lambda d: {"y": jnp.sin(d["x"]) * d["n"]})
    check_pair(make, {"x": X0, "n": -1}, {"x": X0, "n": -2})


@pytest.mark.parametrize("first, second", [(1, 1.0), (1, True), (1.0, True), (True, 1)])
def test_one_one_point_zero_and_true_differ(first, second):
    class In(pydantic.BaseModel):
        x: X
        n: bool | int | float

    def fn(d):
        factor = {bool: 2.0, int: 3.0, float: 5.0}[type(d["n"])]
        return {"y": jnp.sin(d["x"]) * factor}

    make = component_of(In, fn)
    check_pair(make, {"x": X0, "n": first}, {"x": X0, "n": second})


def test_equal_bytes_under_different_shapes(fingerprints):
    class In(pydantic.BaseModel):
        x: X
        k: Array[np.int64, ...]

    make = component_of(In, lambda d: {"y": jnp.sin(d["x"]) * d["k"].shape[0] + d["k"].sum()})
    flat = np.array([1, 2, 3, 4], np.int64)
    with jax.enable_x64(True):
        check_pair(make, {"x": X0, "k": flat}, {"x": X0, "k": flat.reshape(2, 2)})


def test_equal_bytes_under_different_dtypes(fingerprints):
    class In(pydantic.BaseModel):
        x: X
        items: list[Array[np.float32, (4,)] | None]

    # Float bits of 1.0 read as int32 (1065353216) cast to float32 differ; the key
    # must follow what the computation sees, not the bytes the caller sent.
    bits = np.ones(4, np.float32).view(np.int32)
    make = component_of(In, lambda d: {"y": jnp.sin(d["x"] * d["items"][0])})
    check_pair(make, {"x": X0, "items": [np.ones(4, np.float32)]}, {"x": X0, "items": [bits]})


def test_negative_zero_and_zero_differ(fingerprints):
    class In(pydantic.BaseModel):
        x: X
        c: Array[np.float32, ()]
        t: float

    make = component_of(
        In, lambda d: {"y": jnp.sin(d["x"]) * jnp.arctan2(d["c"], -1.0) * jnp.sign(d["t"] + 0.0)}
    )
    check_pair(make, {"x": X0, "c": 0.0, "t": 1.0}, {"x": X0, "c": -0.0, "t": 1.0})
    on = check_pair(make, {"x": X0, "c": 1.0, "t": 0.0}, {"x": X0, "c": 1.0, "t": -0.0})
    assert on.residual_cache.info().entries == 2
    zeros = np.zeros(4, np.float32)
    check_pair(make, {"x": zeros, "c": 1.0, "t": 1.0}, {"x": -zeros, "c": 1.0, "t": 1.0})


def test_nan_equals_itself(fingerprints):
    class In(pydantic.BaseModel):
        x: X
        t: float

    make = component_of(In, lambda d: {"y": jnp.sin(d["x"]) + d["t"]})
    x = X0.copy()
    x[1] = np.nan
    check_pair(make, {"x": x, "t": float("nan")}, {"x": x * 1, "t": float("nan")}, True)
    other_nan = np.array([np.nan], np.float32).view(np.uint32) ^ np.uint32(1)
    y = x.copy()
    y[1] = other_nan.view(np.float32)[0]  # another NaN payload: different bits
    check_pair(make, {"x": x, "t": 1.0}, {"x": y, "t": 1.0})


def test_a_permuted_array_differs(fingerprints):
    class In(pydantic.BaseModel):
        x: X

    make = component_of(In, lambda d: {"y": jnp.sin(d["x"]) * jnp.arange(1.0, 5.0)})
    check_pair(make, {"x": X0}, {"x": X0[::-1].copy()})
    check_pair(make, {"x": X0}, {"x": X0[[1, 0, 2, 3]]})


def test_dicts_with_equal_keys_and_swapped_values_differ(fingerprints):
    class In(pydantic.BaseModel):
        x: X
        table: dict[str, Array[np.float32, (4,)]]

    make = component_of(In, lambda d: {"y": jnp.sin(d["x"] * d["table"]["a"]) + d["table"]["b"]})
    u, v = np.full(4, 0.5, np.float32), np.full(4, 2.0, np.float32)
    check_pair(make, {"x": X0, "table": {"a": u, "b": v}}, {"x": X0, "table": {"a": v, "b": u}})
    # Key order alone is not a difference: the same input hits.
    on = make(True)
    on.apply({"x": X0, "table": {"a": u, "b": v}})
    on.vjp({"x": X0, "table": {"b": v, "a": u}}, ["x"], ["y"], {"y": np.ones(4)})
    assert on.residual_cache.info().hits == 1


def test_a_static_dict_in_another_order_is_another_input(fingerprints):
    class In(pydantic.BaseModel):
        x: X
        weights: dict[str, float]

    def fn(d):
        w = jnp.asarray(list(d["weights"].values()) * 2, jnp.float32)
        return {"y": jnp.sin(d["x"]) * w}

    make = component_of(In, fn)
    first = {"x": X0, "weights": {"a": 1.0, "b": 2.0}}
    second = {"x": X0, "weights": {"b": 2.0, "a": 1.0}}
    check_pair(make, first, second)
    comp = make(True)
    comp.apply(first)
    expected = np.sin(X0) * np.array([2.0, 1.0, 2.0, 1.0], np.float32)
    np.testing.assert_allclose(comp.apply(second)["y"], expected, rtol=1e-6)


def test_two_components_with_equal_inputs_never_share():
    class In(pydantic.BaseModel):
        x: X

    sin = Component(lambda d: {"y": jnp.sin(d["x"])}, inputs=In, outputs=Out)
    cos = Component(lambda d: {"y": jnp.cos(d["x"])}, inputs=In, outputs=Out)
    ref = Component(lambda d: {"y": jnp.sin(d["x"])}, inputs=In, outputs=Out, residual_cache=False)
    ct = {"y": np.ones(4, np.float32)}
    sin.apply({"x": X0})
    cos.apply({"x": X0})
    same_bits(sin.vjp({"x": X0}, ["x"], ["y"], ct), ref.vjp({"x": X0}, ["x"], ["y"], ct))
    np.testing.assert_allclose(cos.vjp({"x": X0}, ["x"], ["y"], ct)["x"], -np.sin(X0), rtol=1e-6)
    assert sin.residual_cache is not cos.residual_cache


def test_str_and_none_inputs_with_the_cache_on():
    class In(pydantic.BaseModel):
        x: X
        label: str
        limit: int | None = None
        shift: Array[np.float32, (4,)] | None = None

    def fn(d):
        y = jnp.sin(d["x"]) * (2.0 if d["label"] == "double" else 1.0)
        if d["shift"] is not None:
            y = y + d["shift"]
        return {"y": y if d["limit"] is None else jnp.minimum(y, d["limit"])}

    make = component_of(In, fn)
    check_pair(make, {"x": X0, "label": "double"}, {"x": X0, "label": "single"})
    check_pair(make, {"x": X0, "label": "a", "limit": None}, {"x": X0, "label": "a", "limit": 0})
    check_pair(make, {"x": X0, "label": "a"}, {"x": X0, "label": "a", "shift": np.zeros(4)})
    on = make(True)
    on.apply({"x": X0, "label": "a"})
    on.vjp({"x": X0, "label": "a", "limit": None}, ["x"], ["y"], {"y": np.ones(4)})
    assert on.residual_cache.info().hits == 1


# -- behaviour of the cache ------------------------------------------------------------


class Plain(pydantic.BaseModel):
    x: Differentiable[Array[np.float32, (None,)]]


class PlainOut(pydantic.BaseModel):
    y: Differentiable[Array[np.float32, (None,)]]


def counting_component(cache):
    runs = []

    def fn(d):
        jax.debug.callback(lambda: runs.append(1))
        return {"y": jnp.sin(d["x"]) ** 2}

    return Component(fn, inputs=Plain, outputs=PlainOut, residual_cache=cache), runs


def test_a_hit_runs_no_forward_pass():
    comp, runs = counting_component(True)
    x = {"x": np.linspace(0, 1, 8, dtype=np.float32)}
    ct = {"y": np.ones(8, np.float32)}
    comp.apply(x)
    jax.effects_barrier()
    assert len(runs) == 1
    comp.vjp(x, ["x"], ["y"], ct)
    comp.vjp(x, ["x"], ["y"], ct)
    jax.effects_barrier()
    assert len(runs) == 1
    off, runs_off = counting_component(False)
    off.apply(x)
    off.vjp(x, ["x"], ["y"], ct)
    jax.effects_barrier()
    assert len(runs_off) == 2


def test_a_miss_keeps_residuals_for_the_next_vjp():
    comp, runs = counting_component(True)
    x = {"x": np.ones(3, np.float32)}
    ct = {"y": np.ones(3, np.float32)}
    comp.vjp(x, ["x"], ["y"], ct)
    comp.vjp(x, ["x"], ["y"], ct)
    jax.effects_barrier()
    assert len(runs) == 1
    assert comp.residual_cache.info().hits == 1


def test_bounded_by_entries_and_bytes():
    comp, _ = counting_component(CacheLimits(max_entries=2))
    inputs = [{"x": np.full(5, v, np.float32)} for v in (0.1, 0.2, 0.3)]
    for x in inputs:
        comp.apply(x)
    cache = comp.residual_cache
    assert cache.info().entries == 2
    comp.vjp(inputs[0], ["x"], ["y"], {"y": np.ones(5)})
    assert cache.info().hits == 0  # the oldest entry was dropped
    comp.vjp(inputs[2], ["x"], ["y"], {"y": np.ones(5)})
    assert cache.info().hits == 1

    _, residuals = comp.apply_keep({"x": np.ones(1000, np.float32)})
    small, _ = counting_component(CacheLimits(max_entries=8, max_bytes=2 * 4000 + 100))
    small.apply({"x": np.ones(1000, np.float32)})
    assert small.residual_cache.info().nbytes <= 2 * 4000 + 100
    small.apply({"x": np.full(10_000, 0.5, np.float32)})  # larger than the bound
    info = small.residual_cache.info()
    assert info.entries <= 1 and info.nbytes <= 2 * 4000 + 100
    assert residuals.nbytes >= 4000


def test_apply_keep_and_vjp_from():
    comp, runs = counting_component(False)
    x = np.linspace(0, 1, 6, dtype=np.float32)
    outputs, residuals = comp.apply_keep({"x": x})
    np.testing.assert_allclose(outputs["y"], np.sin(x) ** 2, rtol=1e-6)
    grad = comp.vjp_from(residuals, ["x"], ["y"], {"y": np.ones(6)})["x"]
    np.testing.assert_allclose(grad, 2 * np.sin(x) * np.cos(x), rtol=1e-5, atol=1e-7)
    jax.effects_barrier()
    assert len(runs) == 1
    other, _ = counting_component(False)
    with pytest.raises(ValueError, match="this component"):
        other.vjp_from(residuals, ["x"], ["y"], {"y": np.ones(6)})


def test_eight_threads_get_only_correct_results():
    class In(pydantic.BaseModel):
        x: Differentiable[Array[np.float32, (None,)]]
        c: Array[np.float32, ()]
        mode: int | float

    def fn(d):
        factor = 2.0 if isinstance(d["mode"], float) else 3.0
        return {"y": jnp.sin(d["x"] * factor) * jnp.arctan2(d["c"], -1.0)}

    comp = Component(fn, inputs=In, outputs=PlainOut, residual_cache=CacheLimits(max_entries=3))
    ref = Component(fn, inputs=In, outputs=PlainOut, residual_cache=False)
    rng = np.random.default_rng(0)
    base = rng.normal(size=64).astype(np.float32)
    inputs = [
        {"x": base, "c": 0.0, "mode": 1},
        {"x": base, "c": -0.0, "mode": 1},
        {"x": base, "c": 0.0, "mode": 1.0},
        {"x": base[::-1].copy(), "c": 0.0, "mode": 1},
        {"x": base[:32].copy(), "c": 0.5, "mode": 2},
        {"x": base + 1, "c": 0.5, "mode": 2},
    ]
    cts = [{"y": np.full(len(i["x"]), k + 1, np.float32)} for k, i in enumerate(inputs)]
    expected = [(ref.apply(i), ref.vjp(i, ["x"], ["y"], ct)) for i, ct in zip(inputs, cts)]
    barrier = threading.Barrier(8)
    failures = []

    def work(seed):
        order = np.random.default_rng(seed).integers(0, len(inputs), size=40)
        barrier.wait()
        for k in order:
            try:
                if seed % 2 == 0:
                    same_bits(comp.apply(inputs[k]), expected[k][0])
                same_bits(comp.vjp(inputs[k], ["x"], ["y"], cts[k]), expected[k][1])
            except Exception as error:  # collected, reported below
                failures.append((seed, int(k), repr(error)))

    threads = [threading.Thread(target=work, args=(s,)) for s in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures, failures[:3]
    info = comp.residual_cache.info()
    assert info.hits > 0 and info.entries <= 3


def test_reusing_a_numpy_buffer_right_after_a_call_changes_nothing():
    comp, _ = counting_component(True)
    ref, _ = counting_component(False)
    original = np.linspace(0, 1, 200_000, dtype=np.float32)
    x = original.copy()
    out = comp.apply({"x": x})
    x[:] = 2.0  # the caller reuses the buffer at once
    same_bits(out, ref.apply({"x": original}))
    ct = np.ones(x.size, np.float32)
    grads = comp.vjp({"x": x}, ["x"], ["y"], {"y": ct})  # a miss: x is kept, so copied
    ct[:] = 3.0
    expected = ref.vjp({"x": x.copy()}, ["x"], ["y"], {"y": np.ones(x.size, np.float32)})
    same_bits(grads, expected)
    assert comp.residual_cache.info().hits == 0
    x[:] = 0.5
    comp.vjp({"x": np.full(x.size, 2.0, np.float32)}, ["x"], ["y"], {"y": ct})  # a hit
    ct[:] = 1.0
    same_bits(comp.vjp({"x": np.full(x.size, 2.0, np.float32)}, ["x"], ["y"], {"y": ct}), expected)
    assert comp.residual_cache.info().hits == 2  # the kept key did not follow the buffer


# -- NumPy inputs are compared on the host ---------------------------------------------


def host_and_device_keys(a, b):
    """Keys of ``a`` and ``b`` built from NumPy (host) and from JAX (device) arrays."""
    yield keys.ContentKey((), (a,)), keys.ContentKey((), (b,))
    yield keys.ContentKey((), (jnp.asarray(a),)), keys.ContentKey((), (jnp.asarray(b),))


def test_host_keys_compare_bits_like_device_keys():
    zeros = np.zeros(5, np.float32)
    nan = np.array([1.0, np.nan, 2.0], np.float32)
    other_nan = nan.copy()
    other_nan.view(np.uint32)[1] ^= 1
    for a, b, equal in [
        (zeros, -zeros, False),
        (nan, nan.copy(), True),
        (nan, other_nan, False),
        (np.arange(4, dtype=np.int32), np.arange(4, dtype=np.int32)[::-1].copy(), False),
        (np.array([1 + 2j, -0.0j], np.complex128), np.array([1 + 2j, 0j], np.complex128), False),
        (
            np.array([1 + 2j, np.nan], np.complex128),
            np.array([1 + 2j, np.nan], np.complex128),
            True,
        ),
        (np.array([True, False]), np.array([True, False]), True),
    ]:
        with jax.enable_x64(True):
            for ka, kb in host_and_device_keys(a, b):
                assert (ka == kb) is equal, (a, b)
                assert (ka.private() == kb.private()) is equal, (a, b)


def test_host_keys_of_equal_bytes_under_another_dtype_or_shape_differ():
    a = np.arange(4, dtype=np.int32)
    key = keys.ContentKey((), (a,))
    assert key != keys.ContentKey((), (a.view(np.float32),))
    assert key != keys.ContentKey((), (a.reshape(2, 2),))
    assert key != keys.ContentKey((), (a.view(np.uint32),))


def test_a_numpy_input_and_a_jax_array_of_equal_content_are_different_keys():
    a = np.linspace(-1, 1, 6, dtype=np.float32)
    assert keys.ContentKey((), (a,)) != keys.ContentKey((), (jnp.asarray(a),))
    assert keys.ContentKey((), (a,)) == keys.ContentKey((), (a[::-1][::-1],))  # a strided view
    outside = keys.ContentKey((), (a,))
    with jax.default_device(jax.devices()[0]):  # where it would be put is part of the key
        assert outside != keys.ContentKey((), (a.copy(),))


def test_a_private_key_holds_read_only_copies():
    a = np.linspace(-1, 1, 6, dtype=np.float32)
    key = keys.ContentKey((), (a,))
    kept = key.private()
    assert kept == key and kept.arrays[0] is not a and not kept.arrays[0].flags.writeable
    a[0] = 7.0  # the caller reuses the buffer
    assert kept != keys.ContentKey((), (a,))
    assert kept.arrays[0][0] == -1.0


@pytest.mark.parametrize("first_kind", ["numpy", "jax"])
@pytest.mark.parametrize("second_kind", ["numpy", "jax"])
def test_numpy_and_jax_inputs_of_equal_content(first_kind, second_kind):
    class In(pydantic.BaseModel):
        x: X

    make = component_of(In, lambda d: {"y": jnp.sin(d["x"]) * jnp.arange(1.0, 5.0)})
    as_kind = {"numpy": lambda v: v.copy(), "jax": jnp.asarray}
    first, second = {"x": as_kind[first_kind](X0)}, {"x": as_kind[second_kind](X0)}
    check_pair(make, first, second, same_input=first_kind == second_kind)


def test_a_hit_on_numpy_inputs_sends_only_the_cotangents_to_the_device(monkeypatch):
    from gradpipe.component import _component

    comp, _ = counting_component(True)
    x = np.linspace(0, 1, 1000, dtype=np.float32)
    ct = {"y": np.ones(1000, np.float32)}
    comp.apply({"x": x})
    sent = []
    real = _component.on_device
    monkeypatch.setattr(_component, "on_device", lambda *a, **k: sent.append(a) or real(*a, **k))
    comp.vjp({"x": x.copy()}, ["x"], ["y"], ct)
    assert comp.residual_cache.info().hits == 1 and not sent
    comp.vjp({"x": x + 1}, ["x"], ["y"], ct)  # a miss puts the input on the device
    assert comp.residual_cache.info().misses == 1 and len(sent) == 1


def test_applying_an_input_again_keeps_one_entry():
    comp, _ = counting_component(True)
    x = np.linspace(0, 1, 1000, dtype=np.float32)
    cache = comp.residual_cache
    comp.apply({"x": x})
    comp.apply({"x": x.copy()})
    assert cache.info().entries == 1
    comp.apply({"x": jnp.asarray(x)})  # a JAX array is another kind of key
    comp.apply({"x": jnp.asarray(x)})
    assert cache.info().entries == 2
    x[0] = -0.0  # was 0.0: other bits, another entry
    comp.apply({"x": x})
    assert cache.info().entries == 3
    assert not cache.touch(None)
    cache.clear()
    assert cache.twin(keys.ContentKey(((0,),), (x,))) is None
