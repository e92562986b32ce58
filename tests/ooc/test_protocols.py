"""Python protocols on DiskArrays: NumPy's answer or a clear refusal, never a silent one.

`X == Y` is elementwise, as the array API asks (it once gave one Python bool); `bool(X)` was always
True, `v in X` compared rows by identity, iterating a 0-d array gave nothing,
duplicate reduction axes were merged, and object, string and bfloat16 arrays were
written to disk as bytes that read back as garbage.
"""

import copy

import jax
import ml_dtypes
import numpy as np
import pytest

from gradpipe import ooc

A = np.arange(12, dtype=np.float32).reshape(3, 4)


def _disk():
    return ooc.DiskArray.from_numpy(A)


@pytest.mark.parametrize("other", [1.0, 0, A, "B", "traced"])
@pytest.mark.parametrize("symbol", ["==", "!="])
def test_equality_is_elementwise_as_the_array_api_asks(other, symbol):
    """`==`/`!=` compare elementwise and give a bool DiskArray (never one Python bool)."""
    a = _disk()
    cmp = (lambda x, y: x == y) if symbol == "==" else (lambda x, y: x != y)
    if isinstance(other, str) and other == "traced":
        got = jax.jit(lambda x: cmp(x, 1.0))(a)
        np.testing.assert_array_equal(got.to_numpy(), cmp(A, 1.0))
        return
    value = A if isinstance(other, str) else other
    other = ooc.DiskArray.from_numpy(A) if isinstance(other, str) else other
    for got, want in ((cmp(a, other), cmp(A, value)), (cmp(other, a), cmp(value, A))):
        assert isinstance(got, ooc.DiskArray) and got.dtype == np.bool_
        np.testing.assert_array_equal(got.to_numpy(), want)


def test_containers_find_arrays_by_identity():
    """Python's containers check identity before `==`, so a DiskArray is found as
    itself; hashing is by identity, as for NumPy's unhashable arrays it cannot be."""
    a = _disk()
    b = copy.copy(a)
    assert {a: 1, b: 2}[a] == 1 and len({a, b, a}) == 2
    assert a in [a] and [a].index(a) == 0
    with pytest.raises(ValueError, match="ambiguous"):
        [b].index(a)  # not the same object: `==` is elementwise, its truth ambiguous
    np.testing.assert_array_equal((a == b).to_numpy(), np.ones(A.shape, bool))


def test_truth_value_and_scalar_conversions_follow_numpy():
    a = _disk()
    with pytest.raises(ValueError, match="ambiguous"):
        bool(a)
    with pytest.raises(ValueError, match="ambiguous"):
        if ooc.greater(a, 100.0):
            pass
    zero = ooc.DiskArray.from_numpy(np.array(0.0, np.float32))
    one = ooc.DiskArray.from_numpy(np.array([[2.5]], np.float32))
    assert bool(zero) is False and bool(one) is True
    with pytest.raises(ValueError, match="ambiguous"):
        bool(ooc.DiskArray.zeros((0, 3)))  # NumPy 2 refuses an empty array too
    assert float(one) == 2.5 and int(one) == 2 and complex(one) == 2.5
    for convert in (float, int, complex):
        with pytest.raises(TypeError, match="size-1"):
            convert(a)
    with pytest.raises((TypeError, ValueError), match=r"ambiguous|traced"):
        jax.jit(lambda x: bool(x))(a)


def test_len_iteration_and_membership():
    a = _disk()
    assert len(a) == 3
    rows = list(a)
    assert len(rows) == 3 and all(isinstance(r, ooc.DiskArray) for r in rows)
    np.testing.assert_array_equal(np.stack([r.to_numpy() for r in rows]), A)
    zero = ooc.DiskArray.from_numpy(np.array(1.0, np.float32))
    with pytest.raises(TypeError, match="0-d"):
        len(zero)
    with pytest.raises(TypeError, match="0-d"):
        list(zero)  # NumPy refuses; an IndexError would have ended it as empty
    with pytest.raises(TypeError, match=r"ooc\.any"):
        3.0 in a


def test_reduction_axes_are_checked_as_numpy_checks_them():
    a = _disk()
    for axis in ((0, 0), (1, -1), [0, -2]):
        with pytest.raises(ValueError, match="duplicate"):
            ooc.sum(a, axis=axis, keepdims=True)
        with pytest.raises(ValueError, match="duplicate"):
            np.sum(A, axis=tuple(axis))
    with pytest.raises(ValueError, match="duplicate"):
        ooc.max(a, axis=(0, 0))
    for axis in (True, 1.0, "0"):
        with pytest.raises(TypeError, match="axis must be"):
            ooc.mean(a, axis=axis)
    got = ooc.sum(a, axis=np.int64(-1), keepdims=True)
    np.testing.assert_array_equal(got.to_numpy(), A.sum(-1, keepdims=True))


@pytest.mark.parametrize(
    "data",
    [
        np.array([1, "a"], dtype=object),
        np.array(["ab", "c"]),
        np.zeros(3, dtype=[("a", "f4")]),
        np.ones(3, ml_dtypes.bfloat16),
    ],
    ids=["object", "str", "structured", "bfloat16"],
)
def test_only_numbers_and_bools_are_stored(data):
    a = _disk()
    with pytest.raises(TypeError, match="bool, integer, floating and complex"):
        ooc.DiskArray.from_numpy(data)
    with pytest.raises(TypeError, match="bool, integer, floating and complex"):
        ooc.DiskArray.zeros((2, 2), data.dtype)
    with pytest.raises(TypeError, match="bool, integer, floating and complex"):
        a.astype(data.dtype)
    with pytest.raises(TypeError, match="bool, integer, floating and complex"):
        jax.jit(lambda x: x.astype(data.dtype))(a)


def test_negative_dimensions_are_refused():
    with pytest.raises(ValueError, match="negative dimensions"):
        ooc.DiskArray.zeros((-1, 2))
    with pytest.raises(ValueError, match="negative dimensions"):
        ooc.DiskArray.full((2, -3), 1.0)


def test_augmented_assignment_makes_a_new_array_as_for_jax_arrays():
    a = _disk()
    alias = a
    alias += 1.0  # a new array, like a JAX array's `+=`; `update_` writes in place
    assert alias is not a
    np.testing.assert_array_equal(a.to_numpy(), A)
    np.testing.assert_array_equal(alias.to_numpy(), A + 1)


def test_numpy_reductions_reach_the_out_of_core_ones():
    """np.sum(x) calls x.sum(axis=None, dtype=None, out=None): that was a TypeError."""
    a = _disk()
    assert float(np.sum(a)) == A.sum() and float(np.mean(a)) == A.mean()
    assert float(np.max(a)) == A.max()
    np.testing.assert_array_equal(np.sum(a, axis=0).to_numpy(), A.sum(0))
    got = np.max(a, axis=1, keepdims=True)
    assert isinstance(got, ooc.DiskArray) and got.shape == (3, 1)
    half = np.sum(a, axis=1, dtype=np.float16, keepdims=True)
    assert half.dtype == np.sum(A, axis=1, dtype=np.float16, keepdims=True).dtype
    with pytest.raises(TypeError, match="does not take out"):
        np.sum(a, out=np.zeros(()))
    with pytest.raises(TypeError, match="does not take where"):
        np.mean(a, where=A > 1)
    assert jax.jit(lambda x: x.sum(0, keepdims=True))(a).shape == (1, 4)


def test_deepcopy_is_an_independent_copy(tmp_path):
    """A deepcopy shared the file descriptor: once the original was collected, the
    copy read whatever file reused that descriptor, silently."""
    import gc

    a = _disk()
    c = copy.deepcopy(a)
    assert c.path != a.path
    del a
    gc.collect()
    other = ooc.DiskArray.from_numpy(A * 10)  # may reuse the descriptor
    np.testing.assert_array_equal(c.to_numpy(), A)
    np.testing.assert_array_equal((c + 0.0).to_numpy(), A)
    named = ooc.DiskArray.from_numpy(A, path=tmp_path / "w.gpa")
    twin = copy.deepcopy(named)
    twin = ooc.update_(twin, 0.0)  # writing the copy leaves the original alone
    np.testing.assert_array_equal(named.to_numpy(), A)
    assert not twin.to_numpy().any() and other.shape == A.shape


def test_pickle_reopens_named_files_and_refuses_scratch_ones(tmp_path):
    import pickle

    with pytest.raises(TypeError, match=r"Save it first \(x\.save\(path\)\)"):
        pickle.dumps(_disk())
    named = _disk().save(tmp_path / "x.gpa")
    back = pickle.loads(pickle.dumps(named))
    assert back.path == named.path
    np.testing.assert_array_equal(back.to_numpy(), A)


def test_big_endian_data_is_stored_in_native_order():
    """`>f4` data was kept as `>f4`: a DiskArray type of its own, whose gradient came
    back as native float32 (not its primal's dtype, `>f4`)."""
    big = A.astype(">f4")
    x = ooc.DiskArray.from_numpy(big)
    assert x.dtype == np.float32 and x.dtype.isnative
    np.testing.assert_array_equal(x.to_numpy(), A)
    g = jax.grad(lambda x: ooc.sum(x * x))(x)
    assert g.dtype == x.dtype
    np.testing.assert_array_equal(g.to_numpy(), 2 * A)
    assert ooc.DiskArray.zeros((2,), ">i4").dtype == np.int32
    assert x.astype(">f8").dtype == np.float64 and x.astype(">f8").dtype.isnative
