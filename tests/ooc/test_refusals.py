"""Transformations DiskArrays do not support: a TypeError naming it and the alternative."""

import jax
import numpy as np
import pytest

from gradpipe import ooc


def _disk():
    # not a fixture: pytest keeps the last test's fixture values past the session's
    # check that every scratch file is gone
    return ooc.DiskArray.from_numpy(np.arange(12, dtype=np.float32).reshape(4, 3))


CASES = {
    "jvp": (lambda X: jax.jvp(lambda s: ooc.sum(X * s), (1.0,), (1.0,)), "jax.vjp or jax.grad"),
    "jvp of a DiskArray": (lambda X: jax.jvp(ooc.sum, (X,), (X,)), "jax.vjp or jax.grad"),
    "jacfwd": (lambda X: jax.jacfwd(lambda s: ooc.sum(X * s))(1.0), "jax.jacrev"),
    "linearize": (lambda X: jax.linearize(lambda s: ooc.sum(X * s), 1.0), "jax.vjp"),
    "hessian": (lambda X: jax.hessian(lambda s: ooc.sum(X * s * s))(1.0), "finite differences"),
    "checkpoint": (
        lambda X: jax.grad(jax.checkpoint(lambda s: ooc.sum(X * s)))(1.0),
        "remove jax.checkpoint",
    ),
    "remat": (
        lambda X: jax.jit(
            jax.grad(
                jax.remat(lambda x: ooc.sum(x * x), policy=jax.checkpoint_policies.nothing_saveable)
            )
        )(X),
        "remove jax.checkpoint",
    ),
    "vmap": (lambda X: jax.vmap(lambda s: ooc.sum(X * s))(np.arange(3.0)), "loop in Python"),
    "vmap over a DiskArray": (lambda X: jax.vmap(ooc.sum)(X), "loop in Python"),
    "jacrev": (lambda X: jax.jacrev(lambda s: ooc.sum(X * s))(1.0), "use jax.grad"),
    "pmap": (lambda X: jax.pmap(lambda s: ooc.sum(X * s))(np.ones(1)), "outside jax.pmap"),
}
NAMES = {"jvp of a DiskArray": "jvp", "remat": "checkpoint", "vmap over a DiskArray": "vmap"}


@pytest.mark.parametrize("case", list(CASES))
def test_unsupported_transformation_is_named_with_its_alternative(case):
    X = _disk()
    run, alternative = CASES[case]
    name = NAMES.get(case, case)
    with pytest.raises(TypeError, match=rf"does not support jax\.{name} on DiskArrays") as info:
        run(X)
    assert alternative.lower() in str(info.value).lower()


def test_scanning_over_the_rows_of_a_disk_array_is_refused():
    X = _disk()
    with pytest.raises(TypeError, match=r"lax\.scan.*cannot iterate over the rows"):
        jax.lax.scan(lambda c, x: (c, None), 0.0, X, length=4)


def test_differentiating_a_loop_that_carries_a_disk_array_is_refused():
    X = _disk()

    def f(s):
        return ooc.sum(jax.lax.scan(lambda c, _: (c * s, None), X, None, length=2)[0])

    with pytest.raises(TypeError, match="stack DiskArrays"):
        jax.grad(f)(2.0)


@pytest.mark.parametrize("jit", [False, True])
def test_supported_transformations_work(jit):
    X = _disk()
    A = X.to_numpy()
    wrap = jax.jit if jit else (lambda f: f)
    assert jax.eval_shape(lambda x: x @ x.T, X).shape == (4, 4)
    carried = wrap(lambda: jax.lax.scan(lambda c, _: (c * 2.0 + X, None), X, None, length=3)[0])
    np.testing.assert_allclose(carried().to_numpy(), A * 15.0)
    looped = wrap(lambda: jax.lax.while_loop(lambda c: ooc.sum(c) < 500.0, lambda c: c * 2.0, X))
    np.testing.assert_allclose(looped().to_numpy(), A * 8.0)
    branch = wrap(lambda p: jax.lax.cond(p, lambda x: x * 2.0, lambda x: x * 3.0, X))
    np.testing.assert_allclose(branch(False).to_numpy(), A * 3.0)
    g = wrap(jax.grad(jax.jit(lambda x: ooc.sum(x * x))))(X)
    np.testing.assert_allclose(g.to_numpy(), 2 * A)
