"""What the xarray tests share: the dataset they write and the budget they run under.

`make_climate` is a small monthly dataset (with some missing values, attributes and
coordinates). Operations run under `SMALL`, a budget several times smaller than its
main variable, so anything that read a variable whole would be refused.
"""

import numpy as np
import pandas as pd
import pytest

xr = pytest.importorskip("xarray")
pytest.importorskip("h5netcdf")

from gradpipe import ooc  # noqa: E402

#: Bytes of tiles operations may hold: a seventh of ``t`` (float32, 96 x 16 x 20).
SMALL = ooc.MemoryBudget(16384)
#: The variable ``t``'s chunks in the files (one chunk fits SMALL).
T_CHUNKS = (8, 16, 20)


def make_climate() -> "xr.Dataset":
    rng = np.random.default_rng(21)
    time = pd.date_range("2000-01-01", periods=96, freq="MS")
    lat = np.linspace(-60.0, 60.0, 16)
    lon = np.arange(20) * 18.0
    t = (280 + 10 * rng.standard_normal((96, 16, 20))).astype(np.float32)
    t[rng.random(t.shape) < 0.02] = np.nan  # missing values: skipped by default
    p = rng.standard_normal((96, 16))
    return xr.Dataset(
        {
            "t": (("time", "lat", "lon"), t, {"units": "K", "long_name": "temperature"}),
            "p": (("time", "lat"), p, {"units": "mm"}),
        },
        coords={
            "time": time,
            "lat": ("lat", lat, {"units": "degrees_north"}),
            "lon": ("lon", lon, {"units": "degrees_east"}),
            "elevation": (("lat", "lon"), rng.random((16, 20)).astype(np.float32) * 1000),
        },
        attrs={"title": "a small climate", "source": "tests"},
    )


def open_gradpipe(path, **kwargs):
    """The dataset at ``path`` with gradpipe-backed variables, read in place."""
    return xr.open_dataset(path, chunks={}, chunked_array_type="gradpipe", **kwargs)
