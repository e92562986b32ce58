"""`check_gradients` passes correct derivatives and catches wrong ones, naming the
input path whose rule is wrong."""

import jax
import jax.numpy as jnp
import numpy as np
import pydantic
import pytest
from nested_models import NestedIn, NestedOut, nested_fn, nested_inputs

from gradpipe.component import (
    Array,
    Component,
    Differentiable,
    check_gradients,
    random_inputs,
)

F32 = np.float32


class PairIn(pydantic.BaseModel):
    x: Differentiable[Array[F32, (None,)]]
    w: Differentiable[Array[F32, ()]]
    n: int = 2


class PairOut(pydantic.BaseModel):
    y: Differentiable[Array[F32, (None,)]]
    s: Differentiable[Array[F32, ()]]


def _sin_with_backward(backward):
    @jax.custom_vjp
    def sin(x):
        return jnp.sin(x)

    sin.defvjp(lambda x: (jnp.sin(x), x), backward)
    return sin


def _pair(sin):
    def fn(d):
        y = sin(d["x"]) * d["w"] ** d["n"]
        return {"y": y, "s": jnp.sum(jnp.log(d["x"]) * d["w"])}

    return Component(fn, inputs=PairIn, outputs=PairOut)


def _by_key(result):
    return {(r.input_path, r.output_path, r.endpoint): r for r in result.rows}


def test_correct_nested_component_passes_on_every_differentiable_float_path():
    comp = Component(nested_fn, inputs=NestedIn, outputs=NestedOut)
    result = check_gradients(comp, nested_inputs(), directions=2)
    assert result.passed, result.table()
    inputs = {r.input_path for r in result.rows}
    outputs = {r.output_path for r in result.rows}
    # k (int32) and count (int32) have no derivatives to compare.
    assert inputs == {"x", "layers[0].w", "layers[0].b", "layers[1].w", "layers[1].b",
                      "table[a]", "table[b c]"}  # fmt: skip
    assert outputs == {"y", "stats.s", "parts[0]", "parts[1]"}
    assert len(result.rows) == len(inputs) * len(outputs) * 2
    assert all(r.rel_error < 1e-3 for r in result.rows), result.table()


def test_wrong_custom_vjp_is_caught_and_the_table_names_its_input():
    wrong = _sin_with_backward(lambda x, g: (g * jnp.sin(x),))  # should be cos
    result = check_gradients(_pair(wrong))
    assert not result.passed
    rows = _by_key(result)
    assert rows[("x", "y", "vjp")].passed is False
    assert rows[("x", "y", "vjp")].rel_error > 0.05
    # jax.custom_vjp has no forward mode: that row says so rather than failing.
    assert rows[("x", "y", "jvp")].passed is None
    assert "custom_vjp" in rows[("x", "y", "jvp")].note
    # Every other block is right, including x -> s, which does not pass through sin.
    assert {(r.input_path, r.output_path) for r in result.failures} == {("x", "y")}
    table = result.table()
    failing = [line for line in table.splitlines() if "FAIL" in line]
    assert len(failing) == 1 and failing[0].split()[:3] == ["x", "y", "vjp"]
    assert "1 of" in table.splitlines()[-1]


def test_a_correct_custom_vjp_passes():
    right = _sin_with_backward(lambda x, g: (g * jnp.cos(x),))
    result = check_gradients(_pair(right))
    assert result.passed, result.table()


def test_wrong_custom_jvp_is_caught_in_both_endpoints():
    @jax.custom_jvp
    def cube(x):
        return x**3

    cube.defjvp(lambda primals, tangents: (primals[0] ** 3, 2 * primals[0] ** 2 * tangents[0]))

    comp = _pair(lambda x: cube(x) + 0 * jnp.sin(x))
    result = check_gradients(comp)
    rows = _by_key(result)
    assert rows[("x", "y", "jvp")].passed is False
    assert rows[("x", "y", "vjp")].passed is False  # JAX transposes the (wrong) jvp rule
    assert all(r.passed for r in result.rows if r.input_path == "w"), result.table()


def test_a_two_percent_error_is_caught_in_float32_and_float64():
    class In(pydantic.BaseModel):
        x: Differentiable[Array[np.float64, (3,)]]

    class Out(pydantic.BaseModel):
        y: Differentiable[Array[np.float64, (3,)]]

    def build(dtype, model_in, model_out):
        @jax.custom_vjp
        def f(x):
            return jnp.exp(x)

        f.defvjp(lambda x: (jnp.exp(x), x), lambda x, g: (1.02 * g * jnp.exp(x),))
        return Component(lambda d: {"y": f(d["x"])}, inputs=model_in, outputs=model_out)

    class In32(pydantic.BaseModel):
        x: Differentiable[Array[F32, (3,)]]

    class Out32(pydantic.BaseModel):
        y: Differentiable[Array[F32, (3,)]]

    wide = check_gradients(build(np.float64, In, Out), endpoints=["vjp"])
    narrow = check_gradients(build(F32, In32, Out32), endpoints=["vjp"])
    assert wide.x64 and wide.rows[0].rtol < 1e-5
    assert not wide.passed and not narrow.passed
    assert wide.rows[0].rel_error > 100 * wide.rows[0].rtol


def test_float64_component_is_checked_in_float64():
    class In(pydantic.BaseModel):
        x: Differentiable[Array[np.float64, (5,)]]

    class Out(pydantic.BaseModel):
        y: Differentiable[Array[np.float64, ()]]

    comp = Component(lambda d: {"y": jnp.sum(jnp.sin(d["x"]) ** 2)}, inputs=In, outputs=Out)
    assert not jax.config.jax_enable_x64
    result = check_gradients(comp, seed=3)
    assert result.passed and result.x64
    assert max(r.rel_error for r in result.rows) < 1e-8, result.table()
    assert not jax.config.jax_enable_x64  # the check leaves JAX's setting as it was


def test_random_inputs_follow_the_schema_and_defaults():
    drawn = random_inputs(_pair(jnp.sin), seed=1, size=5)
    assert set(drawn) == {"x", "w"}  # n keeps its default
    assert drawn["x"].shape == (5,) and drawn["x"].dtype == F32
    assert np.all((drawn["x"] >= 0.5) & (drawn["x"] <= 1.5))
    again = random_inputs(_pair(jnp.sin), seed=1, size=5)
    np.testing.assert_array_equal(drawn["x"], again["x"])


def test_random_inputs_refuse_what_they_cannot_choose():
    comp = Component(nested_fn, inputs=NestedIn, outputs=NestedOut)
    with pytest.raises(ValueError, match=r"'table' is a dict of arrays.*give the inputs"):
        check_gradients(comp)

    class Static(pydantic.BaseModel):
        x: Differentiable[Array[F32, (2,)]]
        n: int

    class Out(pydantic.BaseModel):
        y: Differentiable[Array[F32, (2,)]]

    static = Component(lambda d: {"y": d["x"] * d["n"]}, inputs=Static, outputs=Out)
    with pytest.raises(ValueError, match=r"'n' is a static int without a default"):
        random_inputs(static)


def test_chosen_paths_and_a_misspelt_one():
    comp = Component(nested_fn, inputs=NestedIn, outputs=NestedOut)
    result = check_gradients(
        comp, nested_inputs(), input_paths=["layers[1].b"], output_paths=["stats.s"]
    )
    assert [(r.input_path, r.output_path) for r in result.rows] == [("layers[1].b", "stats.s")] * 2
    with pytest.raises(ValueError, match=r"Did you mean 'layers\[1\].b'"):
        check_gradients(comp, nested_inputs(), input_paths=["layers[1].bb"])


def test_non_finite_derivatives_fail():
    comp = _pair(jnp.sin)
    inputs = {"x": np.array([0.0, 1.0], F32), "w": np.float32(1.0)}  # log(0) in s
    result = check_gradients(comp, inputs, input_paths=["x"], output_paths=["s"])
    assert not result.passed
    assert all("not finite" in r.note for r in result.failures)
