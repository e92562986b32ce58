"""Random xarray workflows on gradpipe-backed data against NumPy-backed xarray.

`tests/ooc/xarray/xr_programs.py` draws the workflows (selection, arithmetic,
reductions with skipna, groupby and anomalies, resample, coarsen, weighted, dot,
quantile and median, concat and merge, zarr and NetCDF round trips) and compares
values, NaNs, dims, coordinates, attributes, dtypes and that results stay on disk,
with JAX's x64 flag off and on. `make test` runs a fixed few (`PROGRAMS_PER_SHARD`
per shard); `make fuzz` runs many with a fresh seed (``GRADPIPE_FUZZ_SEED``
repeats a run). Every failure found becomes a named test.
"""

import os

import jax
import pytest
from programs import run_shard
from xr_programs import check, programs
from xrfiles import xr

SHARDS = 2
#: As test_programs.py's count per shard (a program is a few xarray steps, each run
#: on gradpipe and on NumPy: 25 take some 3 s); make fuzz sets it for its nightly size.
PROGRAMS_PER_SHARD = int(os.environ.get("GRADPIPE_PROGRAMS_PER_SHARD", "25"))
FUZZ_SEED = os.environ.get("GRADPIPE_FUZZ_SEED")


@pytest.mark.parametrize("x64", [False, True], ids=["x64-off", "x64-on"])
@pytest.mark.parametrize("shard", range(SHARDS))
def test_random_xarray_programs_agree_with_numpy_backed_xarray(shard, x64):
    base = int(FUZZ_SEED) if FUZZ_SEED is not None else 0
    with jax.enable_x64(x64), xr.set_options(use_flox=False):
        run_shard(check, [programs()], (base * SHARDS + shard) * 2 + x64, PROGRAMS_PER_SHARD)
