"""A stored input's block read into a buffer (its pages are not whole rows, or it is
not mapped) is handed to XLA on the CPU without a copy, as a mapped block is: a loss's
pass reads it once."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from gradpipe import ooc
from gradpipe.ooc.execution import _one_pass
from gradpipe.ooc.storage import _aligned


def test_empty_refuses_a_negative_dimension():
    with pytest.raises(ValueError, match="negative"):
        _aligned.empty((3, -1), np.float32)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int8, np.complex64])
@pytest.mark.parametrize("shape", [(), (0,), (3,), (1000, 7), (2**20,), (5, 0, 3)])
def test_empty_is_aligned_and_whole(shape, dtype):
    a = _aligned.empty(shape, dtype)
    assert a.shape == shape and a.dtype == dtype and a.flags.c_contiguous and a.flags.writeable
    assert _aligned.is_aligned(a) or a.size == 0
    a[...] = 1  # its memory is its own, all of it
    assert np.all(a == 1)


def test_an_aligned_block_is_not_copied_by_jax():
    """The property the buffers are aligned for (JAX's CPU client): an aligned
    array is computed on in place, a NumPy array of the same size is not."""
    cpu = jax.devices("cpu")[0]
    block = _aligned.empty((2048, 256), np.float32)
    block[...] = 2.0
    moved = jax.device_put(block, cpu)
    assert moved.unsafe_buffer_pointer() == block.ctypes.data
    assert float(moved[5, 7]) == 2.0


def test_a_loss_pass_gets_aligned_blocks_of_unmapped_pages(tmp_path, monkeypatch):
    """Pages of 1024 x 16 are not whole rows: each tile is read into a buffer, which
    is aligned, and so is every piece of it the pass's programs are given (rows of
    256 bytes: each piece starts on a multiple of 64 bytes into its tile)."""
    rng = np.random.default_rng(0)
    data = rng.standard_normal((8192, 64)).astype(np.float32)
    X = ooc.DiskArray.from_numpy(data, path=tmp_path / "x.gpa", page_shape=(1024, 16))
    w = jax.numpy.asarray(rng.standard_normal(64).astype(np.float32))
    given: list[np.ndarray] = []
    run = _one_pass.run
    monkeypatch.setattr(
        _one_pass, "run", lambda program, args: (given.extend(args), run(program, args))[1]
    )
    with ooc.MemoryBudget(2 * 2**20, device="host"):  # (XLA on the host's CPU)
        value, grad = jax.value_and_grad(lambda w: ooc.mean(ooc.tanh(X @ w)))(w)
    blocks = [a for a in given if isinstance(a, np.ndarray) and a.shape[1:] == (64,)]
    assert len(blocks) > 1
    assert all(_aligned.is_aligned(b) for b in blocks)
    want, want_grad = jax.value_and_grad(lambda w: jax.numpy.mean(jax.numpy.tanh(data @ w)))(w)
    np.testing.assert_allclose(value, want, rtol=1e-5)
    np.testing.assert_allclose(grad, want_grad, rtol=1e-4, atol=1e-6)
