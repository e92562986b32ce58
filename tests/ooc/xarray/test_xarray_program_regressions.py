"""Programs that `tests/ooc/xarray/test_xarray_programs.py` found failing, each a
named test, and the order-of-import promise of the groupby adjustments."""

import subprocess
import sys
import textwrap
import warnings

import pytest
from xr_programs import Anomaly, Concat, Program, check
from xrfiles import xr


@pytest.fixture(autouse=True)
def no_flox():
    with xr.set_options(use_flox=False), warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        yield


def test_an_anomaly_from_a_numpy_climatology_after_concat_along_lat():
    # xarray chunked the climatology by the grouped object's chunks, and refused:
    # "inconsistent chunks along dimension lat" (the data's and its coordinate's)
    check(Program(0, (36, 4, 3), "chunk", "f", (Concat(1, False), Anomaly("month", True))))


@pytest.mark.parametrize(
    "imports",
    [
        "import xarray as xr\nfrom gradpipe import ooc",
        "from gradpipe import ooc\nimport xarray as xr\nimport gradpipe.ooc.xarray",
    ],
    ids=["xarray-first", "ooc-first-then-ooc.xarray"],
)
def test_grouped_reductions_of_disk_arrays_wrapped_by_hand_stay_on_disk(imports):
    # no xarray call loaded gradpipe's chunk manager: importing gradpipe.ooc after
    # xarray (or gradpipe.ooc.xarray) adjusts xarray's groupby all the same
    program = imports + textwrap.dedent(
        """
        import numpy as np, pandas as pd
        xr.set_options(use_flox=False)
        d = ooc.DiskArray.from_numpy(np.arange(24.0) + 1e-9)
        time = pd.date_range("2000", periods=24, freq="MS")
        x = xr.DataArray(d, dims="time", coords={"time": time})
        m = x.groupby("time.month").mean()
        assert isinstance(m.data, ooc.DiskArray) and m.dtype == np.float64, type(m.data)
        from gradpipe.ooc.xarray import _groupby
        assert _groupby.installed()
        """
    )
    subprocess.run([sys.executable, "-c", program], check=True, timeout=300)
