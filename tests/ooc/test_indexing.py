"""Indexing (``x[key]``, `take`, `take_along_axis`) against NumPy, and its gradients."""

import contextlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from gradcases import MODE_IDS, MODES, GradCase, check

from gradpipe import ooc
from gradpipe.ooc.arrays._hijax import type_of
from gradpipe.ooc.ops import _indexing
from gradpipe.ooc.storage._paged_file import PagedFile

SHAPE = (13, 9, 5)


def disk(a):
    return ooc.DiskArray.from_numpy(np.asarray(a))


def value(y):
    return y.to_numpy(force=True) if type_of(y) is not None else np.asarray(y)


@pytest.fixture
def sparse_steps(monkeypatch):
    """Every step skips "much" of the file: stepped slices go through the gather."""
    monkeypatch.setattr(_indexing, "GAP_BYTES", 0)


# ---------------------------------------------------------------- x[key] against NumPy

KEYS = [
    0,
    -1,
    (3, -2, 4),
    slice(2, 9),
    slice(-4, None),
    slice(None, None, 3),
    slice(None, None, -1),
    slice(None, None, -3),
    slice(-2, 1, -3),
    (slice(1, None, 3), slice(None, None, -2), slice(-1, 0, -3)),
    (slice(7, 2), slice(None)),  # empty
    (slice(None), slice(None, None, -1), slice(5, 5)),  # empty last axis
    (Ellipsis, 1),
    (1, Ellipsis, slice(None, None, 2)),
    (None, 2, Ellipsis, None),
    (slice(None), None, slice(2, None, -1)),
    (),
    Ellipsis,
    True,
    False,
    (0, slice(None), True),
    (True, True),
    np.array([0, 3, 3, -1, 12]),
    [4, 4, -13],
    (slice(None), [1, -2, 1, 8]),
    (Ellipsis, np.array([], np.int64)),
    (slice(None, None, -3), [0, 3, 3]),
    (np.array([[0, 1], [2, 12]]), slice(None, None, -2), [0, 4]),  # broadcast, non-adjacent
    (2, slice(1, 7, 2), [0, 4, 4, -5]),  # an int and an array, separated by a slice
    ([1, 2], 3),
    (None, [0, 1], None, [1, 2]),
    (np.array([[3], [-1]]), np.array([0, 8, 2])),
    (np.int64(3), np.int32(-1), np.uint8(4)),
]


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
@pytest.mark.parametrize("key", KEYS, ids=repr)
def test_getitem_matches_numpy(key, jit):
    X = np.random.default_rng(0).standard_normal(SHAPE).astype(np.float32)
    with ooc.MemoryBudget(4096):
        x = disk(X)
        f = jax.jit(lambda x: x[key]) if jit else (lambda x: x[key])
        got = f(x)
        np.testing.assert_array_equal(value(got), X[key])
        assert value(got).shape == X[key].shape and got.dtype == X.dtype


@pytest.mark.parametrize("dtype", ["int32", "bool", "complex64", "float64", "uint8"])
def test_getitem_keeps_the_dtype(dtype):
    X = (np.random.default_rng(1).standard_normal(SHAPE) * 10).astype(dtype)
    keys = [(slice(None, None, -2), 1), ([0, 5, 5], slice(1, None, 3)), (1, 2, 3)]
    x64 = jax.enable_x64(True) if dtype == "float64" else contextlib.nullcontext()
    with x64, ooc.MemoryBudget(4096):
        x = disk(X)
        for key in keys:
            for f in (lambda x: x[key], jax.jit(lambda x: x[key])):
                got = f(x)
                assert got.dtype == X.dtype, key
                np.testing.assert_array_equal(value(got), X[key])


def test_one_element_is_a_0d_jax_array():
    X = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    with ooc.MemoryBudget(4096):
        x = disk(X)
        for f in (lambda x: x[1, -1, 2], jax.jit(lambda x: x[1, -1, 2])):
            got = f(x)
            assert isinstance(got, jax.Array) and got.shape == () and float(got) == X[1, -1, 2]


def test_traced_and_disk_indices(sparse_steps):  # sparse: basic keys take the gather too
    X = np.random.default_rng(2).standard_normal(SHAPE).astype(np.float32)
    idx = np.array([[4, -1, 0], [0, 0, 12]])
    with ooc.MemoryBudget(4096):
        x, i = disk(X), disk(idx)
        np.testing.assert_array_equal(value(x[i]), X[idx])
        np.testing.assert_array_equal(
            value(jax.jit(lambda x, i: x[:, 2, i[0]])(x, i)), X[:, 2, idx[0]]
        )
        # a 0-d JAX integer: concrete, traced (weakly typed), and giving a 0-d result
        np.testing.assert_array_equal(value(x[jnp.int32(-2), ::2]), X[-2, ::2])
        step = jax.jit(lambda x, k: x[k, ::-3, k])
        np.testing.assert_array_equal(value(step(x, 3)), X[3, ::-3, 3])
        row = jax.jit(lambda x, k: x[k, 2, -1])
        assert float(row(x, 7)) == X[7, 2, -1]


def test_sparse_steps_match_numpy(sparse_steps):
    X = np.random.default_rng(3).standard_normal(SHAPE).astype(np.float32)
    with ooc.MemoryBudget(4096):
        x = disk(X)
        for key in [
            slice(None, None, 3),
            (slice(-1, None, -4), slice(1, None, 2)),
            (None, 2, slice(None, None, -2)),
        ]:
            np.testing.assert_array_equal(value(x[key]), X[key])
            np.testing.assert_array_equal(value(jax.jit(lambda x: x[key])(x)), X[key])


# ---------------------------------------------------------------- what is read


def test_a_sparse_step_reads_only_the_rows_it_selects():
    X = np.random.default_rng(4).standard_normal((4000, 64)).astype(np.float32)
    with ooc.MemoryBudget("1MiB"):
        x = disk(X)
        ooc.reset_io_stats()
        y = x[3::500]
        assert ooc.io_stats().bytes_read == X[3::500].nbytes
        np.testing.assert_array_equal(y.to_numpy(), X[3::500])


def test_a_gather_reads_only_far_apart_rows():
    X = np.random.default_rng(5).standard_normal((4000, 64)).astype(np.float32)
    rows = np.array([3900, 7, 2000, 7, 1000, 3000])  # >= 64 KiB apart
    with ooc.MemoryBudget("1MiB"):
        x, i = disk(X), disk(rows)
        ooc.reset_io_stats()
        y = x[i]
        assert ooc.io_stats().bytes_read == 5 * 64 * 4 + rows.nbytes
        np.testing.assert_array_equal(y.to_numpy(), X[rows])


def test_a_gather_reads_a_big_index_in_budget_sized_pieces(monkeypatch):
    X = np.random.default_rng(6).standard_normal((50, 3)).astype(np.float32)
    big = np.random.default_rng(6).integers(-50, 50, 3000)  # 24 KB of indices
    reads = []
    read = PagedFile.read

    def spy(self, region=None, out=None):
        block = read(self, region, out)
        reads.append((self.dtype, block.nbytes))
        return block

    with ooc.MemoryBudget(4096):
        x, i = disk(X), disk(big)
        monkeypatch.setattr(PagedFile, "read", spy)
        y = ooc.take(x, i, axis=0)
        monkeypatch.undo()
        np.testing.assert_array_equal(y.to_numpy(force=True), X[big])
    assert max(n for dtype, n in reads if dtype == big.dtype) <= 4096


# ---------------------------------------------------------------- refusals


@pytest.mark.parametrize(
    "key, error, match",
    [
        (13, IndexError, "out of bounds for axis 0 with size 13"),
        ((0, -10), IndexError, "out of bounds for axis 1"),
        (np.array([0, 13]), IndexError, "index 13 is out of bounds"),
        ((0, 0, 0, 0), IndexError, "too many indices"),
        ((Ellipsis, 0, Ellipsis), IndexError, "single ellipsis"),
        (1.5, IndexError, "only integers"),
        ("a", IndexError, "only integers"),
        (np.array([0.0, 1.0]), IndexError, "integer type"),
        (slice(None, None, 0), ValueError, "step cannot be zero"),
        (([0, 1], [0, 1, 2]), IndexError, "could not be broadcast"),
    ],
    ids=repr,
)
def test_bad_indices_are_refused_as_numpy_refuses(key, error, match):
    with ooc.MemoryBudget(4096):
        x = disk(np.zeros(SHAPE, np.float32))
        with pytest.raises(error, match=match):
            x[key]
        with pytest.raises(error):
            np.zeros(SHAPE)[key]


def test_data_dependent_indices_are_refused_and_traced_ones_index():
    with ooc.MemoryBudget(4096):
        x = disk(np.zeros(SHAPE, np.float32))
        for mask in (x > 0, np.ones(13, bool), [True] * 13):
            with pytest.raises(IndexError, match="boolean-mask"):
                x[mask]
        with pytest.raises(IndexError, match="out of bounds"):
            x[disk(np.array([1, 40]))]
        values = np.arange(np.prod(SHAPE), dtype=np.float32).reshape(SHAPE)
        got = jax.jit(lambda x, i: x[i])(disk(values), jnp.array([4, 1]))  # held in memory
        np.testing.assert_array_equal(got.to_numpy(), values[[4, 1]])
        with pytest.raises(ValueError, match="axis is required"):
            ooc.take(x, [0])
        with pytest.raises(TypeError, match="integer dtype"):
            ooc.take(x, np.array([0.5]), axis=0)
        with pytest.raises(np.exceptions.AxisError):
            ooc.take(x, [0], axis=3)
        along = jax.jit(lambda x, i: ooc.take_along_axis(x, i, axis=0))
        got = along(disk(values), jnp.ones((2, 9, 5), int))
        np.testing.assert_array_equal(got.to_numpy(), np.broadcast_to(values[1], (2, 9, 5)))
        with pytest.raises(ValueError, match="as many dimensions"):
            ooc.take_along_axis(x, np.zeros((2, 2), int), axis=0)
        with pytest.raises(ValueError, match="do not broadcast"):
            ooc.take_along_axis(x, np.zeros((2, 3, 5), int), axis=0)


# ---------------------------------------------------------------- take, take_along_axis


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_take_matches_numpy(axis, jit):
    rng = np.random.default_rng(7)
    X = rng.standard_normal(SHAPE).astype(np.float32)
    n = SHAPE[axis]
    with ooc.MemoryBudget(4096):
        x = disk(X)
        for idx in ([n - 1, 0, 0, -n], rng.integers(-n, n, (3, 4)), np.array(2)):
            want = np.take(X, idx, axis=axis)
            for i in (idx, disk(idx) if np.ndim(idx) else idx):
                if jit and type_of(i) is not None:
                    got = jax.jit(lambda x, i: ooc.take(x, i, axis=axis))(x, i)
                elif jit:  # in-memory indices are closed over (a traced one is refused)
                    got = jax.jit(lambda x: ooc.take(x, i, axis=axis))(x)
                else:
                    got = ooc.take(x, i, axis=axis)
                np.testing.assert_array_equal(value(got), want)
        vec = disk(X[:, 0, 0])
        np.testing.assert_array_equal(value(ooc.take(vec, [3, -1])), X[[3, -1], 0, 0])


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
@pytest.mark.parametrize(
    "x_shape, i_shape, axis",
    [
        (SHAPE, (13, 9, 7), -1),
        (SHAPE, (4, 9, 5), 0),
        (SHAPE, (1, 6, 1), 1),  # indices broadcast along x's other axes
        ((13, 1, 5), (13, 4, 2), 2),  # x broadcasts along axis 1
        (SHAPE, (13, 0, 5), 1),  # empty
    ],
)
def test_take_along_axis_matches_numpy(x_shape, i_shape, axis, jit):
    rng = np.random.default_rng(8)
    X = rng.standard_normal(x_shape).astype(np.float32)
    idx = rng.integers(-x_shape[axis], x_shape[axis], i_shape)
    want = np.take_along_axis(X, idx, axis=axis)
    with ooc.MemoryBudget(4096):
        x = disk(X)
        for i in (idx, disk(idx)):
            if jit and type_of(i) is not None:
                got = jax.jit(lambda x, i: ooc.take_along_axis(x, i, axis=axis))(x, i)
            elif jit:
                got = jax.jit(lambda x: ooc.take_along_axis(x, i, axis=axis))(x)
            else:
                got = ooc.take_along_axis(x, i, axis=axis)
            np.testing.assert_array_equal(value(got), want)


def test_in_memory_arrays_use_jax_numpy():
    X = np.arange(12.0).reshape(3, 4)
    idx = np.array([[2, 0, 0, 1]])
    np.testing.assert_array_equal(ooc.take(jnp.asarray(X), [2, 0], axis=1), X[:, [2, 0]])
    np.testing.assert_array_equal(
        ooc.take_along_axis(jnp.asarray(X), idx, axis=0), np.take_along_axis(X, idx, axis=0)
    )
    np.testing.assert_array_equal(
        ooc.getitem(jnp.asarray(X), (slice(None, None, -1), 1)), X[::-1, 1]
    )


# ---------------------------------------------------------------- gradients


ROWS = np.array([0, 3, 3, -1, 5, 3])  # repeats add up
CASES = [
    GradCase("getitem", lambda xp, x: x[1::3, ::-2], ((13, 9),)),
    GradCase("getitem", lambda xp, x: x[-2:0:-3, 4, None], ((13, 9),)),
    GradCase("getitem", lambda xp, x: x[..., ::-1, 2:], ((3, 7, 6),)),
    GradCase("getitem", lambda xp, x: x[2, -1], ((13, 9),)),  # a 0-d result
    GradCase("getitem", lambda xp, x: x[ROWS], ((13, 9),)),
    GradCase("getitem", lambda xp, x: x[::-2, ROWS[:4]], ((7, 9),)),
    GradCase(
        "getitem", lambda xp, x: x[np.array([[0], [6]]), 1:, np.array([2, 2, -1])], ((7, 5, 4),)
    ),
    GradCase("take", lambda xp, x: xp.take(x, ROWS, axis=1), ((5, 7),)),
    GradCase("take", lambda xp, x: xp.take(x, np.array([[4, 4], [0, -5]]), axis=0), ((9, 6),)),
    GradCase(
        "take_along_axis",
        lambda xp, x: xp.take_along_axis(x, np.array([[1, 1, 0, -1]] * 6), axis=1),
        ((6, 5),),
    ),
    GradCase(
        "take_along_axis",
        lambda xp, x: xp.take_along_axis(x, np.array([[[2], [0], [2]]]), axis=0),
        ((3, 3, 4),),
    ),
    GradCase("transpose", lambda xp, x: x.T * 2.0, ((37, 29),)),
    GradCase(
        "slice_rows",
        lambda xp, x: x[3:30] if xp is not ooc else ooc.slice_rows(x, 3, 30),
        ((37, 29),),
    ),
    GradCase(
        "slice_tile",
        lambda xp, x: x[3:30, 2:9] if xp is not ooc else ooc.slice_tile(x, (3, 30), (2, 9)),
        ((37, 29),),
    ),
]


@pytest.mark.parametrize("dtype, jit", MODES, ids=MODE_IDS)
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_gradients(case, dtype, jit):
    check(case, dtype, jit)


@pytest.mark.parametrize("case", CASES[:3], ids=lambda c: c.id)
def test_sparse_step_gradients(case, sparse_steps):
    check(case, "float32", True)
