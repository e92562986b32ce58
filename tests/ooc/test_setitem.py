"""``x[key] = value`` writes in place as NumPy's does, in slabs within the budget;
named files are rewritten atomically; under tracing it is refused."""

import jax
import numpy as np
import pytest

from gradpipe import ooc

KEYS = [
    (slice(None),),
    (3,),
    (slice(2, 30, 3), slice(None, None, -2)),
    (Ellipsis, 4),
    (slice(None, None, -1), 0),
    (slice(35, 1, -4), slice(1, 9, 2)),
    (-1, -1),
    (slice(5, 5),),
    (slice(None, None, -7), slice(10, None, -3)),
]


@pytest.mark.parametrize("key", KEYS, ids=str)
@pytest.mark.parametrize("how", ["scalar", "same shape", "broadcast row"])
@pytest.mark.parametrize("budget", [4096, 2**20])
def test_setitem_writes_what_numpy_writes(key, how, budget):
    rng = np.random.default_rng(len(str(key)))
    X = rng.standard_normal((37, 11)).astype(np.float32)
    sel = X[key]
    if how == "scalar" or not np.ndim(sel):
        value = 2.5
    elif how == "same shape":
        value = rng.standard_normal(np.shape(sel))
    else:
        value = rng.standard_normal(np.shape(sel)[-1:])
    want = X.copy()
    want[key] = value
    x = ooc.asarray(X)
    with ooc.MemoryBudget(budget):
        x[key] = ooc.asarray(value) if np.ndim(value) else value
    np.testing.assert_array_equal(x.to_numpy(force=True), want)


def test_a_named_file_is_rewritten_and_a_view_sees_it(tmp_path):
    X = np.arange(60.0).reshape(20, 3)
    ooc.asarray(X).save(tmp_path / "a.gpa")
    x = ooc.DiskArray.open(tmp_path / "a.gpa", writable=True)
    x[2:5] = np.float64(-1.0)
    X[2:5] = -1
    np.testing.assert_array_equal(ooc.DiskArray.open(tmp_path / "a.gpa").to_numpy(), X)
    assert not list(tmp_path.glob("*partial*"))


@pytest.mark.parametrize("source", ["zarr", "fused", "scratch"])
def test_a_named_file_takes_values_from_any_disk_array(tmp_path, source):
    """The value of ``x[key] = value`` on a named file may be a DiskArray of any
    kind: a zarr array read in place, a fused result, a scratch file."""
    import zarr

    V = np.arange(12, dtype=np.float32).reshape(4, 3)
    if source == "zarr":
        zarr.open_array(tmp_path / "v.zarr", mode="w", shape=V.shape, chunks=(2, 3), dtype=V.dtype)[
            :
        ] = V
        value = ooc.open_zarr(tmp_path / "v.zarr")
    elif source == "fused":
        value = ooc.asarray(V - 1) + 1
    else:
        value = ooc.asarray(V)
    ooc.asarray(np.zeros((8, 3), np.float32)).save(tmp_path / "x.gpa")
    x = ooc.DiskArray.open(tmp_path / "x.gpa", writable=True)
    x[2:6] = value
    want = np.zeros((8, 3), np.float32)
    want[2:6] = V
    np.testing.assert_array_equal(ooc.DiskArray.open(tmp_path / "x.gpa").to_numpy(), want)


def test_bad_writes_are_refused_and_change_nothing(tmp_path):
    X = np.ones((3, 2))
    x = ooc.asarray(X)
    with pytest.raises(TypeError, match="same_kind"):
        x[0] = 1j
    with pytest.raises(ValueError, match="does not broadcast"):
        x[0] = np.ones(3)
    with pytest.raises(IndexError, match="basic index"):
        x[x[0] > 0] = 1.0  # a mask of part of the shape selects a data-dependent count
    with pytest.raises(IndexError, match="out of bounds"):
        x[3] = 1.0
    np.testing.assert_array_equal(x.to_numpy(), X)
    with pytest.raises(TypeError, match="read-only"):
        ooc.DiskArray.open(x.save(tmp_path / "r.gpa").path)[0] = 2.0


def test_setitem_under_jit_is_refused_with_the_functional_alternative():
    x = ooc.asarray(np.ones((3, 2)))

    def f(a):
        a[0] = 2.0
        return a

    with pytest.raises(TypeError, match=r"ooc\.where"):
        jax.jit(f)(x)


@pytest.mark.parametrize("mask_kind", ["disk", "numpy"])
def test_a_boolean_mask_of_the_whole_shape_takes_a_scalar(mask_kind):
    X = np.random.default_rng(4).standard_normal((37, 11)).astype(np.float32)
    x = ooc.asarray(X)
    mask = x > 0.3 if mask_kind == "disk" else X > 0.3
    with ooc.MemoryBudget(4096):
        x[mask] = -2
    want = X.copy()
    want[X > 0.3] = -2
    np.testing.assert_array_equal(x.to_numpy(force=True), want)
    with pytest.raises(ValueError, match="depends on the data"):
        x[mask] = np.ones(5, np.float32)
    with pytest.raises(TypeError, match="same_kind"):
        x[mask] = 1j
