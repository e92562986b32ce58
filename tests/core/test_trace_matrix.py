"""Every core operator under jax.jit, jax.vmap and jax.grad.

Each either gives the result of the equivalent plain JAX function, or raises a
`TypeError` that names the operator. None returns a different value.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradpipe as gp
from gradpipe import Input, Lambda

sq = Lambda(lambda x: x**2, name="sq")
sin = Lambda(jnp.sin, name="sin")


def _graph():
    x = Input("x")
    a = sq(x)
    pair = gp.Fanout({"s": sin, "c": Lambda(jnp.cos)})(a)
    return gp.Graph(inputs=[x], outputs=Lambda(lambda p, q: p + q)(pair["s"], q=pair["c"]))


# name -> (operator factory, reference function or None if it must refuse)
CASES = {
    "Identity": (gp.Identity, lambda x: x),
    "Const": (lambda: gp.Const(2.0), lambda x: 2.0),
    "Lambda": (lambda: sq, lambda x: x**2),
    "Sequential": (lambda: sq | sin | gp.Identity(), lambda x: jnp.sin(x**2)),
    "Graph": (_graph, lambda x: jnp.sin(x**2) + jnp.cos(x**2)),
    "Fanout": (
        lambda: gp.Fanout([sq, sin]) | Lambda(lambda t: t[0] + t[1]),
        lambda x: x**2 + jnp.sin(x),
    ),
    "ShapeTrace": (gp.ShapeTrace, lambda x: x),
    "Branch": (lambda: gp.Branch(lambda x: True, sq, sin), None),
    "Switch": (lambda: gp.Switch(lambda x: 0, [sq, sin]), None),
    "Cache": (lambda: gp.Cache(sq), None),
    "Tap": (lambda: gp.Tap(print), None),
    "Sink": (gp.Sink, None),
    "Snapshot": (lambda: gp.Snapshot().at("z"), None),
    "Profile": (lambda: gp.Profile().wrap(sq), None),
}

TRANSFORMS = {
    "jit": lambda f: jax.jit(f),
    "vmap": lambda f: jax.vmap(f),
    "grad": lambda f: jax.grad(lambda x: jnp.sum(f(x))),
}

X = jnp.array([0.3, -1.2, 2.0], dtype=jnp.float32)
XS = jnp.array([[0.3, -1.2, 2.0], [1.0, 0.5, -0.1]], dtype=jnp.float32)


@pytest.mark.parametrize("transform", list(TRANSFORMS))
@pytest.mark.parametrize("name", list(CASES))
def test_trace_matrix(name, transform):
    factory, reference = CASES[name]
    op = factory()
    x = XS if transform == "vmap" else X
    wrapped = TRANSFORMS[transform](op)
    if reference is None:
        with pytest.raises(TypeError, match=name):
            wrapped(x)
        return
    expected = TRANSFORMS[transform](reference)(x)
    np.testing.assert_allclose(np.asarray(wrapped(x)), np.asarray(expected), rtol=1e-6)


def test_refused_operators_work_eagerly_on_jax_arrays():
    for name, (factory, reference) in CASES.items():
        if reference is None:
            factory()(X)  # no error outside tracing
            assert name


def test_shape_trace_runs_once_per_trace():
    trace = gp.ShapeTrace()
    f = jax.jit(trace | sq)
    for _ in range(3):
        f(X)
    assert trace.records == ["float32[3]"]
    f(XS)
    assert trace.records == ["float32[3]", "float32[2, 3]"]
