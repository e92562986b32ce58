"""Random programs with x64 off: JAX parameters of every dtype on DiskArrays of every dtype.

`tests/ooc/x64_programs.py` draws the programs and judges them: dtypes by the
documented rule (NumPy's on disk, ``jnp.asarray``'s for a JAX value), values and
gradients against jax.numpy. `make test` runs a fixed set (`PROGRAMS_PER_SHARD`
per shard, as `test_programs.py`); `make fuzz` runs many more with a fresh seed
(``GRADPIPE_FUZZ_SEED`` repeats a run). Every failure found becomes a named test.
"""

import os

import pytest
from programs import run_shard
from x64_programs import check, x64_programs

SHARDS = 4
#: A quarter of test_programs.py's count per shard by default: each program here runs
#: three worlds and a gradient.
PROGRAMS_PER_SHARD = max(1, int(os.environ.get("GRADPIPE_PROGRAMS_PER_SHARD", "24")) // 4)
FUZZ_SEED = os.environ.get("GRADPIPE_FUZZ_SEED")


@pytest.mark.parametrize("shard", range(SHARDS))
def test_random_x64_off_programs_agree_with_the_rule_and_jax_numpy(shard):
    base = int(FUZZ_SEED) if FUZZ_SEED is not None else 0
    run_shard(check, [x64_programs()], base * SHARDS + shard, PROGRAMS_PER_SHARD)
