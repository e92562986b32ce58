"""`gradpipe.ooc` is an array API namespace (standard 2024.12): every name of the
standard is there, or deliberately absent for a stated reason, and DiskArrays speak
the array object's protocol (`__array_namespace__`, `device`, NumPy's ufuncs)."""

import jax
import numpy as np
import pytest

from gradpipe import ooc

# The standard's names (2024.12, main namespace; the linalg and fft extensions are
# not claimed), by family.
STANDARD = {
    "constants": "e inf nan newaxis pi",
    "data types": "bool int8 int16 int32 int64 uint8 uint16 uint32 uint64 "
    "float32 float64 complex64 complex128",
    "creation": "arange asarray empty empty_like eye from_dlpack full full_like linspace "
    "meshgrid ones ones_like tril triu zeros zeros_like",
    "data type functions": "astype can_cast finfo iinfo isdtype result_type",
    "elementwise": "abs acos acosh add asin asinh atan atan2 atanh bitwise_and "
    "bitwise_left_shift bitwise_invert bitwise_or bitwise_right_shift bitwise_xor ceil clip "
    "conj copysign cos cosh divide equal exp expm1 floor floor_divide greater greater_equal "
    "hypot imag isfinite isinf isnan less less_equal log log1p log2 log10 logaddexp "
    "logical_and logical_not logical_or logical_xor maximum minimum multiply negative "
    "nextafter not_equal positive pow real reciprocal remainder round sign signbit sin sinh "
    "square sqrt subtract tan tanh trunc",
    "indexing": "take take_along_axis",
    "info": "__array_namespace_info__",
    "linear algebra": "matmul matrix_transpose tensordot vecdot",
    "manipulation": "broadcast_arrays broadcast_to concat expand_dims flip moveaxis "
    "permute_dims repeat reshape roll squeeze stack tile unstack",
    "searching": "argmax argmin count_nonzero nonzero searchsorted where",
    "set": "unique_all unique_counts unique_inverse unique_values",
    "sorting": "argsort sort",
    "statistical": "cumulative_sum cumulative_prod max mean min prod std sum var",
    "utility": "all any diff",
}

# Names deliberately not provided, each with its reason (the conformance skip list
# gives the same reasons).
NOT_PROVIDED = {
    "nonzero": "data-dependent output shape (capabilities()['data-dependent shapes'] is False)",
    "unique_all": "data-dependent output shape",
    "unique_counts": "data-dependent output shape",
    "unique_inverse": "data-dependent output shape",
    "unique_values": "data-dependent output shape",
}


def test_every_name_of_the_standard_is_provided_or_refused_for_a_reason():
    names = {n for family in STANDARD.values() for n in family.split()}
    missing = sorted(n for n in names if n not in NOT_PROVIDED and not hasattr(ooc, n))
    assert not missing, f"gradpipe.ooc lacks {missing}"
    present = sorted(n for n in NOT_PROVIDED if hasattr(ooc, n))
    assert not present, f"{present} are listed as not provided but exist"
    assert ooc.__array_api_version__ == "2024.12"


def test_a_disk_array_names_its_namespace_device_and_dtypes():
    x = ooc.asarray(np.arange(6.0, dtype=np.float32).reshape(2, 3))
    assert x.__array_namespace__() is ooc
    assert x.__array_namespace__(api_version="2023.12") is ooc
    with pytest.raises(ValueError, match=r"2024\.12"):
        x.__array_namespace__(api_version="1999.01")
    assert x.device == ooc.__array_namespace_info__().default_device()
    assert x.to_device(x.device) is x
    with pytest.raises(ValueError, match="device"):
        x.to_device("cuda:0")
    assert x.dtype == ooc.float32 and x.ndim == 2 and x.size == 6
    assert (x.mT.shape, x.T.shape) == ((3, 2), (3, 2))
    np.testing.assert_array_equal(np.from_dlpack(x), np.arange(6.0, dtype=np.float32).reshape(2, 3))
    with pytest.raises(BufferError, match="copy"):
        x.__dlpack__(copy=False)


def test_inspection_reports_what_the_namespace_supports():
    info = ooc.__array_namespace_info__()
    caps = info.capabilities()
    assert caps["boolean indexing"] is False and caps["data-dependent shapes"] is False
    with jax.enable_x64(True):  # jax.numpy's defaults (test_x64_off.py: x64 off)
        assert info.default_dtypes()["real floating"] == ooc.float64
        assert info.default_dtypes()["indexing"] == ooc.int64
    with jax.enable_x64(False):
        assert info.default_dtypes()["real floating"] == ooc.float32
        assert info.default_dtypes()["indexing"] == ooc.int32
    assert set(info.dtypes(kind="integral")) == {
        "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"
    }  # fmt: skip
    assert set(info.dtypes(kind=("bool", "complex floating"))) == {
        "bool",
        "complex64",
        "complex128",
    }
    assert info.devices() == [info.default_device()]


def test_data_type_functions_answer_as_numpy():
    x = ooc.asarray(np.zeros(3, np.int8))
    assert ooc.result_type(x, ooc.int16) == np.int16
    assert ooc.result_type(x, 1) == np.int8  # a Python scalar is weak
    assert ooc.result_type(ooc.float32, 1.0) == np.float32
    with pytest.raises(ValueError, match="besides scalars"):
        ooc.result_type(1, 2.0)
    assert ooc.can_cast(x, ooc.int64) and not ooc.can_cast(ooc.float64, ooc.float32)
    info = ooc.finfo(ooc.complex64)
    assert info.eps == np.finfo(np.float32).eps and type(info.eps) is float
    assert info.dtype == np.float32 and info.bits == 32
    assert ooc.iinfo(x).max == 127
    assert ooc.isdtype(ooc.uint8, "unsigned integer") and ooc.isdtype(ooc.int8, "integral")
    assert ooc.isdtype(ooc.float64, ("bool", "real floating"))
    assert not ooc.isdtype(ooc.complex64, "real floating")
    with pytest.raises(ValueError, match="unknown kind"):
        ooc.isdtype(ooc.int8, "whole numbers")


def test_numpy_ufuncs_run_out_of_core_instead_of_loading_the_array():
    X = np.linspace(-1, 1, 40, dtype=np.float32).reshape(8, 5)
    with ooc.MemoryBudget(4096):
        x = ooc.asarray(X)
        for ufunc in (np.exp, np.arccos, np.negative, np.absolute):
            got = ufunc(x)
            assert isinstance(got, ooc.DiskArray), ufunc
            np.testing.assert_allclose(got.to_numpy(), ufunc(X), rtol=1e-6)
        got = np.power(x, 2) + np.ones(5, np.float32)  # a NumPy operand joins on disk
        assert isinstance(got, ooc.DiskArray)
        np.testing.assert_allclose(got.to_numpy(), X**2 + 1, rtol=1e-6)
        # (np.add.reduce is refused the same way, but NumPy 2.4 keeps its arguments
        # alive after an override raises, so the test does not leave one behind)
        with pytest.raises(TypeError, match=r"np\.add\.outer has no out-of-core form"):
            np.add.outer(x, x)
        with pytest.raises(TypeError, match=r"np\.fmod has no out-of-core form"):
            np.fmod(x, 2)


def test_numpy_conversion_refuses_an_array_over_the_budget_with_its_size():
    x = ooc.asarray(np.ones((64, 64)))  # 32 KiB
    with ooc.MemoryBudget(4096), pytest.raises(MemoryError, match=r"32\.0 KiB"):
        np.asarray(x)
    np.testing.assert_array_equal(np.asarray(x), np.ones((64, 64)))  # under the default
    with pytest.raises(ValueError, match="copy=False"):
        np.asarray(x, copy=False)


def test_a_traced_disk_array_has_the_same_protocol():
    x = ooc.asarray(np.ones((3, 2), np.float32))

    def f(a):
        assert a.__array_namespace__() is ooc and a.device == x.device
        return (a.mT + 1.0) == 2.0

    out = jax.jit(f)(x)
    np.testing.assert_array_equal(out.to_numpy(), np.ones((2, 3), bool))
