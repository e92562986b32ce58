"""Which residuals a component keeps: ``residuals="auto"`` recomputes elementwise work
in the backward pass, keeps costly results, and keeps everything for functions with
side effects; every setting gives the gradients of ``jax.grad``."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pydantic
import pytest

from gradpipe.component import Array, Component, Differentiable
from gradpipe.component._recompute import _equations

N = 64


class In(pydantic.BaseModel):
    x: Differentiable[Array[np.float32, (N,)]]


class Out(pydantic.BaseModel):
    y: Differentiable[Array[np.float32, (N,)]]


X = np.linspace(-2.0, 2.0, N, dtype=np.float32)
CT = np.linspace(0.5, 1.5, N, dtype=np.float32)
W = (np.random.default_rng(0).standard_normal((N, N)) / np.sqrt(N)).astype(np.float32)


def elementwise(x):
    return jnp.tanh(x) * jnp.sin(3.0 * x) + 0.5 * x * x


def matmul(x):
    return jnp.sin(W @ jnp.tanh(x))


def loop(x):
    return jax.lax.fori_loop(0, 20, lambda _, y: jnp.sin(y) + 0.1 * x, x)


@jax.custom_jvp
def cube_root(x):
    return jax.lax.fori_loop(0, 30, lambda _, y: y - (y**3 + y - x) / (3 * y**2 + 1), x / 2)


@cube_root.defjvp
def _cube_root_jvp(primals, tangents):
    y = cube_root(primals[0])
    return y, tangents[0] / (3 * y**2 + 1)


def solve(x):
    return cube_root(x) * (1.0 + 0.1 * x)


FUNCTIONS = {"elementwise": elementwise, "matmul": matmul, "loop": loop, "solve": solve}
SETTINGS = ["auto", "all", "inputs", jax.checkpoint_policies.dots_saveable]


def component(fn, residuals="auto"):
    return Component(
        lambda d: {"y": fn(d["x"])},
        inputs=In,
        outputs=Out,
        residual_cache=False,
        residuals=residuals,
    )


@pytest.mark.parametrize("setting", SETTINGS, ids=["auto", "all", "inputs", "dots_saveable"])
@pytest.mark.parametrize("name", FUNCTIONS)
def test_every_setting_gives_the_gradient_of_jax_grad(name, setting):
    fn = FUNCTIONS[name]
    comp = component(fn, setting)
    expected = jax.vjp(fn, jnp.asarray(X))[1](jnp.asarray(CT))[0]
    outputs, residuals = comp.apply_keep({"x": X})
    np.testing.assert_allclose(outputs["y"], fn(jnp.asarray(X)), rtol=1e-6, atol=1e-6)
    got = comp.vjp_from(residuals, ["x"], ["y"], {"y": CT})["x"]
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(
        comp.vjp({"x": X}, ["x"], ["y"], {"y": CT})["x"], expected, rtol=1e-5, atol=1e-6
    )


def test_auto_holds_only_the_input_of_an_elementwise_function():
    _, auto = component(elementwise).apply_keep({"x": X})
    _, everything = component(elementwise, "all").apply_keep({"x": X})
    assert auto.nbytes == X.nbytes
    assert everything.nbytes >= 3 * X.nbytes


def _primitives(fn, *args):
    return {eqn.primitive.name for eqn in _equations(jax.make_jaxpr(fn)(*args).jaxpr)}


@pytest.mark.parametrize("name", ["solve", "matmul"])
def test_auto_keeps_the_results_of_loops_and_products(name):
    """The backward pass of ``auto`` runs no loop and no matrix product of the forward
    pass again; that of ``inputs`` recomputes them."""
    costly = {"solve": {"while", "scan"}, "matmul": {"dot_general"}}[name]
    fn = FUNCTIONS[name]
    _, auto = component(fn).apply_keep({"x": X})
    _, inputs = component(fn, "inputs").apply_keep({"x": X})
    ct = (jnp.asarray(CT),)
    if name == "solve":
        assert not costly & _primitives(auto._vjp_fn, ct)
        assert costly & _primitives(inputs._vjp_fn, ct)
    else:  # one product in the backward pass (the transpose), none recomputed
        count = str(jax.make_jaxpr(auto._vjp_fn)(ct)).count("dot_general")
        assert count == 1
        assert str(jax.make_jaxpr(inputs._vjp_fn)(ct)).count("dot_general") == 2


def test_a_function_with_a_debug_callback_runs_its_forward_pass_once():
    fired = []

    def noisy(x):
        jax.debug.callback(lambda v: fired.append(1), x)
        return jnp.sin(x) * x

    comp = component(noisy)
    _, residuals = comp.apply_keep({"x": X})
    comp.vjp_from(residuals, ["x"], ["y"], {"y": CT})
    jax.effects_barrier()
    assert len(fired) == 1

    recomputing = component(noisy, "inputs")
    _, residuals = recomputing.apply_keep({"x": X})
    recomputing.vjp_from(residuals, ["x"], ["y"], {"y": CT})
    jax.effects_barrier()
    assert len(fired) == 3  # "inputs" reruns the forward pass, callback included


def test_a_function_with_a_host_callback_keeps_everything():
    calls = []

    def host_square(v):
        calls.append(1)
        return np.asarray(v) ** 2

    @jax.custom_jvp
    def square(x):
        return jax.pure_callback(host_square, jax.ShapeDtypeStruct(x.shape, x.dtype), x)

    @square.defjvp
    def _square_jvp(primals, tangents):
        return square(primals[0]), 2 * primals[0] * tangents[0]

    comp = component(lambda x: jnp.tanh(square(x)))
    _, residuals = comp.apply_keep({"x": X})
    grad = comp.vjp_from(residuals, ["x"], ["y"], {"y": CT})["x"]
    assert len(calls) == 1
    expected = CT * 2 * X / np.cosh(X.astype(np.float64) ** 2) ** 2
    np.testing.assert_allclose(grad, expected, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("bad", ["dots", "", None, 3])
def test_an_unknown_setting_is_refused_with_the_choices(bad):
    with pytest.raises(ValueError, match="'auto', 'all', 'inputs'"):
        component(elementwise, bad)


def test_effects_inside_a_custom_derivative_rule_keep_everything():
    """The primal is pure; the custom rule's forward half prints. The check runs on
    the differentiated function, so it sees the rule and nothing is recomputed."""
    fired = []

    @jax.custom_vjp
    def scaled(x):
        return 2.0 * jnp.sin(x)

    def scaled_fwd(x):
        jax.debug.callback(lambda v: fired.append(1), x)
        return 2.0 * jnp.sin(x), jnp.cos(x)

    def scaled_bwd(cos_x, ct):
        return (2.0 * cos_x * ct,)

    scaled.defvjp(scaled_fwd, scaled_bwd)
    comp = component(lambda x: scaled(x) * x)
    _, residuals = comp.apply_keep({"x": X})
    grad = comp.vjp_from(residuals, ["x"], ["y"], {"y": CT})["x"]
    jax.effects_barrier()
    assert len(fired) == 1
    x64 = X.astype(np.float64)
    expected = CT * (2 * np.cos(x64) * x64 + 2 * np.sin(x64))
    np.testing.assert_allclose(grad, expected, rtol=1e-5, atol=1e-6)


def test_an_ordered_io_callback_in_a_custom_rule_works_under_auto():
    from jax.experimental import io_callback

    seen = []

    @jax.custom_vjp
    def logged(x):
        return jnp.tanh(x)

    def logged_fwd(x):
        io_callback(lambda v: seen.append(np.asarray(v).sum()), None, x, ordered=True)
        return jnp.tanh(x), x

    def logged_bwd(x, ct):
        return (ct / jnp.cosh(x) ** 2,)

    logged.defvjp(logged_fwd, logged_bwd)
    comp = component(logged)
    got = comp.vjp({"x": X}, ["x"], ["y"], {"y": CT})["x"]
    np.testing.assert_allclose(got, CT / np.cosh(X.astype(np.float64)) ** 2, rtol=1e-5)
    assert len(seen) == 1


def test_a_component_over_out_of_core_operations_differentiates_under_auto():
    from gradpipe import ooc

    A = np.random.default_rng(1).standard_normal((N, N)).astype(np.float32)
    a = ooc.DiskArray.from_numpy(A)

    def f(x):
        return x * ooc.sum(ooc.matmul(a, a))

    comp = component(f)
    total = np.float64((A.astype(np.float64) @ A).sum())
    np.testing.assert_allclose(comp.apply({"x": X})["y"], X * total, rtol=1e-4)
    got = comp.vjp({"x": X}, ["x"], ["y"], {"y": CT})["x"]
    np.testing.assert_allclose(got, CT * total, rtol=1e-4)


@pytest.mark.parametrize(
    "adjoint", ["RecursiveCheckpointAdjoint", "BacksolveAdjoint", "DirectAdjoint"]
)
def test_an_ode_model_served_under_auto_gives_the_gradient_of_each_adjoint(adjoint):
    from gradpipe import jax as gpj

    model = gpj.ODEForwardModel(
        lambda t, c, lam: -lam * c, args=jnp.asarray(0.25), dt=1.0, dt0=0.01, max_steps=128
    ).with_adjoint(getattr(gpj, adjoint)())

    class State(pydantic.BaseModel):
        c0: Differentiable[Array[np.float32, (8,)]]

    class Final(pydantic.BaseModel):
        y: Differentiable[Array[np.float32, (8,)]]

    c0, ct = np.linspace(1, 2, 8).astype(np.float32), np.ones(8, np.float32)
    comp = Component(lambda d: {"y": model(d["c0"])}, inputs=State, outputs=Final)
    want = jax.vjp(model, jnp.asarray(c0))[1](jnp.asarray(ct))[0]
    got = comp.vjp({"c0": c0}, ["c0"], ["y"], {"y": ct})["c0"]
    np.testing.assert_allclose(got, want, rtol=1e-6)
    np.testing.assert_allclose(got, np.exp(-0.25) * ct, rtol=1e-4)
