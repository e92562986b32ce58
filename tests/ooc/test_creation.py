"""The array API's creation functions write NumPy's values to disk, tile by tile."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from gradcases import MODE_IDS, MODES, GradCase, check

from gradpipe import ooc

BUDGET = 4096  # the minimum: every array below spans several pages


def _np(x):
    return x.to_numpy(force=True) if isinstance(x, ooc.DiskArray) else np.asarray(x)


def _same(got, want):
    got = _np(got)
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    assert got.shape == want.shape, (got.shape, want.shape)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize(
    "call",
    [
        lambda xp: xp.zeros((37, 5)),
        lambda xp: xp.zeros(11, dtype=xp.int8),
        lambda xp: xp.ones((3, 4, 29), dtype=xp.float32),
        lambda xp: xp.full((50, 3), 2.5),
        lambda xp: xp.full((50,), True),
        lambda xp: xp.full((7, 9), 3, dtype=xp.uint16),
        lambda xp: xp.full((4, 4), 1 + 2j),
        lambda xp: xp.arange(10),
        lambda xp: xp.arange(3, 400, 7),
        lambda xp: xp.arange(10.0, -3.0, -0.75),
        lambda xp: xp.arange(0, 5, dtype=xp.float32),
        lambda xp: xp.arange(5, 5),
        lambda xp: xp.linspace(0, 1, 301),
        lambda xp: xp.linspace(-2, 3, 50, endpoint=False, dtype=xp.float32),
        lambda xp: xp.linspace(0, 1j, 9),
        lambda xp: xp.eye(40),
        lambda xp: xp.eye(13, 30, k=4, dtype=xp.int32),
        lambda xp: xp.eye(30, 13, k=-2),
    ],
)
def test_creation_gives_numpys_values_and_dtypes(call):
    """With x64 on the default dtypes are NumPy's (test_x64_off.py: jax.numpy's
    32-bit ones while it is off)."""
    with jax.enable_x64(True), ooc.MemoryBudget(BUDGET):
        _same(call(ooc), call(np))


def test_like_functions_follow_the_template():
    X = np.arange(60, dtype=np.int16).reshape(12, 5)
    with ooc.MemoryBudget(BUDGET):
        x = ooc.asarray(X)
        _same(ooc.zeros_like(x), np.zeros_like(X))
        _same(ooc.ones_like(x, dtype=ooc.float32), np.ones_like(X, dtype=np.float32))
        _same(ooc.full_like(x, 7), np.full_like(X, 7))
        assert ooc.empty_like(x).shape == X.shape and ooc.empty_like(x).dtype == X.dtype
        assert ooc.empty((3, 8), dtype=ooc.uint8).dtype == np.uint8
        with pytest.raises(TypeError, match="fill value"):
            ooc.full_like(x, 2.5)


@pytest.mark.parametrize("k", [-3, -1, 0, 2, 7])
def test_tril_and_triu_follow_numpy_and_differentiate(k):
    X = np.random.default_rng(k + 5).standard_normal((2, 9, 7)).astype(np.float32)
    with ooc.MemoryBudget(BUDGET):
        x = ooc.asarray(X)
        _same(ooc.tril(x, k=k), np.tril(X, k=k))
        _same(ooc.triu(x, k=k), np.triu(X, k=k))
        g = jax.grad(lambda a: ooc.sum(ooc.square(ooc.triu(a, k=k))))(x)
        want = jax.grad(lambda a: jnp.sum(jnp.square(jnp.triu(a, k=k))))(X)
        np.testing.assert_allclose(g.to_numpy(), np.asarray(want), rtol=1e-6)
    with pytest.raises(ValueError, match="2 dimensions"):
        ooc.tril(ooc.arange(4.0))


def test_asarray_copies_in_memory_data_and_keeps_disk_arrays():
    with ooc.MemoryBudget(BUDGET):
        with jax.enable_x64(True):  # Python numbers take the default dtypes: NumPy's here
            nested = ooc.asarray([[1, 2, 3], [4, 5, 6]])
        _same(nested, np.asarray([[1, 2, 3], [4, 5, 6]]))
        _same(ooc.asarray([1.5, 2], dtype=ooc.float32), np.asarray([1.5, 2], np.float32))
        x = ooc.asarray(np.arange(12.0).reshape(3, 4))
        assert ooc.asarray(x) is x and ooc.asarray(x, copy=False) is x
        copied = ooc.asarray(x, copy=True)
        assert copied is not x and copied.path != x.path
        _same(ooc.asarray(x, dtype=ooc.float32), np.arange(12.0, dtype=np.float32).reshape(3, 4))
        with pytest.raises(ValueError, match="copy=False"):
            ooc.asarray(x, dtype=ooc.float32, copy=False)
        with pytest.raises(ValueError, match="copy=False"):
            ooc.asarray(np.ones(3), copy=False)
        with pytest.raises(TypeError, match="cannot make an array"):
            ooc.asarray(["a", "b"])
        _same(ooc.from_dlpack(np.arange(5)), np.arange(5))
        with jax.enable_x64(True):  # 0-d results are JAX arrays of the default dtypes
            zero_d = ooc.asarray(2.5)
            assert isinstance(zero_d, jax.Array) and zero_d.dtype == np.float64


def test_bad_shapes_and_devices_are_refused():
    with pytest.raises(ValueError, match="negative"):
        ooc.zeros((3, -1))
    with pytest.raises(TypeError, match="shape must be"):
        ooc.ones((2.5, 3))
    with pytest.raises(ValueError, match="device"):
        ooc.zeros(3, device="cuda")
    with pytest.raises(ValueError, match="step"):
        ooc.arange(0, 3, 0)
    with pytest.raises(ValueError, match="non-negative"):
        ooc.linspace(0, 1, -1)
    assert ooc.zeros(3, device=ooc.zeros(2).device).shape == (3,)


def test_large_creation_is_written_in_rows_within_the_budget():
    """An array 16 times the budget is written without ever being whole in memory."""
    budget = ooc.MemoryBudget("1 MiB")
    x = ooc.arange(0, 2**21, dtype=ooc.float64, budget=budget)  # 16 MiB
    assert x.shape == (2**21,)
    np.testing.assert_array_equal(
        x[2**20 : 2**20 + 3].to_numpy(), [2.0**20, 2.0**20 + 1, 2.0**20 + 2]
    )


@pytest.mark.parametrize("indexing", ["xy", "ij"])
@pytest.mark.parametrize("sides", [(5,), (4, 7), (3, 1, 6)], ids=str)
def test_meshgrid_follows_numpy(indexing, sides):
    inputs = [np.arange(n, dtype=np.float32) * (i + 1) for i, n in enumerate(sides)]
    with ooc.MemoryBudget(BUDGET):
        got = ooc.meshgrid(*[ooc.asarray(a) for a in inputs], indexing=indexing)
        want = np.meshgrid(*inputs, indexing=indexing)
        assert len(got) == len(want)
        for g, w in zip(got, want):
            _same(g, w)
    with pytest.raises(ValueError, match="indexing"):
        ooc.meshgrid(ooc.arange(3.0), indexing="yx")
    with pytest.raises(TypeError, match="one dtype"):
        ooc.meshgrid(ooc.arange(3.0), ooc.arange(3))


GRAD_CASES = [
    GradCase(
        "meshgrid", lambda xp, a, b: xp.meshgrid(a, b)[0] * xp.meshgrid(a, b)[1], ((37,), (29,))
    ),
    GradCase("tril", lambda xp, x: xp.tril(x, k=1), ((37, 29),)),
    GradCase("triu", lambda xp, x: xp.triu(x, k=-2), ((37, 29),)),
]
CASES = GRAD_CASES


@pytest.mark.parametrize("dtype, jit", MODES, ids=MODE_IDS)
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_creation_gradients_equal_jax(case, dtype, jit):
    check(case, dtype, jit)


@pytest.mark.parametrize("k", [2**63, -(2**63) - 1, 7, -5], ids=str)
def test_eye_with_a_diagonal_past_the_array_is_all_zeros(k):
    """(found by the array API suite: a k beyond 64 bits overflowed NumPy's indices)"""
    got = ooc.eye(3, 5, k=k)
    np.testing.assert_array_equal(np.asarray(got.to_numpy()), np.eye(3, 5, k=max(-3, min(k, 5))))
