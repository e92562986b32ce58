"""MemoryBudget: default, context manager, per-call argument, tile plans, peak RSS."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from gradpipe import ooc
from gradpipe.ooc.execution._driver import Driver
from gradpipe.ooc.ops._blockwise import Blockwise
from gradpipe.ooc.ops._elementwise import add
from gradpipe.ooc.ops._matmul import MatMul


def test_budget_parsing_and_errors():
    assert ooc.MemoryBudget("512MiB").nbytes == 512 * 2**20
    assert ooc.MemoryBudget("2GB").nbytes == 2 * 10**9
    assert ooc.MemoryBudget(8192).nbytes == 8192
    with pytest.raises(ValueError, match="512MiB"):
        ooc.MemoryBudget("lots")
    with pytest.raises(ValueError, match="minimum"):
        ooc.MemoryBudget(10)


def test_default_context_and_per_call_argument():
    default = ooc.get_budget()
    with ooc.MemoryBudget("1MiB") as outer:
        assert ooc.get_budget() == outer
        with ooc.MemoryBudget("2MiB") as inner:
            assert ooc.get_budget() == inner
            assert ooc.get_budget("3MiB") == ooc.MemoryBudget("3MiB")
        assert ooc.get_budget() == outer
    assert ooc.get_budget() == default
    ooc.set_default_budget("256MiB")
    try:
        assert ooc.get_budget() == ooc.MemoryBudget("256MiB")
    finally:
        ooc.set_default_budget(default)


class _Shape:
    def __init__(self, shape, dtype=np.float32):
        self.shape, self.dtype = shape, np.dtype(dtype)


def test_tiles_depend_on_budget_op_inputs_and_phase():
    a, b = _Shape((4096, 4096)), _Shape((4096, 4096))
    small, big = Driver(ooc.MemoryBudget("16MiB")), Driver(ooc.MemoryBudget("512MiB"))
    t_small = small._plan(MatMul(), [a, b], "forward")[2]
    t_big = big._plan(MatMul(), [a, b], "forward")[2]
    assert np.prod(t_small) < np.prod(t_big)
    # the working set of the chosen tile fits the budget
    m, n, k = t_small
    assert 4 * (2 * (m * k + k * n) + 3 * m * n) <= 16 * 2**20
    fwd = small._plan(MatMul(), [a, b], "forward")[2]
    bwd = small._plan(MatMul(), [a, b], "backward")[2]
    assert np.prod(bwd) < np.prod(fwd)
    mid = Driver(ooc.MemoryBudget("24MiB"))
    one = mid._plan(Blockwise(add.kernel, "add"), [a, _Shape(())], "forward")[2]
    two = mid._plan(Blockwise(add.kernel, "add"), [a, b], "forward")[2]
    assert np.prod(two) < np.prod(one)


def test_a_budget_too_small_for_one_element_is_a_clear_error():
    x = ooc.DiskArray.from_numpy(np.ones((64, 64), np.float32))
    with pytest.raises(MemoryError, match="Raise the budget"):
        ooc.make_op(_HugeOp)(x, budget=4096)


class _HugeOp(ooc.BlockParallelOp):
    def output_shape(self, s):
        return s

    def index_map(self, out_r, red_r, s):
        return (tuple(slice(0, n) for n in s),)  # always the whole input


RSS_SCRIPT = textwrap.dedent(
    """
    import gc, json, numpy as np, jax
    from gradpipe import ooc

    def status(key):
        for line in open("/proc/self/status"):
            if line.startswith(key):
                return int(line.split()[1]) * 1024

    budget = ooc.MemoryBudget("16MiB")
    ooc.set_default_budget(budget)
    rng = np.random.default_rng(0)
    A = ooc.DiskArray.from_numpy(rng.standard_normal((2048, 2048), dtype=np.float32))
    B = ooc.DiskArray.from_numpy(rng.standard_normal((2048, 2048), dtype=np.float32))
    f = jax.value_and_grad(lambda a, b: ooc.sum(ooc.square(a @ b)), argnums=(0, 1))
    small = ooc.DiskArray.from_numpy(np.ones((64, 64), np.float32))
    f(small, small)  # JAX's own one-time setup is not the operation's memory
    np.ones((512, 512), np.float32) @ np.ones((512, 512), np.float32)  # BLAS buffers
    gc.collect()
    base = status("VmRSS:")
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")  # reset the peak (VmHWM) to the current RSS
    value, (ga, gb) = f(A, B)
    peak = status("VmHWM:")
    data = sum(x.nbytes for x in (A, B, ga, gb)) + 2048 * 2048 * 4 * 2
    print(json.dumps(dict(over=peak - base, budget=budget.nbytes, data=data,
                          const=ooc.RSS_OVERHEAD_BYTES, finite=bool(np.isfinite(value)))))
    """
)


@pytest.mark.skipif(not os.path.exists("/proc/self/clear_refs"), reason="needs Linux /proc")
def test_peak_rss_stays_within_budget_plus_constant(tmp_path):
    env = dict(os.environ, GRADPIPE_SCRATCH=str(tmp_path), JAX_PLATFORMS="cpu")
    out = subprocess.run(
        [sys.executable, "-c", RSS_SCRIPT], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr[-2000:]
    import json

    r = json.loads(out.stdout.strip().splitlines()[-1])
    assert r["finite"]
    assert r["data"] >= 5 * r["budget"]  # a problem several times the budget
    assert r["over"] <= r["budget"] + r["const"], r


@pytest.mark.parametrize("op_name", ["sum", "mean"])
def test_plan_counts_a_float16_sum_accumulator_at_float32(op_name):
    """float16 sums accumulate in float32: the partial, combined and written tiles are
    4 bytes an element, and the chosen tile must fit the budget at that size."""
    from gradpipe.ooc.ops._reduce import Mean, Sum

    op = (Sum if op_name == "sum" else Mean)((1,), False)
    budget = ooc.MemoryBudget("1MiB")
    x = _Shape((2**20, 2), np.float16)
    rows, cols = Driver(budget)._plan(op, [x], "forward")[2]
    assert op.accumulator_dtype(x.dtype) == np.float32
    assert 2 * (rows * cols * 2) + 3 * (rows * 4) <= budget.nbytes
    # and the plan is not needlessly thin
    assert rows >= 2**14
