"""The manipulation functions of the array API standard (reshape, concat, stack, flip,
roll, repeat, tile, ...) against NumPy, out of core: values and dtypes over shapes
with size-0 and size-1 sides, negative axes, eagerly and under jit, under a budget
that cuts every array into tiles; their gradients equal jax.grad's; bad arguments
are refused as NumPy refuses them; and no read holds more than the budget."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from gradcases import MODE_IDS, MODES, GradCase, check

from gradpipe import ooc
from gradpipe.ooc.storage._paged_file import PagedFile

BUDGET = 4096


def disk(a):
    return ooc.DiskArray.from_numpy(np.asarray(a))


def values(y):
    return y.to_numpy(force=True) if hasattr(y, "to_numpy") else np.asarray(y)


def draw(shape, dtype, seed=0):
    rng = np.random.default_rng(seed)
    dtype = np.dtype(dtype)
    if dtype.kind == "b":
        return rng.random(shape) < 0.5
    if dtype.kind in "iu":
        return rng.integers(0, 100, shape).astype(dtype)
    x = rng.standard_normal(shape) * 10
    if dtype.kind == "c":
        x = x + 1j * rng.standard_normal(shape)
    return x.astype(dtype)


# ---------------------------------------------------------------- forward against NumPy

# (id, fn(xp, *arrays), shapes): each function written once, run with numpy and ooc
FORWARD = [
    ("reshape", lambda xp, x: xp.reshape(x, (6, -1)), [(48, 70)]),
    ("reshape-merge", lambda xp, x: xp.reshape(x, (-1,)), [(19, 7, 23)]),
    ("reshape-split", lambda xp, x: xp.reshape(x, (3, 21, 4, 5)), [(1260,)]),
    ("reshape-unit", lambda xp, x: xp.reshape(x, (13, 1, 17)), [(1, 13, 17)]),
    ("reshape-empty", lambda xp, x: xp.reshape(x, (0, 4)), [(2, 0, 2)]),
    ("reshape-0d", lambda xp, x: xp.reshape(x, ()), [(1, 1)]),
    ("reshape-copy", lambda xp, x: xp.reshape(x, (40, 30), copy=True), [(40, 30)]),
    ("expand_dims", lambda xp, x: xp.expand_dims(x, -1), [(30, 40)]),
    ("expand_dims-front", lambda xp, x: xp.expand_dims(x, -3), [(30, 40)]),
    ("squeeze", lambda xp, x: xp.squeeze(x, (0, -1)), [(1, 30, 40, 1)]),
    ("squeeze-0d", lambda xp, x: xp.squeeze(x, (0, 1)), [(1, 1)]),
    ("concat", lambda xp, a, b: xp.concat([a, b]), [(17, 30), (40, 30)]),
    ("concat-neg", lambda xp, a, b, c: xp.concat([a, b, c], axis=-1), [(20, 9), (20, 0), (20, 31)]),
    ("concat-none", lambda xp, a, b: xp.concat((a, b), axis=None), [(40, 30), (7, 30, 2)]),
    ("concat-none-1d", lambda xp, a, b: xp.concat((a, b), axis=None), [(300,), (77,)]),
    ("concat-empty", lambda xp, a, b: xp.concat([a, b], axis=1), [(0, 3), (0, 5)]),
    ("stack", lambda xp, a, b, c: xp.stack([a, b, c], axis=1), [(31, 29)] * 3),
    ("stack-last", lambda xp, a, b: xp.stack((a, b), axis=-1), [(20, 30)] * 2),
    ("stack-0d", lambda xp, a, b: xp.stack([a, b]), [(), ()]),
    ("stack-empty", lambda xp, a, b: xp.stack([a, b]), [(3, 0)] * 2),
    ("flip", lambda xp, x: xp.flip(x), [(37, 41)]),
    ("flip-axis", lambda xp, x: xp.flip(x, axis=-2), [(9, 37, 5)]),
    ("flip-axes", lambda xp, x: xp.flip(x, axis=(0, 2)), [(9, 1, 37)]),
    ("flip-0d", lambda xp, x: xp.flip(x), [()]),
    ("permute_dims", lambda xp, x: xp.permute_dims(x, (2, 0, 1)), [(9, 17, 13)]),
    ("moveaxis", lambda xp, x: xp.moveaxis(x, 0, -1), [(9, 17, 13)]),
    ("moveaxis-tuple", lambda xp, x: xp.moveaxis(x, (0, -1), (-1, 1)), [(9, 17, 13)]),
    ("broadcast_to", lambda xp, x: xp.broadcast_to(x, (5, 30, 40)), [(30, 1)]),
    ("broadcast_to-0d", lambda xp, x: xp.broadcast_to(x, (3, 4)), [()]),
    ("broadcast_to-empty", lambda xp, x: xp.broadcast_to(x, (0, 4)), [(1, 4)]),
    ("broadcast_arrays", lambda xp, a, b: xp.broadcast_arrays(a, b)[1], [(30, 1), (1, 40)]),
    ("roll", lambda xp, x: xp.roll(x, 7), [(30, 41)]),
    ("roll-neg", lambda xp, x: xp.roll(x, -1000), [(30, 41)]),
    ("roll-axis", lambda xp, x: xp.roll(x, 11, axis=-1), [(30, 41)]),
    ("roll-axes", lambda xp, x: xp.roll(x, (3, -5), axis=(0, 1)), [(30, 41)]),
    ("roll-same-axis", lambda xp, x: xp.roll(x, (3, 4), axis=(1, 1)), [(30, 41)]),
    ("roll-empty", lambda xp, x: xp.roll(x, 2, axis=0), [(0, 5)]),
    ("roll-0d", lambda xp, x: xp.roll(x, 3), [()]),
    ("repeat", lambda xp, x: xp.repeat(x, 3, axis=0), [(30, 41)]),
    ("repeat-none", lambda xp, x: xp.repeat(x, 2), [(30, 21)]),
    ("repeat-zero", lambda xp, x: xp.repeat(x, 0, axis=-1), [(30, 21)]),
    ("repeat-0d", lambda xp, x: xp.repeat(x, 4), [()]),
    ("tile", lambda xp, x: xp.tile(x, (3, 2)), [(30, 41)]),
    ("tile-more-reps", lambda xp, x: xp.tile(x, (2, 1, 3)), [(17, 11)]),
    ("tile-fewer-reps", lambda xp, x: xp.tile(x, (2,)), [(5, 17, 11)]),
    ("tile-0d", lambda xp, x: xp.tile(x, (3, 2)), [()]),
]

FORWARD_DTYPES = ["float32", "float64", "int8", "uint16", "bool", "complex64"]


def _run(fn, shapes, dtype, jit):
    arrays = [draw(s, dtype, seed=i) for i, s in enumerate(shapes)]
    want = fn(np, *arrays)
    with jax.enable_x64(True), ooc.MemoryBudget(BUDGET):
        f = jax.jit(lambda *xs: fn(ooc, *xs)) if jit else (lambda *xs: fn(ooc, *xs))
        got = f(*[disk(a) for a in arrays])
    return values(got), np.asarray(want)


@pytest.mark.parametrize("dtype", FORWARD_DTYPES)
@pytest.mark.parametrize("name,fn,shapes", FORWARD, ids=[c[0] for c in FORWARD])
def test_forward_matches_numpy(name, fn, shapes, dtype):
    got, want = _run(fn, shapes, dtype, jit=False)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("name,fn,shapes", FORWARD, ids=[c[0] for c in FORWARD])
def test_forward_under_jit(name, fn, shapes):
    got, want = _run(fn, shapes, "float32", jit=True)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize(
    "dtypes", [("int8", "float32"), ("int32", "float32"), ("uint8", "int8"), ("bool", "int16")]
)
@pytest.mark.parametrize("fn", ["concat", "concat-none", "stack"])
def test_joining_promotes_as_numpy(fn, dtypes):
    a, b = draw((30, 7), dtypes[0]), draw((30, 7), dtypes[1], seed=1)
    want = {
        "concat": lambda xp: xp.concat([a, b], axis=1),
        "concat-none": lambda xp: xp.concat([a, b], axis=None),
        "stack": lambda xp: xp.stack([a, b]),
    }[fn](np)
    with ooc.MemoryBudget(BUDGET):
        a, b = disk(a), disk(b)
        got = {
            "concat": ooc.concat([a, b], axis=1),
            "concat-none": ooc.concat([a, b], axis=None),
            "stack": ooc.stack([a, b]),
        }[fn]
    got = values(got)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("jit", [False, True])
def test_repeat_by_counts(jit):
    x = draw((13, 40), "float32")
    counts = np.array([0, 3, 1, 0, 0, 0, 2, 5, 0, 1, 1, 0, 4])
    with ooc.MemoryBudget(BUDGET):
        X = disk(x)
        for repeats in (counts, jnp.asarray(counts), disk(counts), np.array([2])):
            f = lambda x: ooc.repeat(x, repeats, axis=0)
            got = (jax.jit(f) if jit else f)(X)
            np.testing.assert_array_equal(values(got), np.repeat(x, repeats, axis=0))
        flat = ooc.repeat(disk(x[:3]), disk(np.arange(120) % 3))
        np.testing.assert_array_equal(values(flat), np.repeat(x[:3], np.arange(120) % 3))


def test_unstack_gives_each_slice():
    x = draw((7, 30, 5), "float64")
    with ooc.MemoryBudget(BUDGET):
        for axis in (0, 1, -1):
            parts = ooc.unstack(disk(x), axis=axis)
            assert isinstance(parts, tuple) and len(parts) == x.shape[axis]
            for got, want in zip(parts, np.unstack(x, axis=axis)):
                np.testing.assert_array_equal(values(got), want)
        with jax.enable_x64(True):
            (a, b) = ooc.unstack(disk(np.array([1.5, 2.5])))
        assert isinstance(a, jax.Array) and float(b) == 2.5


def test_in_memory_arguments_run_on_jax_numpy():
    with jax.enable_x64(True):
        a, b = jnp.asarray(1, jnp.int32), jnp.asarray(2.5, jnp.float32)
        out = ooc.stack([a, b])
        assert isinstance(out, jax.Array) and out.dtype == np.float64  # NumPy's promotion
        np.testing.assert_array_equal(out, [1.0, 2.5])
        assert ooc.reshape(b, (1, 1)).shape == (1, 1)
        assert ooc.tile(b, (2, 3)).shape == (2, 3)
        assert ooc.concat([a, a], axis=None).shape == (2,)
        # a 0-d JAX value among DiskArrays is joined out of core
        mixed = ooc.concat([disk(np.array([1.0, 2.0])), jnp.asarray(3.0)], axis=None)
        np.testing.assert_array_equal(values(mixed), [1.0, 2.0, 3.0])


def test_identity_shapes_return_the_input_and_other_shapes_a_new_file():
    x = disk(draw((6, 4), "float32"))
    assert ooc.reshape(x, (6, 4)) is x and ooc.reshape(x, (-1, 4), copy=False) is x
    assert ooc.broadcast_to(x, (6, 4)) is x
    a, b = ooc.broadcast_arrays(x, disk(np.ones(4, np.float32)))
    assert a is x and b.shape == (6, 4)
    copy = ooc.reshape(x, (6, 4), copy=True)
    assert copy is not x and copy.path != x.path
    for y in (ooc.reshape(x, (24,)), ooc.expand_dims(x, 0), ooc.flip(x), ooc.roll(x, 0)):
        assert y.path != x.path
    ooc.update_(copy, 0.0)  # a copy's file is its own
    np.testing.assert_array_equal(values(x), values(ooc.reshape(x, (6, 4))))
    assert not values(copy).any()


def test_no_read_holds_more_than_the_budget(monkeypatch):
    biggest = [0]
    read = PagedFile.read

    def watched(self, region=None, out=None):
        block = read(self, region, out)
        biggest[0] = max(biggest[0], block.nbytes)
        return block

    x = draw((32, 25, 20), "float64")  # 128 KB, 32 budgets
    X = disk(x)
    monkeypatch.setattr(PagedFile, "read", watched)
    with ooc.MemoryBudget(BUDGET):
        cases = [
            (ooc.reshape(X, (20, 32, 25)), x.reshape(20, 32, 25)),
            (ooc.reshape(X, (-1,)), x.reshape(-1)),
            (ooc.roll(X, 12345), np.roll(x, 12345)),
            (ooc.roll(X, (5, 7), axis=(0, 2)), np.roll(x, (5, 7), axis=(0, 2))),
            (ooc.concat([X, X], axis=None), np.concat([x, x], axis=None)),
            (ooc.tile(X, (1, 2, 3)), np.tile(x, (1, 2, 3))),
        ]
    monkeypatch.undo()
    for got, want in cases:
        np.testing.assert_array_equal(values(got), want)
    assert 0 < biggest[0] <= BUDGET


# ---------------------------------------------------------------- bad arguments


def test_bad_arguments_are_refused_as_numpy_does():
    x = disk(draw((2, 3), "float32"))
    with pytest.raises(ValueError, match="size 6 into shape"):
        ooc.reshape(x, (4, -1))
    with pytest.raises(ValueError, match="one -1"):
        ooc.reshape(x, (-1, -1))
    with pytest.raises(ValueError, match="copy=False"):
        ooc.reshape(x, (3, 2), copy=False)
    with pytest.raises(IndexError, match="out of range"):
        ooc.expand_dims(x, 3)
    with pytest.raises(ValueError, match="size 3"):
        ooc.squeeze(x, 1)
    with pytest.raises(IndexError):
        ooc.flip(x, axis=2)
    with pytest.raises(ValueError, match="repeated axis"):
        ooc.flip(x, axis=(0, -2))
    with pytest.raises(ValueError, match="differ along"):
        ooc.concat([x, disk(np.ones((3, 3), np.float32))], axis=1)
    with pytest.raises(ValueError, match="at least 1"):
        ooc.concat([x, disk(np.ones(3, np.float32))])
    with pytest.raises(ValueError, match="one shape"):
        ooc.stack([x, disk(np.ones((3, 2), np.float32))])
    with pytest.raises(ValueError, match="permutation"):
        ooc.permute_dims(x, (0, 0))
    with pytest.raises(ValueError, match="as many axes"):
        ooc.moveaxis(x, (0, 1), 0)
    with pytest.raises(ValueError, match="cannot be broadcast"):
        ooc.broadcast_to(x, (3, 3))
    with pytest.raises(ValueError, match="do not broadcast"):
        ooc.broadcast_arrays(x, disk(np.ones(4, np.float32)))
    with pytest.raises(ValueError, match="same length"):
        ooc.roll(x, (1, 2))
    with pytest.raises(ValueError, match="negative"):
        ooc.repeat(x, -1)
    with pytest.raises(ValueError, match="shape"):
        ooc.repeat(x, np.array([1, 2]), axis=1)
    with pytest.raises(TypeError, match="integer dtype"):
        ooc.repeat(x, np.array([1.0, 2.0]), axis=0)
    with pytest.raises(TypeError, match="traced"):
        jax.jit(lambda r: ooc.repeat(x, r, axis=0))(jnp.array([1, 2]))
    with pytest.raises(ValueError, match="negative"):
        ooc.tile(x, (-1,))


# ---------------------------------------------------------------- gradients

CASES = [
    GradCase("reshape", lambda xp, x: xp.reshape(x, (10, -1)), ((6, 5, 4),)),
    GradCase("reshape", lambda xp, x: xp.reshape(x, (9, 1, 7)), ((9, 7),)),
    GradCase("expand_dims", lambda xp, x: xp.expand_dims(x, -2), ((9, 7),)),
    GradCase("squeeze", lambda xp, x: xp.squeeze(x, 1), ((9, 1, 7),)),
    GradCase("concat", lambda xp, a, b: xp.concat([a, b]), ((3, 7), (6, 7))),
    GradCase("concat", lambda xp, a, b: xp.concat([a, b], axis=-1), ((5, 2), (5, 9))),
    GradCase("concat", lambda xp, a, b: xp.concat([a, b], axis=None), ((4, 5), (7,))),
    GradCase("stack", lambda xp, a, b: xp.stack([a, b], axis=1), ((6, 7), (6, 7))),
    GradCase("unstack", lambda xp, x: xp.unstack(x, axis=1)[2], ((6, 4, 3),)),
    GradCase("flip", lambda xp, x: xp.flip(x, axis=-1), ((3, 9, 7),)),
    GradCase("permute_dims", lambda xp, x: xp.permute_dims(x, (1, 2, 0)), ((3, 5, 4),)),
    GradCase("moveaxis", lambda xp, x: xp.moveaxis(x, -1, 0), ((3, 5, 4),)),
    GradCase("broadcast_to", lambda xp, x: xp.broadcast_to(x, (4, 6, 7)), ((6, 1),)),
    GradCase("broadcast_to", lambda xp, x: xp.broadcast_to(x, (5, 7)), ((),)),
    GradCase(
        "broadcast_arrays",
        lambda xp, a, b: xp.multiply(*xp.broadcast_arrays(a, b)),
        ((6, 1), (1, 7)),
    ),
    GradCase("roll", lambda xp, x: xp.roll(x, 5), ((6, 7),)),
    GradCase("roll", lambda xp, x: xp.roll(x, (2, -3), axis=(0, 1)), ((6, 7),)),
    GradCase("repeat", lambda xp, x: xp.repeat(x, 3, axis=0), ((6, 7),)),
    GradCase("repeat", lambda xp, x: xp.repeat(x, 2), ((6, 7),)),
    GradCase("repeat", lambda xp, x: xp.repeat(x, np.array([2, 0, 1, 3]), axis=1), ((5, 4),)),
    GradCase("tile", lambda xp, x: xp.tile(x, (2, 3)), ((6, 7),)),
    GradCase("tile", lambda xp, x: xp.tile(x, (2, 1, 2)), ((7,),)),
]


@pytest.mark.parametrize("dtype, jit", MODES, ids=MODE_IDS)
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_gradients_equal_jax(case, dtype, jit):
    check(case, dtype, jit)
