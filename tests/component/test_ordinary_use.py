"""Ordinary use never crashes, and refusals say what is wrong.

- A cache never makes a call fail: an entry whose key or residuals hold a buffer the
  caller deleted or donated is a miss, and is dropped.
- `apply` runs whatever ``jax.jit`` runs; only the derivative endpoints refuse a
  function JAX cannot differentiate, naming the endpoint and the reason.
- ``jacobian(mode="auto")`` picks the mode that works for ``jax.custom_vjp``.
- A path that cannot be differentiated is named for what it is.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pydantic
import pytest

from gradpipe.component import (
    Array,
    CacheLimits,
    Component,
    ComponentInputError,
    Differentiable,
)


class In(pydantic.BaseModel):
    x: Differentiable[Array[np.float32, (None,)]]
    s: Differentiable[Array[np.float32, ()]] = np.float32(1.0)
    v: Array[np.float32, (None,)] = np.zeros(1, np.float32)
    n: int = 1
    pair: tuple[int, int] = (0, 0)


class Out(pydantic.BaseModel):
    y: Differentiable[Array[np.float32, (None,)]]
    t: Differentiable[Array[np.float32, ()]] | None = None


def smooth(d):
    return {"y": jnp.sin(d["x"]) * d["s"] * d["n"], "t": jnp.sum(d["x"] ** 2)}


ONES = np.ones(3, np.float32)


# -- a cache never makes a call fail ---------------------------------------------------


@pytest.mark.parametrize("residuals", ["auto", "all"])
def test_a_deleted_input_array_is_a_miss_not_an_error(residuals):
    comp = Component(smooth, inputs=In, outputs=Out, residuals=residuals)
    x = jnp.arange(3.0, dtype=jnp.float32)
    comp.apply({"x": x})
    assert len(comp.residual_cache) == 1
    x.delete()
    other = jnp.linspace(0.0, 1.0, 3, dtype=jnp.float32)
    out = comp.apply({"x": other})  # a key of the same kind: compared, not read dead
    np.testing.assert_allclose(out["y"], np.sin(other), rtol=1e-6)
    grad = comp.vjp({"x": other}, ["x"], ["y"], {"y": ONES})["x"]
    np.testing.assert_allclose(grad, np.cos(other), rtol=1e-6)
    assert len(comp.residual_cache) == 1  # the dead entry was dropped


def test_several_live_entries_and_one_dead_one():
    comp = Component(smooth, inputs=In, outputs=Out, residual_cache=CacheLimits(max_entries=4))
    xs = [jnp.full(3, float(i), jnp.float32) for i in range(3)]
    for x in xs:
        comp.apply({"x": x})
    xs[1].delete()
    for i in (0, 2):  # the fingerprint narrows among several entries
        grad = comp.vjp({"x": xs[i]}, ["x"], ["y"], {"y": ONES})["x"]
        np.testing.assert_allclose(grad, np.cos(np.full(3, float(i))), rtol=1e-6)
    assert comp.residual_cache.info().hits == 2


def test_an_input_donated_to_a_jitted_function_is_a_miss():
    comp = Component(smooth, inputs=In, outputs=Out)
    x = jnp.arange(3.0, dtype=jnp.float32)
    comp.apply({"x": x})
    jax.jit(lambda a: a + 1, donate_argnums=0)(x)
    if not x.is_deleted():  # a backend that does not donate: delete as a donation would
        x.delete()
    x2 = jnp.ones(3, jnp.float32)
    grad = comp.vjp({"x": x2}, ["x"], ["y"], {"y": ONES})["x"]
    np.testing.assert_allclose(grad, np.cos(np.ones(3)), rtol=1e-6)


def test_a_deleted_array_passed_in_is_refused_by_name():
    comp = Component(smooth, inputs=In, outputs=Out)
    x = jnp.ones(3, jnp.float32)
    x.delete()
    with pytest.raises(ComponentInputError, match="deleted") as info:
        comp.apply({"x": x})
    assert info.value.path == "x"


def test_kept_residuals_of_a_deleted_input_are_refused_clearly():
    comp = Component(lambda d: {"y": d["x"] * 2.0}, inputs=In, outputs=Out, residuals="all")
    x = jnp.ones(3, jnp.float32)
    _, residuals = comp.apply_keep({"x": x})
    leaves = [a for a in jax.tree.leaves(residuals._vjp_fn) if isinstance(a, jax.Array)]
    for leaf in leaves:
        leaf.delete()
    if leaves:
        with pytest.raises(ValueError, match="apply_keep again"):
            comp.vjp_from(residuals, ["x"], ["y"], {"y": ONES})


def test_calls_after_clear_caches_still_work():
    comp = Component(smooth, inputs=In, outputs=Out)
    comp.apply({"x": ONES})
    jax.clear_caches()
    grad = comp.vjp({"x": ONES}, ["x"], ["y"], {"y": ONES})["x"]
    np.testing.assert_allclose(grad, np.cos(ONES), rtol=1e-6)
    jac = comp.jacobian({"x": ONES}, ["x"], ["t"])["t"]["x"]
    np.testing.assert_allclose(jac, 2 * ONES)


# -- custom derivative rules -----------------------------------------------------------


@jax.custom_vjp
def solver(x):
    return jnp.sin(x)


solver.defvjp(lambda x: (jnp.sin(x), jnp.cos(x)), lambda cos, g: (cos * g,))


@jax.custom_jvp
def smooth_jvp(x):
    return jnp.sin(x)


smooth_jvp.defjvp(lambda p, t: (jnp.sin(p[0]), jnp.cos(p[0]) * t[0]))


class Vec(pydantic.BaseModel):
    x: Differentiable[Array[np.float32, (None,)]]


class VecOut(pydantic.BaseModel):
    y: Differentiable[Array[np.float32, (None,)]]


@pytest.mark.parametrize("rule", [solver, smooth_jvp])
@pytest.mark.parametrize("mode", ["auto", "rev"])
def test_jacobian_of_custom_rules(rule, mode):
    """Under "auto", a square Jacobian prefers forward mode; a custom_vjp function has
    none, so reverse mode is used (and remembered); a custom_jvp one transposes."""
    comp = Component(lambda d: {"y": rule(d["x"])}, inputs=Vec, outputs=VecOut)
    x = np.array([0.1, 0.5, 1.0], np.float32)
    for _ in range(2):
        jac = comp.jacobian({"x": x}, ["x"], ["y"], mode=mode)["y"]["x"]
        np.testing.assert_allclose(jac, np.diag(np.cos(x)), rtol=1e-6)
    grad = comp.vjp({"x": x}, ["x"], ["y"], {"y": ONES})["x"]
    np.testing.assert_allclose(grad, np.cos(x), rtol=1e-6)


def test_forward_mode_of_a_custom_vjp_function_says_what_to_use():
    comp = Component(lambda d: {"y": solver(d["x"])}, inputs=Vec, outputs=VecOut)
    with pytest.raises(TypeError, match=r"Component\.jvp .*custom_vjp.*call vjp"):
        comp.jvp({"x": ONES}, ["x"], ["y"], {"x": ONES})
    with pytest.raises(TypeError, match=r"jacobian \(mode='fwd'\).*mode='rev'"):
        comp.jacobian({"x": ONES}, ["x"], ["y"], mode="fwd")


# -- apply runs whatever jit runs --------------------------------------------------------


def host_double(x):
    return np.asarray(x) * 2


class Mixed(pydantic.BaseModel):
    y: Differentiable[Array[np.float32, (None,)]]
    h: Array[np.float32, (None,)]


def with_callback(d):
    x = d["x"]
    h = jax.pure_callback(host_double, jax.ShapeDtypeStruct(x.shape, x.dtype), x)
    return {"y": jnp.sin(x), "h": h}


@pytest.mark.parametrize("residuals", ["auto", "all", "inputs"])
@pytest.mark.parametrize("cache", [True, False])
def test_apply_runs_a_function_with_a_callback_that_has_no_derivative(residuals, cache):
    comp = Component(
        with_callback, inputs=Vec, outputs=Mixed, residuals=residuals, residual_cache=cache
    )
    x = np.array([0.5, 1.0, 2.0], np.float32)
    expected = jax.jit(with_callback)({"x": x})
    for _ in range(2):
        out = comp.apply({"x": x})
        np.testing.assert_array_equal(out["y"], expected["y"])
        np.testing.assert_array_equal(out["h"], expected["h"])
    if comp.residual_cache is not None:
        assert len(comp.residual_cache) == 0
    for call in (
        lambda: comp.vjp({"x": x}, ["x"], ["y"], {"y": x}),
        lambda: comp.apply_keep({"x": x}),
    ):
        with pytest.raises(TypeError, match=r"cannot differentiate.*Pure callbacks"):
            call()
    with pytest.raises(TypeError, match=r"Component\.jvp cannot differentiate"):
        comp.jvp({"x": x}, ["x"], ["y"], {"x": x})
    with pytest.raises(TypeError, match=r"forward mode: .*reverse mode: "):
        comp.jacobian({"x": x}, ["x"], ["y"])


def test_python_numbers_as_outputs_become_arrays_of_the_declared_dtype():
    comp = Component(lambda d: {"y": d["x"], "t": 2}, inputs=In, outputs=Out)
    out = comp.apply({"x": ONES})
    assert out["t"].dtype == jnp.float32 and float(out["t"]) == 2.0
    bad = Component(lambda d: {"y": d["x"], "t": 1e40}, inputs=In, outputs=Out)
    with pytest.raises(TypeError, match="output 't' is the Python number"):
        bad.apply({"x": ONES})


def test_zero_size_and_scalar_inputs():
    comp = Component(smooth, inputs=In, outputs=Out)
    empty = np.zeros(0, np.float32)
    assert comp.apply({"x": empty})["y"].shape == (0,)
    grads = comp.vjp({"x": empty}, ["x", "s"], ["y", "t"], {"y": empty, "t": 1.0})
    assert grads["x"].shape == (0,) and float(grads["s"]) == 0.0
    jac = comp.jacobian({"x": empty}, ["x"], ["y"])
    assert jac["y"]["x"].shape == (0, 0)
    ds = comp.jacobian({"x": ONES, "s": 2.0}, ["s"], ["t", "y"])
    np.testing.assert_allclose(ds["y"]["s"], np.sin(ONES), rtol=1e-6)


# -- refusals say what the path is --------------------------------------------------------


@pytest.mark.parametrize(
    "ins, outs, words",
    [
        (["n"], ["y"], "'n' is a static input"),
        (["pair[0]"], ["y"], "'pair\\[0\\]' is a static input"),
        (["v"], ["y"], "'v' is an array input that is not Differentiable"),
        (["y"], ["y"], "'y' is an output, not an input"),
        (["x"], ["x"], "'x' is an input, not an output"),
        (["xx"], ["y"], "'xx' is not an input \\(did you mean 'x'\\?\\)"),
        (["x"], ["t"], "'t' is not present in this output"),
        (["x["], ["y"], "The vjp input 'x\\[' is not a path"),
    ],
)
def test_a_path_that_cannot_be_differentiated_is_named_for_what_it_is(ins, outs, words):
    comp = Component(lambda d: {"y": d["x"]}, inputs=In, outputs=Out)  # t is None here
    with pytest.raises(ComponentInputError, match=words):
        comp.vjp({"x": ONES}, ins, outs, {o: ONES for o in outs if o != "x["})


def fixed_point(d):
    x = d["x"]
    body = lambda c: (c[0] * 0.5 + x, c[1] + 1)
    return {"y": jax.lax.while_loop(lambda c: c[1] < 5, body, (x, 0))[0]}


def test_a_while_loop_runs_forward_and_refuses_reverse_by_name():
    """lax.while_loop has forward mode but no reverse mode: jacobian(mode="auto") uses
    forward mode even where reverse would be cheaper, and vjp names the endpoint."""
    comp = Component(fixed_point, inputs=Vec, outputs=VecOut)
    x = np.ones(3, np.float32)
    np.testing.assert_allclose(comp.apply({"x": x})["y"], np.full(3, 1.96875))
    np.testing.assert_allclose(comp.jvp({"x": x}, ["x"], ["y"], {"x": x})["y"], 1.96875)

    class Total(pydantic.BaseModel):
        t: Differentiable[Array[np.float32, ()]]

    total = Component(lambda d: {"t": jnp.sum(fixed_point(d)["y"])}, inputs=Vec, outputs=Total)
    jac = total.jacobian({"x": x}, ["x"], ["t"])["t"]["x"]  # 3 inputs, 1 output: rev first
    np.testing.assert_allclose(jac, np.full(3, 1.96875))
    with pytest.raises(TypeError, match=r"Component\.vjp cannot differentiate .*while_loop"):
        comp.vjp({"x": x}, ["x"], ["y"], {"y": x})
