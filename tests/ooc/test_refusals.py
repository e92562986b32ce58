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


# the same transformations with the DiskArray as the argument (JAX then asks its type
# for a sharding to build the basis of jacfwd/jacrev, and shard_map for its specs)
def _square_sum(x):
    return ooc.sum(x * x)


def _shard_map(f):
    spec = jax.sharding.PartitionSpec()
    return jax.shard_map(f, mesh=jax.make_mesh((1,), ("i",)), in_specs=spec, out_specs=spec)


CASES |= {
    "jacfwd of a DiskArray": (lambda X: jax.jacfwd(_square_sum)(X), "jax.jacrev"),
    "jacfwd of a DiskArray under jit": (lambda X: jax.jit(jax.jacfwd(_square_sum))(X), "jacrev"),
    "jacrev of a DiskArray": (lambda X: jax.jacrev(_square_sum)(X), "use jax.grad"),
    "jacrev of a DiskArray result": (lambda X: jax.jacrev(lambda x: x * 2.0)(X), "jax.vjp"),
    "hessian of a DiskArray": (lambda X: jax.hessian(_square_sum)(X), "finite differences"),
    "hessian of a DiskArray under jit": (
        lambda X: jax.jit(jax.hessian(_square_sum))(X),
        "finite differences",
    ),
    "linearize of a DiskArray": (lambda X: jax.linearize(_square_sum, X), "jax.vjp"),
    "checkpoint of a DiskArray": (
        lambda X: jax.grad(jax.checkpoint(_square_sum))(X),
        "remove jax.checkpoint",
    ),
    # JAX's checkpoint hands back a DiskArray result as its bare int32 handle
    "checkpoint of a DiskArray result": (
        lambda X: jax.checkpoint(lambda x: x * 2.0)(X),
        "remove jax.checkpoint",
    ),
    "checkpoint of a DiskArray result under jit": (
        lambda X: jax.jit(jax.checkpoint(lambda x: x * 2.0))(X),
        "remove jax.checkpoint",
    ),
    "checkpoint of a DiskArray without grad": (
        lambda X: jax.jit(jax.checkpoint(_square_sum))(X),
        "remove jax.checkpoint",
    ),
    "shard_map of a DiskArray": (
        lambda X: _shard_map(_square_sum)(X),
        "outside jax.pmap/shard_map",
    ),
    "shard_map closing over a traced DiskArray": (
        lambda X: jax.jit(lambda x: _shard_map(lambda s: ooc.sum(x * s))(1.0))(X),
        "outside jax.pmap/shard_map",
    ),
}
# the transformation named in the message: the case's first word, but for remat
NAMES = {"remat": "checkpoint"}
# From jax 0.12, jax.pmap is a jax.jit with device shardings: JAX refuses a hijax
# argument with a sharding itself, before any of the DiskArray type's hooks is asked
# (a TypeError raised from them is replaced by JAX's "Error interpreting argument");
# so it does for jax.device_put and with_sharding_constraint.
JAX_REFUSES_PMAP_ARGUMENTS = tuple(int(p) for p in jax.__version__.split(".")[:2]) >= (0, 12)
#: From jax 0.12.1 shard_map passes a value its body closes over through a shard_map
#: of its own (`_unmatch_spec`), which reads the value's sharding: a DiskArray closed
#: over is then refused in gradpipe's words, as one passed in is.
JAX_SHARDS_CLOSED_OVER = tuple(int(p) for p in jax.__version__.split(".")[:3]) >= (0, 12, 1)


@pytest.mark.parametrize("case", list(CASES))
def test_unsupported_transformation_is_named_with_its_alternative(case):
    X = _disk()
    run, alternative = CASES[case]
    name = NAMES.get(case, case.split()[0])
    with pytest.raises(TypeError, match=rf"does not support jax\.{name} on DiskArrays") as info:
        run(X)
    assert alternative.lower() in str(info.value).lower()


def test_pmap_of_a_disk_array_argument_is_refused():
    X = _disk()
    if JAX_REFUSES_PMAP_ARGUMENTS:
        with pytest.raises(NotImplementedError, match=r"non-array \(hijax\) type DiskArray\{"):
            jax.pmap(_square_sum)(X)
        return
    with pytest.raises(TypeError, match=r"does not support jax\.pmap on DiskArrays.*outside jax"):
        jax.pmap(_square_sum)(X)


def test_scanning_over_the_rows_of_a_disk_array_is_refused():
    X = _disk()
    with pytest.raises(TypeError, match=r"lax\.scan.*cannot iterate over the rows"):
        jax.lax.scan(lambda c, x: (c, None), 0.0, X, length=4)


@pytest.mark.parametrize("jit", [False, True])
def test_differentiating_a_loop_that_carries_a_disk_array_is_refused(jit):
    X = _disk()
    wrap = jax.jit if jit else (lambda f: f)

    def f(s):
        return ooc.sum(jax.lax.scan(lambda c, _: (c * s, None), X, None, length=2)[0])

    def g(x):
        return ooc.sum(jax.lax.fori_loop(0, 2, lambda i, c: c * 2.0, x))

    with pytest.raises(TypeError, match="stack DiskArrays"):
        wrap(jax.grad(f))(2.0)
    with pytest.raises(TypeError, match="stack DiskArrays"):
        wrap(jax.grad(g))(X)


@pytest.mark.parametrize("jit", [False, True])
def test_a_disk_array_per_scan_step_is_refused(jit):
    X = _disk()
    wrap = jax.jit if jit else (lambda f: f)
    with pytest.raises(TypeError, match=r"stack DiskArrays.*lax\.scan returning one"):
        wrap(lambda x: jax.lax.scan(lambda c, _: (c, x * 2.0), 0.0, None, length=3))(X)


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


@pytest.mark.parametrize("jit", [False, True])
def test_supported_transformations_of_a_disk_array_argument_match_jax_numpy(jit):
    X = _disk()
    A = jax.numpy.asarray(X.to_numpy())
    wrap = jax.jit if jit else (lambda f: f)

    def both(f, *args):
        """``f`` on ``X`` out of core and on ``A`` in memory, as NumPy arrays."""
        out = wrap(f)(X, *args)
        out = out.to_numpy() if isinstance(out, ooc.DiskArray) else np.asarray(out)
        return out, np.asarray(f(A, *args))

    def square_sum(x):
        return (x * x).sum()

    def looped(x):
        return jax.lax.fori_loop(0, 3, lambda i, c: c * 2.0 + x, x)

    def carried(x):
        return jax.lax.scan(lambda c, _: (c * 0.5 - x, None), x, None, length=2)[0]

    def branch(x, p):
        return jax.lax.cond(p, lambda y: y * 2.0, lambda y: y - 1.0, x)

    def switch(x, i):
        return jax.lax.switch(i, [lambda y: y * 2.0, lambda y: y - 1.0, lambda y: -y], x)

    mesh = jax.make_mesh((1,), ("i",))
    spec = jax.sharding.PartitionSpec()
    cases = {
        "fori_loop": (looped,),
        "scan carry": (carried,),
        "cond": (branch, False),
        "switch": (switch, 2),
        "grad of cond": (jax.grad(lambda x, p: branch(x, p).sum()), True),
        "grad of switch": (jax.grad(lambda x, i: (switch(x, i) * x).sum()), 1),
    }

    def closing_over(x):
        body = jax.shard_map(lambda s: (x * s).sum(), mesh=mesh, in_specs=spec, out_specs=spec)
        return body(jax.numpy.float32(3.0))

    if not jit and not JAX_SHARDS_CLOSED_OVER:  # (a traced one cannot be closed over:
        cases["shard_map closing over it"] = (closing_over,)  # see "shard_map closing over")
    elif not jit:
        with pytest.raises(TypeError, match=r"does not support jax\.shard_map on DiskArrays"):
            closing_over(X)
    for case, (f, *args) in cases.items():
        out, expected = both(f, *args)
        np.testing.assert_allclose(out, expected, rtol=1e-6, err_msg=case)
    shape = jax.eval_shape(looped, X)
    assert (shape.shape, shape.dtype) == (X.shape, X.dtype)


# JAX's own functions that cannot take a DiskArray, each named with what to do instead,
# in the modes where it is reached (eagerly jnp.array and jnp.zeros_like make an
# in-memory array from a concrete DiskArray, as from a NumPy one)
def _constrained(x):
    one_device = jax.sharding.make_single_device_sharding(jax.devices()[0])
    return jax.lax.with_sharding_constraint(x, one_device)


JAX_FUNCTIONS = {
    "jax.device_put": (jax.device_put, "eager jit grad jit(grad)", "jax.device_put(x.to_numpy())"),
    "jax.lax.with_sharding_constraint": (_constrained, "eager jit grad jit(grad)", "in-memory"),
    "jax.numpy.array": (jax.numpy.array, "jit jit(grad)", "ooc.asarray(x)"),
    "jax.numpy.zeros_like": (jax.numpy.zeros_like, "jit grad jit(grad)", "ooc.zeros_like(x)"),
}
JAX_REFUSES_SHARDED_HIJAX = (
    {"jax.device_put", "jax.lax.with_sharding_constraint"} if JAX_REFUSES_PMAP_ARGUMENTS else set()
)
MODES = {
    "eager": lambda f: f,
    "jit": jax.jit,
    "grad": jax.grad,
    "jit(grad)": lambda f: jax.jit(jax.grad(f)),
}


@pytest.mark.parametrize(
    "function, mode",
    [(name, mode) for name, (_, modes, _) in JAX_FUNCTIONS.items() for mode in modes.split()],
)
def test_jax_functions_that_cannot_take_a_disk_array_are_named(function, mode):
    X = _disk()
    f, _, instead = JAX_FUNCTIONS[function]

    def program(x):
        f(x)
        return ooc.sum(x * x)

    if JAX_REFUSES_SHARDED_HIJAX and function in JAX_REFUSES_SHARDED_HIJAX:
        # from jax 0.12 JAX refuses these itself, naming the type, before gradpipe is asked
        with pytest.raises(NotImplementedError, match=r"hijax\)? type DiskArray\{float32\[4, 3\]"):
            MODES[mode](program)(X)
        return
    with pytest.raises(TypeError, match=r"cannot take a DiskArray\[4, 3\]") as info:
        MODES[mode](program)(X)
    assert function in str(info.value) and instead in str(info.value)


@pytest.mark.parametrize("mode", list(MODES))
def test_debug_print_of_an_unknown_jax_is_refused_not_misprinted(mode, monkeypatch):
    """Where JAX's jax.debug.print passes its arguments otherwise than gradpipe knows
    (a later version), a DiskArray is refused by name, not printed as its handle."""
    from gradpipe.ooc.arrays import _jax_hooks

    X = _disk()
    prim = jax.make_jaxpr(lambda x: jax.debug.print("{}", x))(1.0).eqns[0].primitive
    original = prim.to_lojax
    rule = _jax_hooks._printed(prim)
    monkeypatch.setattr(
        prim,
        "to_lojax",
        lambda *args, **params: (
            rule(*args, **{k: v for k, v in params.items() if k != "static_args"})
            if any(isinstance(a, ooc.DiskArray) for a in args)
            else original(*args, **params)
        ),
    )

    def program(x):
        jax.debug.print("{}", x)
        return ooc.sum(x * x)

    with pytest.raises(TypeError, match=r"jax\.debug\.print cannot take.*jax\.debug\.callback"):
        MODES[mode](program)(X)
