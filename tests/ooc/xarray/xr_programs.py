"""Random xarray workflows, run on gradpipe-backed and on NumPy-backed data and compared.

A `Program` opens a small monthly dataset (written by xarray to NetCDF-4 or zarr and
opened in place, or moved to disk with ``.chunk``), picks a variable and applies a
few `steps`: selection (``isel``, ``sel``), arithmetic, reductions with ``skipna``,
``groupby`` reductions and anomalies, ``resample``, ``coarsen``, ``weighted``,
``xr.dot``, ``quantile``/``median``, ``concat``/``merge`` and zarr or NetCDF round
trips. Each step draws generic numbers (a dimension is ``dims[k % ndim]``), so any
step applies to any state; one that does not fit (``groupby`` without a time
dimension) is skipped in both worlds alike.

`check` runs the program in both worlds, the gradpipe one under a budget smaller
than the data, and after every step compares what the xarray guide promises:
values (to the precision of the dtypes involved), the NaN pattern, dims,
coordinates, attributes, the name, the dtype (NumPy's; the guide's two documented
differences aside: a 0-d result is a JAX value, 32-bit while x64 is off, and counts
and sums of bools and of ints narrower than 64 bits are in JAX's default int), and
that every result with dimensions is a DiskArray.
"""

from __future__ import annotations

import dataclasses
import tempfile
import warnings
from pathlib import Path
from typing import Any

import jax
import numpy as np
import pandas as pd
from hypothesis import strategies as st
from xrfiles import xr

from gradpipe import ooc

#: The gradpipe world's budget: smaller than the largest variables (up to 60 KiB), so
#: a step that read one whole would be refused.
BUDGET = 16384
#: What a quantile or median holds per element of the other dimensions (the reduced
#: dimensions whole, a few copies): beyond the budget it is refused, as documented.
_CORE_COPIES = 4

REDUCTIONS = ("mean", "sum", "std", "var", "min", "max", "count", "median", "prod")
GROUPED = ("mean", "sum", "std", "max", "min", "count", "median")
QUANTILE_METHODS = ("linear", "nearest", "lower", "higher", "midpoint")


# ---------------------------------------------------------------- the data


def make_dataset(seed: int, n_time: int, n_lat: int, n_lon: int) -> xr.Dataset:
    """Monthly data with gaps: f float64, g float32, i int64, j int32, m bool, s 1-D."""
    rng = np.random.default_rng(seed)
    time = pd.date_range("2000-01-01", periods=n_time, freq="MS")
    lat = np.linspace(-60.0, 60.0, n_lat)
    lon = np.arange(n_lon) * (360.0 / n_lon)
    f = 280 + 10 * rng.standard_normal((n_time, n_lat, n_lon))
    f[rng.random(f.shape) < 0.05] = np.nan
    g = rng.standard_normal((n_time, n_lat)).astype(np.float32)
    g[rng.random(g.shape) < 0.05] = np.nan
    s = rng.standard_normal(n_time)
    s[rng.random(n_time) < 0.1] = np.nan
    return xr.Dataset(
        {
            "f": (("time", "lat", "lon"), f, {"units": "K", "long_name": "temperature"}),
            "g": (("time", "lat"), g, {"units": "1"}),
            "i": (("time", "lat", "lon"), rng.integers(-40, 40, (n_time, n_lat, n_lon))),
            "j": (("time", "lon"), rng.integers(0, 100, (n_time, n_lon)).astype(np.int32)),
            "m": (("time", "lat"), rng.random((n_time, n_lat)) > 0.5),
            "s": ("time", s, {"units": "mm"}),
        },
        coords={
            "time": time,
            "lat": ("lat", lat, {"units": "degrees_north"}),
            "lon": ("lon", lon, {"units": "degrees_east"}),
            "elevation": (("lat", "lon"), rng.random((n_lat, n_lon)).astype(np.float32)),
        },
        attrs={"title": "random programs"},
    )


@dataclasses.dataclass
class World:
    """One side of the comparison: the dataset and where files go."""

    name: str  # "gradpipe" or "numpy"
    ds: xr.Dataset
    tmp: Path

    @property
    def disk(self) -> bool:
        return self.name == "gradpipe"

    def weights(self, x: xr.DataArray, dim: str, seed: int) -> xr.DataArray:
        """Positive weights along ``dim`` (cos(lat) on lat, as the guide's), NumPy-backed."""
        if dim == "lat":
            return np.cos(np.deg2rad(x["lat"]))
        values = np.random.default_rng(seed).uniform(0.1, 1.0, x.sizes[dim])
        return xr.DataArray(values, dims=dim, coords={dim: x[dim].values})

    def on_disk(self, w: xr.DataArray) -> xr.DataArray:
        """``w`` moved to gradpipe in the gradpipe world (as it is in the other)."""
        return w.chunk(chunked_array_type="gradpipe") if self.disk else w


# ---------------------------------------------------------------- steps


@dataclasses.dataclass(frozen=True)
class Step:
    """A step of a program; `apply` gives the new state, or None to skip it."""

    def apply(self, x: xr.DataArray, w: World) -> Any:
        raise NotImplementedError

    def narrows(self, x: xr.DataArray) -> bool:
        """Whether it may give JAX's default int where NumPy gives int64 (the guide:
        counts, and sums of bools and narrower ints)."""
        name = getattr(self, "name", "")
        small_int = x.dtype.kind == "b" or (x.dtype.kind in "iu" and x.dtype.itemsize < 8)
        return name == "count" or (name in ("sum", "prod") and small_int)

    def uses_jax_value(self, x: xr.DataArray) -> bool:
        """Whether the result is computed from a 0-d result of ``x`` (a JAX value:
        rounded to 32 bits while x64 is off, as the guide says)."""
        return False


def _dim(x: xr.DataArray, k: int) -> str:
    return str(x.dims[k % x.ndim])


def _dims(x: xr.DataArray, mask: int) -> tuple[str, ...]:
    """The dims whose bit is set in ``mask`` (at least one)."""
    picked = tuple(str(d) for i, d in enumerate(x.dims) if mask >> i & 1)
    return picked or (str(x.dims[mask % x.ndim]),)


@dataclasses.dataclass(frozen=True)
class Isel(Step):
    dim: int
    start: int
    length: int
    stride: int
    fancy: bool

    def apply(self, x: xr.DataArray, w: World) -> Any:
        if x.ndim == 0:
            return None
        d = _dim(x, self.dim)
        n = x.sizes[d]
        start = self.start % n
        if self.fancy:  # indices out of order, with a repeat
            idx = [(start + k * self.stride) % n for k in range(self.length)]
            return x.isel({d: idx + idx[:1]})
        return x.isel({d: slice(start, start + self.length * self.stride, self.stride)})


@dataclasses.dataclass(frozen=True)
class Sel(Step):
    dim: int
    a: int
    b: int

    def apply(self, x: xr.DataArray, w: World) -> Any:
        indexed = [d for d in x.dims if d in x.indexes]
        if not indexed:
            return None
        d = indexed[self.dim % len(indexed)]
        labels = x[d].values
        lo, hi = sorted((self.a % len(labels), self.b % len(labels)))
        if not pd.Index(labels).is_monotonic_increasing:
            return x.sel({d: labels[lo : hi + 1]})
        return x.sel({d: slice(labels[lo], labels[hi])})


ARITHMETIC = {
    "x * 2.5": lambda x, w: x * 2.5,
    "x - x.mean(d)": lambda x, w: x - x.mean(x.dims[0]),
    "abs(x - 3)": lambda x, w: np.abs(x - 3),
    "x.where(x > 0)": lambda x, w: x.where(x > 0),
    "x.fillna(0.5)": lambda x, w: x.fillna(0.5),
    "x.astype(float32)": lambda x, w: x.astype(np.float32),
    "x + ds.g": lambda x, w: x + w.ds["g"],
    "x * cos(lat)": lambda x, w: x * np.cos(np.deg2rad(w.ds["lat"])),
    "np.exp(x / 100)": lambda x, w: np.exp(x / 100),
    "x.clip(0.5, 3.5)": lambda x, w: x.clip(0.5, 3.5),
}


@dataclasses.dataclass(frozen=True)
class Arithmetic(Step):
    expr: str

    def apply(self, x: xr.DataArray, w: World) -> Any:
        if x.ndim == 0 and "mean(d)" in self.expr:
            return None
        if x.dtype.kind == "b" and self.expr in ("x - x.mean(d)", "abs(x - 3)"):
            return None  # NumPy refuses - on bools, as gradpipe does
        return ARITHMETIC[self.expr](x, w)

    def uses_jax_value(self, x: xr.DataArray) -> bool:
        return x.ndim == 1 and "mean(d)" in self.expr  # x - (a 0-d mean)


@dataclasses.dataclass(frozen=True)
class Reduce(Step):
    name: str
    dims: int
    skipna: bool | None

    def apply(self, x: xr.DataArray, w: World) -> Any:
        if x.ndim == 0 or (self.name == "prod" and x.dtype.kind != "f"):
            return None  # (a product of ints overflows differently by width)
        if self.name in ("median",) and x.dtype.kind == "b" and self.skipna:
            return None
        dims = _dims(x, self.dims)
        if self.name == "median" and not _core_fits(x, dims):
            return None
        return getattr(x, self.name)(dims, skipna=self.skipna)


def _core_fits(x: xr.DataArray, dims: tuple[str, ...]) -> bool:
    """Whether a quantile's reduced dimensions fit the budget (else it is refused)."""
    n = int(np.prod([x.sizes[d] for d in dims]))
    return _CORE_COPIES * n * 8 * 2 <= BUDGET


@dataclasses.dataclass(frozen=True)
class GroupBy(Step):
    key: str  # "month" or "season"
    name: str

    def apply(self, x: xr.DataArray, w: World) -> Any:
        if "time" not in x.dims or x.sizes["time"] < 2 or not x.indexes["time"].is_unique:
            return None
        if self.name == "median" and not _core_fits(x, ("time",)):
            return None
        return getattr(x.groupby(f"time.{self.key}"), self.name)()


@dataclasses.dataclass(frozen=True)
class Anomaly(Step):
    key: str
    numpy_climatology: bool  # the climatology read into memory first

    def apply(self, x: xr.DataArray, w: World) -> Any:
        if "time" not in x.dims or not x.indexes["time"].is_unique or x.dtype.kind == "b":
            return None
        climatology = x.groupby(f"time.{self.key}").mean()
        if self.numpy_climatology:
            climatology = climatology.compute()
        return x.groupby(f"time.{self.key}") - climatology


@dataclasses.dataclass(frozen=True)
class Resample(Step):
    freq: str
    name: str

    def apply(self, x: xr.DataArray, w: World) -> Any:
        if "time" not in x.dims or not x.indexes["time"].is_monotonic_increasing:
            return None
        if not x.indexes["time"].is_unique:
            return None
        if self.name == "median" and not _core_fits(x, ("time",)):
            return None
        return getattr(x.resample(time=self.freq), self.name)()


@dataclasses.dataclass(frozen=True)
class Coarsen(Step):
    dim: int
    window: int
    name: str

    def apply(self, x: xr.DataArray, w: World) -> Any:
        if x.ndim == 0:
            return None
        d = _dim(x, self.dim)
        if x.sizes[d] < self.window:
            return None
        return getattr(x.coarsen({d: self.window}, boundary="trim"), self.name)()


@dataclasses.dataclass(frozen=True)
class Weighted(Step):
    name: str  # mean, sum, std, sum_of_weights
    dims: int
    weights_on_disk: bool
    seed: int

    def apply(self, x: xr.DataArray, w: World) -> Any:
        if x.ndim == 0:
            return None
        dims = _dims(x, self.dims)
        weights = w.weights(x, dims[0], self.seed)
        if self.weights_on_disk:
            weights = w.on_disk(weights)
        return getattr(x.weighted(weights), self.name)(dims)


@dataclasses.dataclass(frozen=True)
class Dot(Step):
    dim: int
    weights_first: bool
    weights_on_disk: bool
    seed: int

    def apply(self, x: xr.DataArray, w: World) -> Any:
        if x.ndim == 0:
            return None
        d = _dim(x, self.dim)
        weights = w.weights(x, d, self.seed)
        if self.weights_on_disk:
            weights = w.on_disk(weights)
        return xr.dot(weights, x, dim=d) if self.weights_first else xr.dot(x, weights, dim=d)


@dataclasses.dataclass(frozen=True)
class Quantile(Step):
    q: tuple[float, ...]  # one value: a scalar q
    dims: int
    method: str
    skipna: bool | None

    def apply(self, x: xr.DataArray, w: World) -> Any:
        if x.ndim == 0 or x.dtype.kind == "b":
            return None  # NumPy cannot interpolate booleans (both refuse; see the tests)
        dims = _dims(x, self.dims)
        if not _core_fits(x, dims):
            return None
        if x.dtype.kind == "f" and bool(x.isnull().all()):
            return None  # NumPy's nanquantile keeps float32 for all-NaN data only
        q = self.q[0] if len(self.q) == 1 else list(self.q)
        return x.quantile(q, dim=dims, method=self.method, skipna=self.skipna)


@dataclasses.dataclass(frozen=True)
class Concat(Step):
    dim: int
    new_dim: bool

    def apply(self, x: xr.DataArray, w: World) -> Any:
        if x.ndim == 0:
            return None
        if self.new_dim:
            return xr.concat([x, x * 2], dim="member")
        d = _dim(x, self.dim)
        return xr.concat([x, x.isel({d: slice(0, 2)})], dim=d)


@dataclasses.dataclass(frozen=True)
class Merge(Step):
    other: str

    def apply(self, x: xr.DataArray, w: World) -> Any:
        if x.ndim == 0:
            return None
        other = w.ds[self.other].rename("b")
        return xr.merge([x.rename("a"), other], compat="override", join="outer")


@dataclasses.dataclass(frozen=True)
class RoundTrip(Step):
    fmt: str  # "zarr" or "netcdf"

    def apply(self, x: xr.DataArray, w: World) -> Any:
        if x.ndim == 0 or x.size == 0 or not all(d in x.indexes for d in x.dims):
            return None
        if x.dtype.kind == "i" and "member" in x.dims:
            return None
        path = w.tmp / f"{w.name}-{len(list(w.tmp.iterdir()))}.{self.fmt}"
        ds = x.to_dataset(name="v").drop_encoding()  # (a zarr v2 source's codecs)
        open_kwargs: dict[str, Any] = {"chunks": {}, "chunked_array_type": "gradpipe"}
        if self.fmt == "zarr":
            ds.to_zarr(path, zarr_format=3, consolidated=False)
            back = xr.open_zarr(path, consolidated=False, **(open_kwargs if w.disk else {}))
        else:
            ds.to_netcdf(path, engine="h5netcdf")
            back = xr.open_dataset(path, engine="h5netcdf", **(open_kwargs if w.disk else {}))
        return back["v"] if w.disk else back["v"].load()


# ---------------------------------------------------------------- programs


@dataclasses.dataclass(frozen=True)
class Program:
    seed: int
    sizes: tuple[int, int, int]  # time, lat, lon
    source: str  # "chunk", "netcdf" or "zarr"
    variable: str
    steps: tuple[Step, ...]

    def __str__(self) -> str:
        head = (
            f"data seed {self.seed}, sizes {self.sizes}, from {self.source}: x = ds.{self.variable}"
        )
        return "\n".join([head, *(f"  {s}" for s in self.steps)])


_methods = st.sampled_from(QUANTILE_METHODS)
_skipna = st.sampled_from([None, True, False])
STEPS = st.one_of(
    st.builds(
        Isel,
        st.integers(0, 5),
        st.integers(0, 50),
        st.integers(1, 8),
        st.integers(1, 3),
        st.booleans(),
    ),
    st.builds(Sel, st.integers(0, 5), st.integers(0, 50), st.integers(0, 50)),
    st.builds(Arithmetic, st.sampled_from(sorted(ARITHMETIC))),
    st.builds(Reduce, st.sampled_from(REDUCTIONS), st.integers(0, 7), _skipna),
    st.builds(GroupBy, st.sampled_from(["month", "season"]), st.sampled_from(GROUPED)),
    st.builds(Anomaly, st.sampled_from(["month", "season"]), st.booleans()),
    st.builds(Resample, st.sampled_from(["QS", "YS"]), st.sampled_from(GROUPED)),
    st.builds(
        Coarsen, st.integers(0, 5), st.integers(2, 3), st.sampled_from(["mean", "sum", "max"])
    ),
    st.builds(
        Weighted,
        st.sampled_from(["mean", "sum", "std", "sum_of_weights"]),
        st.integers(0, 7),
        st.booleans(),
        st.integers(0, 99),
    ),
    st.builds(Dot, st.integers(0, 5), st.booleans(), st.booleans(), st.integers(0, 99)),
    st.builds(
        Quantile,
        st.sampled_from([(0.5,), (0.1, 0.9), (0.0, 0.3, 1.0)]),
        st.integers(0, 7),
        _methods,
        _skipna,
    ),
    st.builds(Concat, st.integers(0, 5), st.booleans()),
    st.builds(Merge, st.sampled_from(["f", "g", "s", "j"])),
    st.builds(RoundTrip, st.sampled_from(["zarr", "netcdf"])),
)


@st.composite
def programs(draw: Any, max_steps: int = 4) -> Program:
    return Program(
        seed=draw(st.integers(0, 2**16)),
        sizes=(
            draw(st.sampled_from([36, 48, 60])),
            draw(st.integers(4, 8)),
            draw(st.integers(3, 6)),
        ),
        source=draw(st.sampled_from(["chunk", "netcdf", "zarr"])),
        variable=draw(st.sampled_from(["f", "g", "i", "j", "m", "s"])),
        steps=tuple(draw(st.lists(STEPS, min_size=1, max_size=max_steps))),
    )


# ---------------------------------------------------------------- running and judging


def _open(program: Program, tmp: Path) -> tuple[xr.Dataset, xr.Dataset]:
    """The program's dataset in both worlds: (gradpipe-backed, NumPy-backed)."""
    data = make_dataset(program.seed, *program.sizes)
    if program.source == "chunk":
        return data.chunk(chunked_array_type="gradpipe"), data
    if program.source == "netcdf":
        path = tmp / "data.nc"
        data.to_netcdf(path, engine="h5netcdf")
        kwargs: dict[str, Any] = {"engine": "h5netcdf"}
    else:
        path = tmp / "data.zarr"
        data.to_zarr(path, zarr_format=2, consolidated=True)
        kwargs = {"engine": "zarr"}
    gp = xr.open_dataset(path, chunks={}, chunked_array_type="gradpipe", **kwargs)
    return gp, xr.open_dataset(path, **kwargs).load()


def check(program: Program) -> None:
    """Run ``program`` in both worlds and compare after every step (see the module)."""
    with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # NumPy's empty-slice notices, the 0-d notice
        root = Path(tmp)
        (root / "gradpipe").mkdir()
        (root / "numpy").mkdir()
        gp_ds, ref_ds = _open(program, root)
        gp_world = World("gradpipe", gp_ds, root / "gradpipe")
        ref_world = World("numpy", ref_ds, root / "numpy")
        gp, ref = gp_ds[program.variable], ref_ds[program.variable]
        narrowed = False  # a count or a sum of narrow ints happened (x64 off: int32)
        low = _is_low(ref)  # a float32 value happened: later values are as good as float32
        x64 = jax.dtypes.canonicalize_dtype(np.float64) == np.float64
        scale = 0.0  # the largest magnitude of any value so far
        for i, step in enumerate(program.steps):
            where = f"after step {i} ({step})"
            try:
                want = step.apply(ref, ref_world)
            except Exception as refusal:  # NumPy-backed xarray refuses: so must gradpipe
                with ooc.MemoryBudget(BUDGET):
                    try:
                        step.apply(gp, gp_world)
                    except type(refusal):
                        continue
                raise AssertionError(f"{where}: NumPy-backed xarray refused ({refusal!r})")
            if want is None:
                continue
            narrowed = narrowed or step.narrows(ref)
            low = low or (not x64 and step.uses_jax_value(ref))
            scale = max(scale, _scale(ref.values))  # what rounding errors are relative to
            with ooc.MemoryBudget(BUDGET):
                got = step.apply(gp, gp_world)
            arrays = (
                [(got[n], want[n], f"{where}, variable {n}") for n in want.data_vars]
                if isinstance(want, xr.Dataset)
                else [(got, want, where)]
            )
            for g, r, at in arrays:
                low = low or _is_low(g) or _is_low(r)
                _compare(g, r, narrowed, low, scale, at)
            gp, ref = (got["a"], want["a"]) if isinstance(want, xr.Dataset) else (got, want)
            if ref.ndim == 0:  # a JAX value now: jax.numpy's rules, not NumPy's, apply
                break


def _is_low(x: xr.DataArray) -> bool:
    return x.dtype in (np.float32, np.float16, np.complex64)


def _scale(values: np.ndarray) -> float:
    """The largest magnitude among ``values`` (1 for none, or for non-numbers)."""
    if values.dtype.kind not in "biufc":
        return 1.0
    finite = np.abs(values[np.isfinite(values)]) if values.dtype.kind in "fc" else values
    return float(np.max(np.abs(finite))) if finite.size else 1.0


def _compare(
    got: xr.DataArray, want: xr.DataArray, narrowed: bool, low: bool, scale: float, where: str
) -> None:
    assert isinstance(got, xr.DataArray), where
    assert got.dims == want.dims and got.shape == want.shape, (where, got.sizes, want.sizes)
    assert got.name == want.name, where
    assert got.attrs == want.attrs, (where, got.attrs, want.attrs)
    _check_dtype(got, want, narrowed, where)
    assert set(got.coords) == set(want.coords), (where, set(got.coords), set(want.coords))
    for name in want.coords:
        assert got[name].dims == want[name].dims, (where, name)
        assert got[name].attrs == want[name].attrs, (where, name)
        got_coord = np.asarray(got[name].values)
        _check_values(got_coord, want[name].values, _is_low(want[name]), f"{where}, coord {name}")
    # a 0-d result rounded to 32 bits (x64 off) that xarray computed from another 0-d
    # result (weighted std over every dimension subtracts a 0-d mean) carries that
    # mean's rounding: up to float32's epsilon of the data, not of the result
    atol = 2e-6 * scale if got.ndim == 0 and got.dtype != want.dtype else 0.0
    # (and a sum that cancels, as the mean of anomalies, is as exact as its inputs)
    atol += (2e-5 if low else 1e-9) * scale
    _check_values(np.asarray(got.values), want.values, low, where, atol)


def _check_dtype(got: xr.DataArray, want: xr.DataArray, narrowed: bool, where: str) -> None:
    if got.ndim == 0:  # a JAX value, converted as jnp.asarray converts NumPy's result
        # (or a NumPy one, when xarray applied a NumPy ufunc to one: weighted std)
        assert isinstance(got.data, (jax.Array, np.ndarray)), (where, type(got.data))
        expected = jax.dtypes.canonicalize_dtype(want.dtype)
    else:  # on disk, in NumPy's dtype
        assert isinstance(got.data, ooc.DiskArray), (where, type(got.data))
        expected = want.dtype
    default_int = jax.dtypes.canonicalize_dtype(np.int64)
    if narrowed and want.dtype == np.int64 and got.dtype == default_int:
        return  # the guide's documented difference: counts in JAX's default int
    assert got.dtype == expected, (where, got.dtype, want.dtype)


def _check_values(
    got: np.ndarray, want: np.ndarray, low: bool, where: str, atol: float = 0.0
) -> None:
    assert got.shape == want.shape, (where, got.shape, want.shape)
    if want.dtype.kind == "O":  # labels (a season coordinate), with NaN for none
        missing = pd.isnull(want)
        np.testing.assert_array_equal(pd.isnull(got), missing, err_msg=f"{where}: missing")
        np.testing.assert_array_equal(got[~missing], want[~missing], err_msg=where)
        return
    if want.dtype.kind not in "fc":
        np.testing.assert_array_equal(got, want, err_msg=where)
        return
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=f"{where}: NaNs")
    finite = want[np.isfinite(want)]
    scale = float(np.max(np.abs(finite))) if finite.size else 1.0
    rtol = 2e-5 if low or got.dtype != want.dtype else 1e-9
    np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol * scale + atol, err_msg=where)
