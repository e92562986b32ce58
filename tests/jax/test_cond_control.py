"""CondBranch and CondSwitch: the core's Branch and Switch, chosen at run time."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradpipe as gp
from gradpipe.jax import CondBranch, CondSwitch

sq = gp.Lambda(lambda x: x**2, name="sq")
sin = gp.Lambda(jnp.sin, name="sin")
total = gp.Lambda(jnp.sum, name="total")
positive = gp.Lambda(lambda x: jnp.sum(x) > 0, name="positive")
X = jnp.array([0.3, -1.2, 2.0])


@pytest.mark.parametrize("x", [X, -X])
def test_cond_branch_equals_branch_on_concrete_inputs(x, x64):
    x = jnp.asarray(x, jnp.float64)
    eager = gp.Branch(positive, sq, sin)(x)
    cond = CondBranch(positive, sq, sin)
    np.testing.assert_allclose(cond(x), eager, rtol=1e-12, atol=0)
    np.testing.assert_allclose(jax.jit(cond)(x), eager, rtol=1e-12, atol=0)


def test_cond_branch_under_vmap_chooses_per_row():
    cond = CondBranch(positive, sq, sin)
    rows = jnp.stack([X, -X])
    np.testing.assert_allclose(jax.vmap(cond)(rows), jnp.stack([X**2, jnp.sin(-X)]), rtol=1e-6)


def test_cond_branch_with_plain_function_predicate_and_keywords():
    cond = CondBranch(lambda x, scale: scale > 1, gp.Lambda(lambda x, scale: x * scale), sin)
    with pytest.raises(TypeError, match="scale") as raised:  # sin takes no 'scale'
        cond(X, scale=2.0)
    assert "same structure" not in str(raised.value)  # the branch's own error, unchanged
    cond = CondBranch(
        lambda x, scale: scale > 1,
        gp.Lambda(lambda x, scale: x * scale),
        gp.Lambda(lambda x, scale: x - scale),
    )
    np.testing.assert_allclose(jax.jit(cond)(X, scale=2.0), X * 2.0)
    np.testing.assert_allclose(jax.jit(cond)(X, scale=0.5), X - 0.5)


def test_branches_of_different_shapes_raise_at_first_call_naming_both():
    cond = CondBranch(positive, sq, total)
    both = r"if_true returns float32\[3\]; if_false returns float32\[\]"
    with pytest.raises(TypeError, match=both):
        cond(X)
    with pytest.raises(TypeError, match=r"CondBranch"):
        jax.jit(cond)(X)
    switch = CondSwitch(lambda x: 0, [sq, gp.Lambda(lambda x: x.astype(jnp.int32))])
    each = r"branches\[0\] returns float32\[3\]; branches\[1\] returns int32\[3\]"
    with pytest.raises(TypeError, match=each):
        switch(X)


def test_predicate_must_be_a_scalar():
    with pytest.raises(TypeError, match=r"CondBranch.predicate must return a scalar.*bool\[3\]"):
        CondBranch(lambda x: x > 0, sq, sin)(X)


@pytest.mark.parametrize("i", [0, 1, 2])
def test_cond_switch_equals_switch_on_concrete_inputs(i, x64):
    x = jnp.asarray(X, jnp.float64)
    branches = [sq, sin, gp.Lambda(jnp.cos)]
    eager = gp.Switch(lambda x: i, branches)(x)
    switch = CondSwitch(lambda x: i, branches)
    np.testing.assert_allclose(switch(x), eager, rtol=1e-12, atol=0)
    from_input = lambda x: jnp.int32(i) + 0 * jnp.sign(x[0]).astype(jnp.int32)  # traced
    traced_index = CondSwitch(from_input, branches)
    np.testing.assert_allclose(jax.jit(traced_index)(x), eager, rtol=1e-12, atol=0)


def test_cond_switch_never_clamps_an_index():
    with pytest.raises(IndexError, match="returned 2, outside the 2 branches"):
        CondSwitch(lambda x: 2, [sq, sin])(X)
    with pytest.raises(IndexError, match="returned -1"):
        CondSwitch(lambda x: -1, [sq, sin])(X)
    traced = CondSwitch(lambda x: jnp.sum(x > 0).astype(jnp.int32), [sq, sin])  # 2 here
    with pytest.raises(Exception, match="outside the 2 branches"):
        jax.block_until_ready(eqx.filter_jit(traced)(X))


def test_cond_switch_index_must_be_an_int():
    with pytest.raises(TypeError, match="must return an int"):
        CondSwitch(lambda x: 0.5, [sq, sin])(X)
    with pytest.raises(TypeError, match="scalar int"):
        jax.jit(CondSwitch(lambda x: x[0], [sq, sin]))(X)
    with pytest.raises(ValueError, match="at least one branch"):
        CondSwitch(lambda x: 0, [])


def test_the_core_operators_point_here_under_tracing():
    with pytest.raises(TypeError, match="CondBranch"):
        jax.jit(gp.Branch(positive, sq, sin))(X)
    with pytest.raises(TypeError, match="CondSwitch"):
        jax.jit(gp.Switch(lambda x: 0, [sq, sin]))(X)
