"""The five endpoints: gradients against finite differences (nested paths included),
integer leaves, static inputs, compilation reuse, path errors, pipelines."""

import copy

import jax
import jax.numpy as jnp
import numpy as np
import pydantic
import pytest
from nested_models import NestedIn, NestedOut, nested_fn, nested_inputs

import gradpipe as gp
from gradpipe.component import Array, Component, ComponentInputError, Differentiable

# Every differentiable float leaf of the nested component, with where it sits in the
# raw input dict.
IN_LEAVES = {
    "x": ("x",),
    "layers[0].w": ("layers", 0, "w"),
    "layers[0].b": ("layers", 0, "b"),
    "layers[1].w": ("layers", 1, "w"),
    "layers[1].b": ("layers", 1, "b"),
    "table[a]": ("table", "a"),
    'table["b c"]': ("table", "b c"),
}
OUT_LEAVES = {
    "y": ("y",),
    "stats.s": ("stats", "s"),
    "parts[0]": ("parts", 0),
    "parts[1]": ("parts", 1),
}


def get(tree, where):
    for key in where:
        tree = tree[key]
    return tree


def set_(tree, where, value):
    for key in where[:-1]:
        tree = tree[key]
    tree[where[-1]] = value


def fd_jacobian(comp, inputs, eps=1e-2):
    """{out: {in: J}} by central differences of apply."""
    jac = {o: {} for o in OUT_LEAVES}
    for in_path, where in IN_LEAVES.items():
        base = np.asarray(get(inputs, where), np.float32)
        columns = {o: [] for o in OUT_LEAVES}
        for k in range(base.size):
            plus, minus = copy.deepcopy(inputs), copy.deepcopy(inputs)
            step = np.zeros(base.size, np.float32)
            step[k] = eps
            set_(plus, where, (base.ravel() + step).reshape(base.shape))
            set_(minus, where, (base.ravel() - step).reshape(base.shape))
            hi, lo = comp.apply(plus), comp.apply(minus)
            for o, ow in OUT_LEAVES.items():
                diff = (np.asarray(get(hi, ow), np.float64) - np.asarray(get(lo, ow))) / (2 * eps)
                columns[o].append(diff)
        for o, ow in OUT_LEAVES.items():
            out_shape = np.shape(get(hi, ow))
            stacked = np.stack(columns[o], axis=-1).reshape(out_shape + base.shape)
            jac[o][in_path] = stacked
    return jac


@pytest.fixture(scope="module")
def reference():
    comp = Component(nested_fn, inputs=NestedIn, outputs=NestedOut, residual_cache=False)
    inputs = nested_inputs(3)
    return inputs, fd_jacobian(comp, inputs)


def close(a, b):
    np.testing.assert_allclose(np.asarray(a, np.float64), b, rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize(
    "mode, cache", [("auto", True), ("fwd", True), ("rev", False), ("auto", False)]
)
def test_jacobian_matches_finite_differences(reference, make_component, cache, mode):
    inputs, fd = reference
    comp = make_component(cache)
    jac = comp.jacobian(inputs, list(IN_LEAVES), list(OUT_LEAVES), mode=mode)
    assert set(jac) == set(OUT_LEAVES)
    for o in OUT_LEAVES:
        assert set(jac[o]) == set(IN_LEAVES)
        for i in IN_LEAVES:
            close(jac[o][i], fd[o][i])


@pytest.mark.parametrize("cache", [True, False])
def test_jvp_and_vjp_match_finite_differences(reference, make_component, cache):
    inputs, fd = reference
    comp = make_component(cache)
    rng = np.random.default_rng(1)
    tangents = {i: rng.normal(size=np.shape(get(inputs, w))) for i, w in IN_LEAVES.items()}
    pushed = comp.jvp(inputs, list(IN_LEAVES), list(OUT_LEAVES), tangents)
    for o in OUT_LEAVES:
        expected = sum(
            np.tensordot(fd[o][i], tangents[i], axes=np.ndim(tangents[i])) for i in fd[o]
        )
        close(pushed[o], expected)

    outputs = comp.apply(inputs)
    cotangents = {o: rng.normal(size=np.shape(get(outputs, w))) for o, w in OUT_LEAVES.items()}
    for pulled in (
        comp.vjp(inputs, list(IN_LEAVES), list(OUT_LEAVES), cotangents),
        comp.vjp_from(comp.apply_keep(inputs)[1], list(IN_LEAVES), list(OUT_LEAVES), cotangents),
    ):
        for i in IN_LEAVES:
            expected = sum(
                np.tensordot(cotangents[o], fd[o][i], axes=np.ndim(cotangents[o])) for o in fd
            )
            close(pulled[i], expected)


def test_vjp_of_a_subset_zero_fills_unchosen_outputs(make_component):
    comp = make_component()
    inputs = nested_inputs(4)
    ct = np.ones(3, np.float32)
    only = comp.vjp(inputs, ["layers[0].w"], ["parts[0]"], {"parts[0]": ct})
    jac = comp.jacobian(inputs, ["layers[0].w"], ["parts[0]"])
    close(only["layers[0].w"], ct @ np.asarray(jac["parts[0]"]["layers[0].w"]))


def test_integer_leaves_get_float0_zeros(make_component):
    comp = make_component()
    inputs = nested_inputs(5)
    pulled = comp.vjp(inputs, ["k", "x"], ["count", "y"], {"count": 1, "y": np.ones(4)})
    assert pulled["k"].dtype == jax.dtypes.float0 and pulled["k"].shape == (3,)
    assert pulled["x"].dtype == np.float32
    pushed = comp.jvp(inputs, ["k"], ["count", "y"], {"k": np.ones(3, np.int32)})
    assert pushed["count"].dtype == jax.dtypes.float0 and pushed["count"].shape == ()
    np.testing.assert_array_equal(pushed["y"], np.zeros(4))
    jac = comp.jacobian(inputs, ["k", "x"], ["count"])
    assert jac["count"]["k"].dtype == jax.dtypes.float0 and jac["count"]["k"].shape == (3,)
    assert jac["count"]["x"].shape == (4,)
    # A new integer value reuses the compiled functions: integer arrays are traced.
    traces = []
    counted = make_component(fn=lambda d: traces.append(1) or nested_fn(d))
    counted.apply(inputs)
    before = len(traces)
    inputs["k"] = np.array([7, 8, 9], np.int32)
    assert int(counted.apply(inputs)["count"]) == 24
    assert len(traces) == before


def test_static_inputs_are_python_values_and_never_traced(make_component):
    seen = []

    def fn(d):
        seen.append((type(d["scale"]), type(d["label"])))
        return nested_fn(d)

    comp = make_component(fn=fn)
    inputs = nested_inputs(6)
    comp.apply(inputs)
    assert set(seen) == {(float, str)}
    n = len(seen)
    comp.apply(inputs)
    comp.apply({**inputs, "x": np.ones(4, np.float32)})
    assert len(seen) == n
    comp.apply({**inputs, "scale": 2.0})
    assert len(seen) > n


def test_repeated_calls_do_not_retrace(make_component):
    traces = []
    comp = make_component(fn=lambda d: traces.append(1) or nested_fn(d))
    inputs = nested_inputs(7)
    cts = {"y": np.ones(4), "stats.s": 1.0}

    def call_all(order):
        comp.apply(inputs)
        comp.vjp(inputs, order, ["y", "stats.s"], cts)
        comp.jvp(
            inputs,
            order,
            ["stats.s"],
            {p: np.ones(np.shape(get(inputs, IN_LEAVES[p]))) for p in order},
        )
        comp.jacobian(inputs, order, ["y"])
        comp.abstract_eval({**inputs, "x": {"shape": [4], "dtype": "float32"}})

    call_all(["x", "table[a]"])
    first = len(traces)
    assert first > 0
    for seed in range(3):
        inputs = nested_inputs(10 + seed)
        call_all(["table[a]", "x"])  # the same path set, another order
    assert len(traces) == first
    # Every compiled program, the cached backward pass included, compiled once.
    programs = list(comp._programs._programs.values())
    assert {"keep", "backward", "jvp", "jacobian"} <= {k[0] for k in comp._programs._programs}
    assert all(p._cache_size() == 1 for p in programs)
    inputs["x"] = np.ones(6, np.float32)  # a new shape compiles again
    comp.apply(inputs)
    assert len(traces) > first


def test_jacobian_mode_follows_sizes(monkeypatch):
    class In(pydantic.BaseModel):
        a: Differentiable[Array[np.float32, (None,)]]

    class Out(pydantic.BaseModel):
        b: Differentiable[Array[np.float32, (None,)]]

    used = []
    for name in ("jacfwd", "jacrev"):
        real = getattr(jax, name)
        monkeypatch.setattr(jax, name, lambda f, _r=real, _n=name: used.append(_n) or _r(f))
    comp = Component(lambda d: {"b": jnp.tile(jnp.sin(d["a"]), 5)}, inputs=In, outputs=Out)
    comp.jacobian({"a": np.ones(2)}, ["a"], ["b"])
    comp2 = Component(lambda d: {"b": jnp.sin(d["a"][:2])}, inputs=In, outputs=Out)
    comp2.jacobian({"a": np.ones(10)}, ["a"], ["b"])
    assert used == ["jacfwd", "jacrev"]


def test_bad_paths_and_vectors_name_the_path(make_component):
    comp = make_component()
    inputs = nested_inputs(8)
    ones = {"y": np.ones(4)}
    cases = [
        (lambda: comp.vjp(inputs, ["nope"], ["y"], ones), "nope"),
        (lambda: comp.vjp(inputs, ["layers[5].w"], ["y"], ones), "layers[5].w"),
        (lambda: comp.vjp(inputs, ["scale"], ["y"], ones), "scale"),
        (lambda: comp.vjp(inputs, ["x"], ["z"], ones), "z"),
        (lambda: comp.vjp(inputs, ["x."], ["y"], ones), "x."),
        (lambda: comp.vjp(inputs, ["x"], ["y"], {"y": np.ones(3)}), "y"),
        (lambda: comp.vjp(inputs, ["x"], ["y"], {}), "y"),
        (lambda: comp.vjp(inputs, ["x"], ["y"], {**ones, "stats.s": 1.0}), "stats.s"),
        (lambda: comp.jvp(inputs, ["table[a]"], ["y"], {"table[a]": np.ones(3)}), "table[a]"),
        (lambda: comp.jvp(inputs, ["x"], ["y"], {"x": ["a", "b", "c", "d"]}), "x"),
        (lambda: comp.jacobian(inputs, ["table[zz]"], ["y"]), "table[zz]"),
        (lambda: comp.jacobian(inputs, 'table["b c"]', ["y"]), 'table["b c"]'),
    ]
    for call, path in cases:
        with pytest.raises(ComponentInputError) as info:
            call()
        assert info.value.path == path, (path, str(info.value))
        assert path in str(info.value)


def test_complex_vectors_for_real_leaves_are_refused(make_component):
    comp = make_component()
    inputs = nested_inputs(8)
    with pytest.raises(ComponentInputError, match=r"cotangent for 'y' is complex.*imaginary"):
        comp.vjp(inputs, ["x"], ["y"], {"y": np.full(4, 1 + 1j)})
    with pytest.raises(ComponentInputError, match=r"tangent for 'x' is complex"):
        comp.jvp(inputs, ["x"], ["y"], {"x": jnp.full(4, 1j, jnp.complex64)})


def test_one_leaf_given_two_vectors_under_two_spellings_is_refused(make_component):
    comp = make_component()
    inputs = nested_inputs(8)
    two = {"table[a]": np.ones(2), 'table["a"]': np.full(2, 5.0)}
    with pytest.raises(ComponentInputError, match=r"Two tangents.*'table\[a\]'.*same path"):
        comp.jvp(inputs, ["table[a]"], ["y"], two)


def test_bad_inputs_name_the_nested_field(make_component):
    comp = make_component()
    base = nested_inputs(9)
    bad = [
        ({"layers": [base["layers"][0], {"w": np.ones(4), "b": 0.0}]}, "layers[1].w"),
        ({"table": {"a": np.ones(2), "b c": np.ones((2, 2))}}, "table[b c]"),
        ({"x": np.ones(3, np.float64) * 1j}, "x"),
        ({"k": np.ones(3, np.float32)}, "k"),
        ({"scale": "fast"}, "scale"),
        ({"x": [[1.0]]}, "x"),
    ]
    for change, path in bad:
        with pytest.raises(ComponentInputError) as info:
            comp.apply({**base, **change})
        assert info.value.path == path
        assert repr(path) in str(info.value)
    with pytest.raises(ComponentInputError) as info:
        comp.apply({k: v for k, v in base.items() if k != "x"})
    assert info.value.path == "x"
    with pytest.raises(ComponentInputError):
        comp.apply([1, 2, 3])


def test_validated_model_instances_and_casting(make_component):
    comp = make_component()
    raw = nested_inputs(11)
    model = NestedIn.model_validate(raw)
    a = comp.apply(model)
    b = comp.apply({**raw, "x": raw["x"].astype(np.float64).tolist()})
    np.testing.assert_array_equal(a["y"], b["y"])
    assert isinstance(a["y"], jax.Array) and a["y"].dtype == np.float32


def test_abstract_eval_reports_output_shapes(make_component):
    comp = make_component()
    abstract = nested_inputs(12)
    abstract["x"] = {"shape": [7], "dtype": "float32"}
    abstract["k"] = {"shape": [3], "dtype": "int32"}
    out = comp.abstract_eval(abstract)
    assert out == {
        "y": {"shape": [7], "dtype": "float32"},
        "stats": {"s": {"shape": [], "dtype": "float32"}},
        "parts": [{"shape": [3], "dtype": "float32"}, {"shape": [3], "dtype": "float32"}],
        "count": {"shape": [], "dtype": "int32"},
    }
    abstract["k"] = [4, 5, 6]  # concrete values stand for their shape and dtype
    assert comp.abstract_eval(abstract) == out
    abstract["x"] = {"shape": [7, 2], "dtype": "float32"}
    with pytest.raises(ComponentInputError) as info:
        comp.abstract_eval(abstract)
    assert info.value.path == "x"
    abstract["x"] = {"shape": [7], "dtype": "float32"}
    abstract["scale"] = "fast"
    with pytest.raises(ComponentInputError) as info:
        comp.abstract_eval(abstract)
    assert info.value.path == "scale"


class Vec(pydantic.BaseModel):
    x: Differentiable[Array[np.float32, (None,)]]


class VecOut(pydantic.BaseModel):
    y: Differentiable[Array[np.float32, (None,)]]


def test_a_pipeline_is_a_component():
    pipeline = gp.Lambda(jnp.sin) | gp.Lambda(lambda v: v * 2.0)
    comp = Component(pipeline, inputs=Vec, outputs=VecOut)
    x = np.linspace(0, 1, 5, dtype=np.float32)
    np.testing.assert_allclose(comp.apply({"x": x})["y"], 2 * np.sin(x), rtol=1e-6)
    g = comp.vjp({"x": x}, ["x"], ["y"], {"y": np.ones(5)})["x"]
    np.testing.assert_allclose(g, 2 * np.cos(x), rtol=1e-6)


def test_a_jax_sequential_is_a_component_and_its_weights_are_not_baked_in():
    from gradpipe.jax import JaxOperator, JaxSequential

    class Scale(JaxOperator):
        w: jax.Array

        def _apply(self, v):
            return jnp.tanh(self.w * v)

    pipeline = JaxSequential([Scale(jnp.array(2.0)), Scale(jnp.array(0.5))])
    comp = Component(pipeline, inputs=Vec, outputs=VecOut)
    x = np.linspace(-1, 1, 4, dtype=np.float32)
    jac = comp.jacobian({"x": x}, ["x"], ["y"])["y"]["x"]
    np.testing.assert_allclose(jac, jax.jacfwd(pipeline)(jnp.asarray(x)), rtol=1e-6)
    assert comp._params is not None  # the weights travel as arguments of the programs


def test_output_mismatch_is_a_clear_error():
    comp = Component(lambda d: {"y": d["x"][None]}, inputs=Vec, outputs=VecOut)
    with pytest.raises(TypeError, match="output 'y' has shape"):
        comp.apply({"x": np.ones(3)})
    with pytest.raises(TypeError, match="must be arrays"):

        class Bad(pydantic.BaseModel):
            y: Differentiable[Array[np.float32, (None,)]]
            note: str

        Component(lambda d: d, inputs=Vec, outputs=Bad)


class Wide(pydantic.BaseModel):
    n: Array[np.int64, ()]
    x: Differentiable[Array[np.float64, (2,)]]


class WideOut(pydantic.BaseModel):
    y: Differentiable[Array[np.float64, (2,)]]


class NarrowIn(pydantic.BaseModel):
    x: Differentiable[Array[np.float32, (2,)]]


def test_64_bit_dtypes_are_refused_while_jax_x64_is_off():
    comp = Component(lambda d: {"y": d["x"] * d["n"]}, inputs=Wide, outputs=WideOut)
    inputs = {"n": 2**31 + 5, "x": [1.0, 1.0 + 1e-12]}
    with jax.enable_x64(False):
        # int64 would wrap to a negative int32 and float64 lose its last digits
        with pytest.raises(ComponentInputError, match=r"'n'.*int64.*jax_enable_x64"):
            comp.apply(inputs)
        with pytest.raises(ComponentInputError, match=r"'n'.*int64.*jax_enable_x64"):
            comp.abstract_eval({"n": {"shape": [], "dtype": "int64"}, "x": [1.0, 2.0]})
        widen = Component(lambda d: {"y": d["x"]}, inputs=NarrowIn, outputs=WideOut)
        with pytest.raises(TypeError, match=r"'y'.*float64.*jax_enable_x64"):
            widen.apply({"x": [1.0, 2.0]})
    with jax.enable_x64(True):
        y = comp.apply(inputs)["y"]
        assert y.dtype == np.float64
        np.testing.assert_array_equal(y, [2**31 + 5, (2**31 + 5) * (1.0 + 1e-12)])


class ListIn(pydantic.BaseModel):
    x: Differentiable[Array[np.float32, (2,)]]
    w: list[float]


class PairOut(pydantic.BaseModel):
    y: Differentiable[Array[np.float32, (2,)]]


def test_a_static_list_changed_in_place_after_a_call_is_not_traced_later():
    comp = Component(
        lambda d: {"y": d["x"] * jnp.asarray(d["w"], jnp.float32)}, inputs=ListIn, outputs=PairOut
    )
    model = ListIn(x=np.ones(2, np.float32), w=[1.0, 2.0])
    comp.apply(model)
    model.w[0] = 10.0  # the caller reuses their model
    jvp = comp.jvp({"x": [1.0, 1.0], "w": [1.0, 2.0]}, ["x"], ["y"], {"x": np.ones(2)})
    np.testing.assert_array_equal(jvp["y"], [1.0, 2.0])
