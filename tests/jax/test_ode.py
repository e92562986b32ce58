"""ODEForwardModel: dc/dt = -0.25 c over one hour, under three adjoints."""

import json
import math
import sys

import equinox as eqx
import jax
import jax.numpy as jnp
import pytest

import gradpipe as gp
from gradpipe.jax import (
    BacksolveAdjoint,
    DirectAdjoint,
    JaxOperator,
    ODEForwardModel,
    RecursiveCheckpointAdjoint,
    TruncatedAdjoint,
    truncated_scan,
)

LAM = 0.25


class Decay(JaxOperator):
    """A vector field that can be saved: first-order loss at rate `rate`."""

    rate: jax.Array

    def _apply(self, t, c, args):
        return -self.rate * c


def decay_model(**kwargs):
    settings = {"dt": 1.0, "dt0": 0.01, "max_steps": 128, **kwargs}
    return ODEForwardModel(lambda t, c, lam: -lam * c, args=jnp.asarray(LAM), **settings)


def test_one_hour_value_and_gradients(x64):
    # All three adjoints give these numbers too: tests/jax/test_retrieval_example.py
    # checks them on the example's run, so they are compiled once per test session.
    model = decay_model().with_adjoint(BacksolveAdjoint())

    def one_hour(lam, c0):
        return eqx.tree_at(lambda m: m.args, model, lam)(c0)

    value, (dlam, dc0) = jax.jit(jax.value_and_grad(one_hour, argnums=(0, 1)))(
        jnp.asarray(LAM), jnp.asarray(100.0)
    )
    assert abs(float(value) / (100 * math.exp(-LAM)) - 1) < 1e-6
    assert float(value) == pytest.approx(77.88, abs=5e-3)
    assert abs(float(dc0) / math.exp(-LAM) - 1) < 1e-6
    # the rate is a leaf too: d c(1) / d lambda = -c0 e^{-lambda}
    assert float(dlam) == pytest.approx(-100 * math.exp(-LAM), rel=1e-6)


def test_truncated_spec_points_to_truncated_scan():
    with pytest.raises(ValueError, match=r"truncated_scan\(f, init, xs, k=3\)"):
        decay_model().with_adjoint(TruncatedAdjoint(k=3))
    with pytest.raises(ValueError, match="truncated_scan"):
        decay_model(adjoint=TruncatedAdjoint(k=3))
    with pytest.raises(TypeError, match="adjoint must be"):
        decay_model().with_adjoint("direct")
    assert decay_model().with_adjoint(DirectAdjoint()).adjoint == DirectAdjoint()
    assert decay_model().adjoint == RecursiveCheckpointAdjoint()


def test_rollout_of_the_model_inside_truncated_scan(x64):
    model = decay_model(solver="euler", dt0=0.25, max_steps=8)

    def hour(c, q):
        c = model(c) + q
        return c, c

    grad = jax.grad(lambda q: truncated_scan(hour, 0.0, q, k=2)[0])(jnp.ones(4))
    assert int(jnp.count_nonzero(grad)) == 2
    assert float(grad[-2]) == pytest.approx((1 - LAM / 4) ** 4, rel=1e-12)  # 4 Euler steps


def test_state_round_trips_with_a_saveable_vector_field(x64):
    model = ODEForwardModel(
        Decay(jnp.asarray(LAM)),
        dt=1.0,
        dt0=0.05,
        solver="dopri5",
        rtol=1e-8,
        atol=1e-8,
        adjoint=BacksolveAdjoint(),
    )
    text = json.dumps(model.state)
    assert '"kind": "backsolve"' in text and "0.25" not in text
    rebuilt = gp.from_state(json.loads(text)).with_weights(model.serialize_weights())
    assert rebuilt.adjoint == BacksolveAdjoint() and rebuilt.solver == "dopri5"
    assert float(rebuilt(100.0)) == pytest.approx(100 * math.exp(-LAM), rel=1e-6)


def test_bad_settings_are_named():
    with pytest.raises(ValueError, match="solver must be one of"):
        decay_model(solver="rk4")
    with pytest.raises(ValueError, match="both rtol and atol"):
        decay_model(rtol=1e-6)
    with pytest.raises(gp.ConfigError, match="vector_field"):
        decay_model().state


def test_missing_diffrax_names_the_ode_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "diffrax", None)  # what an uninstalled module does
    model = decay_model()  # building needs no diffrax
    with pytest.raises(ImportError, match=r"gradpipe\[ode\]"):
        model.step(1.0, 1.0)
