"""Peak memory, one function of each family of the namespace: on an array four times
the budget, every function (and its gradient, where it has one) stays within the
budget plus `RSS_OVERHEAD_BYTES` above what the process held before.

One subprocess runs the whole table (JAX starts once); before each row it resets
the kernel's peak-RSS counter (``/proc/self/clear_refs``), so every row's peak is its
own.
"""

import json
import os
import subprocess
import sys
import textwrap

import pytest

# family -> (expression of X, a 2048 x 2048 float32 DiskArray, and `ooc`; differentiable)
TABLE = {
    "creation": ("ooc.linspace(0.0, 1.0, 2048 * 2048, dtype=ooc.float32)", False),
    "elementwise": ("ooc.exp(ooc.tanh(X) * 0.5)", True),
    "statistical": ("ooc.var(X, axis=0)", True),
    "cumulative": ("ooc.cumulative_sum(X, axis=1)", True),
    "searching": ("ooc.argmax(X, axis=0)", False),
    "utility": ("ooc.all(X > -10.0, axis=1)", False),
    "manipulation": ("ooc.reshape(X, (1024, 4096))", True),
    "concatenation": ("ooc.concat([X, X], axis=1)", True),
    "indexing": ("X[::-3, 1::2]", True),
    "gather": ("ooc.take(X, ooc.arange(2047, -1, -2), axis=0)", True),
    "linear algebra": ("ooc.tensordot(X, X[:, :64], axes=1)", True),
    "sorting": ("ooc.sort(X, axis=1)", True),
    "setitem": ("ooc.asarray(X, copy=True).__setitem__((slice(None, None, 3),), 0.0) or X", False),
    "fft": ("ooc.real(ooc.fft.rfft(X, axis=1))", True),
    "linalg extension": ("ooc.linalg.inv(ooc.reshape(X, (4096, 32, 32)))", True),
    "fused chain": ("long_chain(X)", True),
}

SCRIPT = textwrap.dedent(
    """
    import gc, json, sys, numpy as np, jax
    from gradpipe import ooc

    table = json.loads(sys.argv[1])

    def long_chain(x):
        # 48 fused steps (x read by every other one) before anything is written
        y = x
        for _ in range(16):
            y = ooc.sin(y) * 0.9 + 0.01 * x
        return y

    def status(key):
        for line in open("/proc/self/status"):
            if line.startswith(key):
                return int(line.split()[1]) * 1024

    budget = ooc.MemoryBudget("4MiB")
    ooc.set_default_budget(budget)
    rng = np.random.default_rng(0)
    X = ooc.DiskArray.from_row_blocks(
        (2048, 2048), np.float32,
        lambda a, b: rng.standard_normal((b - a, 2048), dtype=np.float32))
    small = ooc.asarray(np.ones((64, 64), np.float32))
    jax.grad(lambda a: ooc.sum(ooc.exp(a)))(small)  # JAX's one-time setup
    np.ones((512, 512), np.float32) @ np.ones((512, 512), np.float32)  # BLAS buffers
    results = {}
    for family, (expression, differentiable) in table.items():
        fn = eval("lambda X: " + expression, {"ooc": ooc, "long_chain": long_chain})
        gc.collect()
        base = status("VmRSS:")
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")  # the peak (VmHWM) restarts from the current RSS
        out = fn(X)
        if isinstance(out, ooc.DiskArray):
            out = ooc.persist(out)  # a fused result is computed when written
        if differentiable:
            grad = jax.grad(lambda x: ooc.sum(ooc.astype(fn(x), ooc.float32)))(X)
            grad = ooc.persist(grad)
            assert grad.shape == X.shape
        peak = status("VmHWM:")
        results[family] = dict(over=peak - base, shape=list(out.shape))
        del out
    print(json.dumps(dict(results=results, budget=budget.nbytes, data=X.nbytes,
                          const=ooc.RSS_OVERHEAD_BYTES)))
    """
)


@pytest.fixture(scope="module")
def peaks(tmp_path_factory):
    env = dict(
        os.environ, GRADPIPE_SCRATCH=str(tmp_path_factory.mktemp("scratch")), JAX_PLATFORMS="cpu"
    )
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, json.dumps(TABLE)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(not os.path.exists("/proc/self/clear_refs"), reason="needs Linux /proc")
@pytest.mark.parametrize("family", TABLE)
def test_each_family_stays_within_the_budget(peaks, family):
    assert peaks["data"] >= 4 * peaks["budget"]  # an input four times the budget
    row = peaks["results"][family]
    assert row["over"] <= peaks["budget"] + peaks["const"], (family, row)
