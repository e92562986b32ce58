"""Random programs over the whole namespace, each judged against jax.numpy.

`tests/ooc/programs.py` draws the programs and compares values, dtypes and gradients.
`make test` runs a fixed set (`PROGRAMS_PER_SHARD` per shard, the same on every
machine); `make fuzz` runs thousands with a fresh seed (``GRADPIPE_FUZZ_SEED``
repeats a run). Every failure found becomes a named test in
`tests/ooc/test_program_regressions.py`.
"""

import os

import pytest
from hypothesis import strategies as st
from programs import check, programs, run_shard

SHARDS = 8
PROGRAMS_PER_SHARD = int(os.environ.get("GRADPIPE_PROGRAMS_PER_SHARD", "25"))
FUZZ_SEED = os.environ.get("GRADPIPE_FUZZ_SEED")


@pytest.mark.parametrize("shard", range(SHARDS))
def test_random_programs_agree_with_jax_numpy(shard):
    base = int(FUZZ_SEED) if FUZZ_SEED is not None else 0
    strategies = [programs(), st.integers(0, 2**16)]
    run_shard(check, strategies, base * SHARDS + shard, PROGRAMS_PER_SHARD)
