import gc
import os
import shutil
import tempfile
from pathlib import Path

import equinox as eqx
import jax
import numpy as np
import pytest
from suite_device import ON_DEVICE, compare_at_device_precision

from gradpipe import ooc
from gradpipe.ooc.arrays import _handles

#: `make test-device` (GRADPIPE_TEST_DEVICE=tpu): gradpipe's passes compute on the
#: accelerator, JAX's default device; jax.numpy's answers, which the tests compare
#: with, on the host's CPU (with the 64-bit types a test may ask for, which abort a
#: TPU process), except in a module that names its TEST_DEVICE and compares there;
#: comparisons of 32-bit floats at the device's precision (`suite_device`).
if ON_DEVICE:
    jax.devices()  # this process holds the chip; the processes tests start, the CPU
    os.environ["JAX_PLATFORMS"] = "cpu"
    compare_at_device_precision()


@pytest.fixture(autouse=True)
def answers_on_the_host(request):
    if not ON_DEVICE or hasattr(request.module, "TEST_DEVICE"):
        yield
        return
    before = jax.config.jax_default_device
    jax.config.update("jax_default_device", jax.devices("cpu")[0])
    try:
        yield
    finally:
        jax.config.update("jax_default_device", before)


@pytest.fixture(scope="session", autouse=True)
def scratch_root(request):
    """Every test's scratch files go to one directory, which must end up empty (but
    after Ctrl-C: the stopped test's arrays are still held by its traceback, and
    pytest's summary of the tests that ran matters more)."""
    root = Path(tempfile.mkdtemp(prefix="gradpipe-ooc-tests-"))
    ooc.set_scratch_dir(root)
    yield root
    _handles.sweep()
    eqx.clear_caches()  # eqx.filter_jit's wrappers hold the functions they compiled
    jax.clear_caches()  # compiled programs hold the DiskArrays they closed over
    gc.collect()
    leftovers = [p for p in root.rglob("*") if p.is_file()]
    ooc.set_scratch_dir(None)
    shutil.rmtree(root, ignore_errors=True)
    interrupted = request.session.exitstatus == pytest.ExitCode.INTERRUPTED
    assert interrupted or not leftovers, f"scratch files left behind: {leftovers[:5]}"


@pytest.fixture
def rng():
    return np.random.default_rng(0)


@pytest.fixture
def tiny_budget():
    """A budget so small that every test array is cut into many uneven tiles."""
    with ooc.MemoryBudget(8192) as b:
        yield b
