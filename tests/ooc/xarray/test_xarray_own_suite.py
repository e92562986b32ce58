"""xarray's own tests of chunked and duck arrays, run against gradpipe.

xarray ships its test suite in its wheel (``xarray/tests``). The tests that are
written for any array type or any chunk manager are imported from there and
collected here with gradpipe in place of the array type they were written for:

- ``test_duck_array_wrapping.py``: xarray's table of operations that must keep the
  array type (``TestTopLevelMethods``, ``TestDataArrayMethods``, written for cupy,
  dask, jax.numpy, pint and sparse). Here the namespace is `gradpipe.ooc`, the
  array class `DiskArray`, and the arrays are made by the chunk manager's
  ``from_array``, as xarray does for dask. xarray's own (non-strict) xfail marks are
  dropped: each test below either passes or is listed here.
- ``test_array_api.py``: xarray over an array API namespace (written for
  ``array_api_strict``); here the namespace is `gradpipe.ooc`.
- ``test_namedarray.py``: ``NamedArray`` over a duck array (the generic tests of
  ``NamedArraySubclassobjects`` and the ones of ``TestNamedArray`` that use its
  ``target``), with DiskArray data; and xarray's duck-array protocol check.
- ``test_parallelcompat.py``: the chunk manager registry. Run as written with
  gradpipe installed beside dask (dask stays the default, a foreign chunked array
  finds no manager); and the tests written around a dummy chunk manager run again
  with gradpipe's manager and a DiskArray in the dummy's place.

This is how cubed-xarray tests its manager (it runs xarray's tests, adapted, against
cubed), without copying them: each test is xarray's function, given other globals
or fixtures.

xarray's test modules use marks (``flaky``, ``network``, ``skip_with_dask_array``)
that ``--strict-markers`` refuses unless declared: pyproject.toml declares them.
``test_duck_array_wrapping`` switches JAX's x64 on when
imported; the flag is put back.

Expected failures (``xfail(strict=True)``), each a limitation of gradpipe or of the
test itself:

- A 0-d result is a JAX array, not a DiskArray (the out-of-core guide, "Dtypes"):
  ``count()``, ``dot``, ``cov`` and ``corr`` over all dimensions, ``weighted(...).mean()`` and
  ``quantile(0.5)`` over all dimensions, with ``skipna`` on or off (duck-array
  tests); ``sum()`` (array API tests, ``aggregation`` and ``aggregation_skipna``).
  ``median`` runs out of core and passes.
- No ``sliding_window_view`` (``xp.lib.stride_tricks``): ``rolling`` and
  ``cumulative`` construct and reduce (as for jax.numpy in xarray's table).
- No ``gradient``: ``differentiate``. No ``isin``: ``isin``.
- ``polyfit``: xarray calls ``xp.any(..., out=)``, a NumPy argument the standard's
  ``any`` does not take (xarray marks the test for every array type: "polyfit uses
  numpy linalg").
- ``rolling_exp`` needs numbagg; ``ffill``, ``bfill``, ``rank`` and
  ``interpolate_na`` are called without ``dim``, which this xarray requires (they
  fail for every array type; xarray marks them).
- Array API ``properties`` with x64 off: `gradpipe.ooc.asarray` of Python floats is
  float32 then (jax.numpy's default dtype), so ``nbytes`` is half NumPy's; it passes
  with x64 on.
- NamedArray ``broadcast_to_errors``: the test matches NumPy's wording of the
  ``ValueError``; gradpipe raises a ``ValueError`` worded its own way.

Found by these tests and fixed: ``xr.full_like`` (the manager's namespace takes
dask's ``chunks=``), the DiskArray methods ``conj``/``conjugate``/``real``/``imag``
(for ``xr.cov``, ``xr.corr``), ``argsort``/``searchsorted``, NumPy's ``ddof`` in
`gradpipe.ooc.std`/``var`` and NumPy's ``cumsum``/``cumprod`` (``skipna=False``).
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import sys
import types

import numpy as np
import pytest

xr = pytest.importorskip("xarray")
jax = pytest.importorskip("jax")

from xarray.namedarray.core import NamedArray  # noqa: E402
from xarray.namedarray.parallelcompat import guess_chunkmanager  # noqa: E402

from gradpipe import ooc  # noqa: E402
from gradpipe.ooc.xarray import GradpipeChunkManager  # noqa: E402


def _import(name: str):
    """xarray's test module ``name``, with JAX's x64 flag as it was before."""
    before = jax.config.jax_enable_x64
    try:
        return importlib.import_module(name)
    finally:
        jax.config.update("jax_enable_x64", before)


def _rebind(f, **globals_):
    """``f`` with some of its module's globals replaced (a new function; marks kept)."""
    g = types.FunctionType(
        f.__code__, {**f.__globals__, **globals_}, f.__name__, f.__defaults__, f.__closure__
    )
    g.__kwdefaults__ = f.__kwdefaults__
    g.__dict__.update(f.__dict__)
    g.__qualname__ = f.__qualname__
    return g


def _copy_tests(base, xfails=(), names=None, drop=("xfail",), **globals_):
    """``base``'s test methods (or those in ``names``) as new functions: xarray's own
    marks in ``drop`` removed, a strict xfail added for the names in ``xfails``
    (``{name or name[param]: reason}``), and globals replaced by ``globals_``."""
    xfails = dict(xfails)
    out = {}
    for name in names or [n for n in dir(base) if n.startswith("test_")]:
        f = getattr(base, name)
        if globals_:
            f = _rebind(f, **globals_)

        @functools.wraps(f)
        def test(self, *args, __f=f, **kwargs):
            return __f(self, *args, **kwargs)

        marks = [m for m in getattr(f, "pytestmark", []) if m.name not in drop]
        for m in marks:  # an xfail for one case of a parametrised test
            if m.name == "parametrize":
                key = name.removeprefix("test_")
                values = list(m.args[1])
                if any(f"{key}[{v}]" in xfails for v in values):
                    params = [
                        pytest.param(
                            v,
                            marks=pytest.mark.xfail(strict=True, reason=xfails[f"{key}[{v}]"])
                            if f"{key}[{v}]" in xfails
                            else (),
                        )
                        for v in values
                    ]
                    marks[marks.index(m)] = pytest.mark.parametrize(m.args[0], params).mark
        key = name.removeprefix("test_")
        if key in xfails:
            marks.append(pytest.mark.xfail(strict=True, reason=xfails[key]).mark)
        test.pytestmark = marks
        out[name] = test
    return out


@pytest.fixture(autouse=True)
def _forget_the_last_exception():
    """pytest keeps a test's exception in ``sys.last_traceback`` until the next test
    starts; an expected failure's frames hold DiskArrays, whose scratch files the
    check at the end of the session would find if it was the last test to run."""
    yield
    for name in ("last_type", "last_value", "last_traceback", "last_exc"):
        if hasattr(sys, name):
            delattr(sys, name)


# -- test_duck_array_wrapping.py: the operations that keep the array type ----------------

wrapping = _import("xarray.tests.test_duck_array_wrapping")

ZERO_D = "a 0-d result of gradpipe.ooc is a JAX array, not a DiskArray"
NO_WINDOWS = "gradpipe.ooc has no lib.stride_tricks.sliding_window_view (rolling windows)"
NO_DIM = "xarray's test calls it without dim, which this xarray requires (fails for any array)"

XFAIL_TOP_LEVEL = {"dot": ZERO_D, "cov": ZERO_D, "corr": ZERO_D}
XFAIL_DATAARRAY = {
    "count": ZERO_D,
    "dot": ZERO_D,
    "weighted": ZERO_D,
    "quantile[True]": ZERO_D,
    "quantile[False]": ZERO_D,
    "rolling_construct": NO_WINDOWS,
    "rolling_reduce": NO_WINDOWS,
    "cumulative_construct": NO_WINDOWS,
    "cumulative_reduce": NO_WINDOWS,
    "differentiate": "gradpipe.ooc has no gradient",
    "isin": "gradpipe.ooc has no isin",
    "polyfit": "xarray calls xp.any(..., out=), which gradpipe.ooc.any does not take",
    "rolling_exp_reduce": "rolling_exp needs numbagg",
    "ffill": NO_DIM,
    "bfill": NO_DIM,
    "rank": NO_DIM,
    "interpolate_na": NO_DIM,
}


class _OnGradpipe(wrapping._BaseTest):
    """xarray's test base, with gradpipe's namespace and chunk manager."""

    def setup_for_test(self, request, namespace=None):
        manager = guess_chunkmanager("gradpipe")
        self.namespace = "gradpipe.ooc"
        self.xp = ooc
        self.Array = ooc.DiskArray
        self.constructor = lambda data: manager.from_array(np.asarray(data), chunks=data.shape)


class TestTopLevelMethods(_OnGradpipe):
    @pytest.fixture(autouse=True)
    def setUp(self, request):
        self.setup_for_test(request)
        self.x1 = self.get_test_dataarray()
        self.x2 = self.get_test_dataarray().assign_coords(x=np.arange(2, 7))
        yield
        self.__dict__.clear()  # pytest keeps the instance: let its DiskArrays go

    locals().update(_copy_tests(wrapping.TestTopLevelMethods, XFAIL_TOP_LEVEL))


class TestDataArrayMethods(_OnGradpipe):
    @pytest.fixture(autouse=True)
    def setUp(self, request):
        self.setup_for_test(request)
        self.x = self.get_test_dataarray()
        yield
        self.__dict__.clear()

    locals().update(_copy_tests(wrapping.TestDataArrayMethods, XFAIL_DATAARRAY))


# -- test_array_api.py: xarray over an array API namespace -------------------------------


def _load_array_api_tests():
    """xarray's test_array_api.py, loaded under another name with `gradpipe.ooc` as
    its ``xp`` and DiskArray as its ``Array`` (it imports them from array_api_strict)."""
    spec = importlib.util.find_spec("xarray.tests.test_array_api")
    module = importlib.util.module_from_spec(
        importlib.util.spec_from_file_location("_xarray_test_array_api_on_gradpipe", spec.origin)
    )
    names = ("array_api_strict", "array_api_strict._array_object")
    saved = {n: sys.modules.get(n) for n in names}
    sys.modules["array_api_strict"] = ooc
    sys.modules["array_api_strict._array_object"] = types.SimpleNamespace(Array=ooc.DiskArray)
    try:
        spec.loader.exec_module(module)
    finally:
        for n, m in saved.items():
            if m is None:
                sys.modules.pop(n, None)
            else:
                sys.modules[n] = m
    return module


array_api = _load_array_api_tests()
assert array_api.xp is ooc and array_api.Array is ooc.DiskArray


arrays = array_api.arrays  # the fixture its tests take
FLOAT32_DEFAULT = (
    "with x64 off, gradpipe.ooc.asarray of Python floats is float32 (jax.numpy's default "
    "dtype, as the out-of-core guide says), so nbytes is half NumPy's"
)
XFAIL_ARRAY_API = {"test_aggregation": ZERO_D, "test_aggregation_skipna": ZERO_D}


@pytest.mark.parametrize("x64", [False, True], ids=["x64-off", "x64-on"])
class TestArrayAPI:
    """xarray's array API tests, with JAX's x64 flag off (JAX's default) and on (as
    the array API standard's own suite runs against gradpipe.ooc)."""

    @pytest.fixture(autouse=True)
    def _x64(self, x64, request):
        if not x64 and request.node.name.startswith("test_properties"):
            request.applymarker(pytest.mark.xfail(strict=True, reason=FLOAT32_DEFAULT))
        with jax.enable_x64(x64):
            yield

    locals().update(
        {
            name: staticmethod(
                pytest.mark.xfail(strict=True, reason=XFAIL_ARRAY_API[name])(f)
                if name in XFAIL_ARRAY_API
                else f
            )
            for name, f in (
                (n, _rebind(getattr(array_api, n))) for n in dir(array_api) if n.startswith("test_")
            )
        }
    )


# -- test_namedarray.py: NamedArray over a DiskArray -------------------------------------

namedarray = _import("xarray.tests.test_namedarray")


BROADCAST_WORDING = (
    "the test matches NumPy's wording of the broadcasting ValueError; gradpipe's "
    "ValueError words it its own way"
)


class TestNamedArrayOverDiskArray(namedarray.NamedArraySubclassobjects):
    def cls(self, dims, data, *args, **kwargs):
        return NamedArray(dims, ooc.asarray(np.asarray(data)), *args, **kwargs)

    @pytest.fixture
    def target(self, data):
        return NamedArray(["x", "y"], ooc.DiskArray.from_numpy(data))

    locals().update(
        _copy_tests(
            namedarray.TestNamedArray,
            names=[
                "test_expand_dims",
                "test_permute_dims",
                "test_permute_dims_errors",
                "test_broadcast_to",
                "test_broadcast_to_errors",
            ],
            xfails={"broadcast_to_errors": BROADCAST_WORDING},
        )
    )


def test_namedarray_a_disk_array_is_a_duck_array():
    x = ooc.DiskArray.from_numpy(np.arange(4.0))
    assert namedarray.check_duck_array_typevar(x) is x


# -- test_parallelcompat.py: the chunk manager registry ----------------------------------

parallelcompat = _import("xarray.tests.test_parallelcompat")

# As written, with gradpipe's entry point installed beside dask's and others.
TestGetChunkManager = parallelcompat.TestGetChunkManager
TestGetChunkedArrayType = parallelcompat.TestGetChunkedArrayType
register_dummy_chunkmanager = parallelcompat.register_dummy_chunkmanager
test_parallelcompat_bogus_entrypoint = parallelcompat.test_bogus_entrypoint


def _disk_array(values):
    """In the dummy array's place: a DiskArray of ``values``."""
    return ooc.DiskArray.from_numpy(np.asarray(values))


#: The tests written around the dummy chunk manager that hold for any manager.
GRADPIPE_AS_DUMMY = {
    parallelcompat.TestGetChunkManager: [
        "test_get_chunkmanger",
        "test_get_chunkmanger_via_set_options",
    ],
    parallelcompat.TestGetChunkedArrayType: [
        "test_detect_chunked_arrays",
        "test_ignore_inmemory_arrays",
        "test_raise_if_no_arrays_chunked",
        "test_raise_on_mixed_array_types",
    ],
}


class TestGradpipeInTheDummyManagersPlace:
    """xarray's registry tests with gradpipe's manager registered under the dummy's
    name, and DiskArrays for the dummy's arrays."""

    @pytest.fixture
    def register_dummy_chunkmanager(self, monkeypatch):
        from xarray.namedarray.parallelcompat import list_chunkmanagers

        registered = {k: v for k, v in list_chunkmanagers().items() if k != "gradpipe"}
        monkeypatch.setattr(
            "xarray.namedarray.parallelcompat.list_chunkmanagers",
            lambda: {"dummy": GradpipeChunkManager()} | registered,
        )

    for _base, _names in GRADPIPE_AS_DUMMY.items():
        locals().update(
            _copy_tests(
                _base,
                names=_names,
                DummyChunkManager=GradpipeChunkManager,
                DummyChunkedArray=_disk_array,
            )
        )
    del _base, _names
