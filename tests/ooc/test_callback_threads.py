"""A compiled program's host work may run on a thread the caller's ``with
jax.enable_x64(True)`` block does not reach (XLA's own threads): its 64-bit results
must still arrive as 64-bit values, on every thread."""

import threading

import jax
import numpy as np
import pytest

from gradpipe import ooc


def _on_another_thread(fn, *args):
    out = {}

    def run():
        try:
            out["value"] = fn(*args)
        except Exception as e:  # handed to the test's thread
            out["error"] = e

    t = threading.Thread(target=run)
    t.start()
    t.join()
    if "error" in out:
        raise out["error"]
    return out["value"]


@pytest.mark.parametrize(
    "dtype", ["float64", "int64", "uint64", "complex128", "complex64", "float32", "int32"]
)
def test_a_64_bit_result_of_a_program_compiled_under_x64_on_any_thread(dtype):
    data = (np.arange(12).reshape(3, 4) * (1 + 1j if dtype.startswith("complex") else 1)).astype(
        dtype
    )

    def total(x):
        return ooc.sum(x) * 2

    with jax.enable_x64(True), ooc.MemoryBudget(4096):
        x = ooc.DiskArray.from_numpy(data)
        compiled = jax.jit(total).lower(x).compile()
        # this thread has x64 on; a new one has JAX's default (off)
        got = _on_another_thread(compiled, x)
        here = compiled(x)
    assert here.dtype == np.sum(data).dtype  # NumPy's: a sum of int32 is int64
    assert got.dtype == here.dtype
    assert np.asarray(got) == np.asarray(here) == data.sum() * 2


def test_a_float64_gradient_computed_on_another_thread():
    data = np.linspace(-1, 1, 24).reshape(4, 6)
    with jax.enable_x64(True), ooc.MemoryBudget(4096):
        x = ooc.DiskArray.from_numpy(data)
        s = jax.numpy.float64(0.5)
        grad = jax.jit(jax.value_and_grad(lambda s, x: ooc.mean(ooc.square(x * s)))).lower(s, x)
        value, g = _on_another_thread(grad.compile(), s, x)
    assert value.dtype == np.float64 and g.dtype == np.float64
    np.testing.assert_allclose(value, np.mean((data * 0.5) ** 2), rtol=1e-12)
    np.testing.assert_allclose(g, np.mean(2 * data**2 * 0.5), rtol=1e-12)
