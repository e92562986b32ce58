"""Writing operations: BlockParallelOp + make_op, CustomOp; I/O accounting; progress."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gradpipe import ooc


@dataclasses.dataclass(frozen=True)
class ScaledRowSum(ooc.BlockParallelOp):
    """``factor * x.sum(axis=1)`` with a 1-column output."""

    factor: float = 1.0

    def output_shape(self, s):
        return (s[0], 1)

    def reduction_shape(self, s):
        return (s[1],)

    def index_map(self, out_r, red_r, s):
        return ((out_r[0], red_r[0]),)

    def forward_block(self, x):
        return self.factor * x.sum(axis=1, keepdims=True)

    def backward_block(self, g, x):
        return (np.broadcast_to(self.factor * g, x.shape).copy(),)


scaled_row_sum = ooc.make_op(ScaledRowSum)


def test_make_op_builds_a_documented_differentiable_function(rng, tiny_budget):
    assert scaled_row_sum.__name__ == "scaled_row_sum"
    assert "factor" in scaled_row_sum.__doc__
    X = rng.standard_normal((31, 29)).astype(np.float32)
    x = ooc.DiskArray.from_numpy(X)
    np.testing.assert_allclose(
        scaled_row_sum(x, factor=3.0).to_numpy(force=True), 3 * X.sum(1, keepdims=True), rtol=1e-5
    )
    loss = lambda x: ooc.sum(ooc.square(scaled_row_sum(x, factor=3.0)))
    g = jax.jit(jax.grad(loss))(x)
    want = jax.grad(lambda x: jnp.sum((3 * x.sum(1)) ** 2))(X)
    np.testing.assert_allclose(g.to_numpy(force=True), want, rtol=1e-4)


def test_make_op_rejects_other_classes():
    with pytest.raises(TypeError, match="BlockParallelOp or CustomOp"):
        ooc.make_op(int)


@dataclasses.dataclass(frozen=True)
class CumSumRows(ooc.CustomOp):
    """Cumulative sum down the rows: not block parallel (each block needs a carry)."""

    def output_shape(self, s):
        return s

    def forward(self, driver, x):
        out = driver.allocate(x.shape, x.dtype)
        carry = np.zeros(x.shape[1:], x.dtype)
        for start in range(0, x.shape[0], 4):
            r = (slice(start, min(start + 4, x.shape[0])), slice(0, x.shape[1]))
            block = np.cumsum(driver.read(x, r), axis=0) + carry
            out.write(r, block)
            carry = block[-1]
        return out.commit()

    def backward(self, driver, inputs, output, g, wants):
        (x,) = inputs
        out = driver.allocate(x.shape, x.dtype)
        carry = np.zeros(x.shape[1:], x.dtype)
        for stop in range(x.shape[0], 0, -4):
            r = (slice(max(stop - 4, 0), stop), slice(0, x.shape[1]))
            block = np.cumsum(driver.read(g, r)[::-1], axis=0)[::-1] + carry
            out.write(r, block)
            carry = block[0]
        return [out.commit()]


def test_custom_op_forward_and_backward(rng):
    cumsum_rows = ooc.make_op(CumSumRows)
    X = rng.standard_normal((10, 3))
    x = ooc.DiskArray.from_numpy(X)
    np.testing.assert_allclose(cumsum_rows(x).to_numpy(), np.cumsum(X, 0))
    W = rng.standard_normal((10, 3))
    w = ooc.DiskArray.from_numpy(W)
    with jax.enable_x64(True):  # a float64 loss is a JAX value: it needs x64
        g = jax.grad(lambda x: ooc.sum(cumsum_rows(x) * w))(x)
        want = jax.grad(lambda x: jnp.sum(jnp.cumsum(x, 0) * W))(X)
    np.testing.assert_allclose(g.to_numpy(), want, rtol=1e-10)


def test_io_is_accounted(rng, tiny_budget):
    x = ooc.DiskArray.from_numpy(rng.standard_normal((64, 64)).astype(np.float32))
    before = ooc.io_stats()
    y = ooc.exp(x).persist()  # fused: written only when asked (or read)
    d = ooc.io_stats() - before
    assert d.bytes_read >= x.nbytes and d.bytes_written >= y.nbytes
    assert d.tiles_read >= 2 and d.tiles_written >= 2


def test_progress_bar_is_off_by_default_and_can_be_turned_on(rng, tiny_budget, capsys):
    x = ooc.DiskArray.from_numpy(rng.standard_normal((64, 64)).astype(np.float32))
    ooc.exp(x).persist()
    assert "tile" not in capsys.readouterr().err
    ooc.set_progress(True)
    try:
        ooc.exp(x).persist()
    finally:
        ooc.set_progress(False)
    assert "tile" in capsys.readouterr().err


def test_next_tiles_are_read_on_a_background_thread(rng, tiny_budget, monkeypatch):
    import threading

    from gradpipe.ooc.storage import _paged_file

    x = ooc.DiskArray.from_numpy(rng.standard_normal((64, 64)).astype(np.float32))
    readers = []
    real = _paged_file.PagedFile.read

    def spy(self, region=None, out=None):
        readers.append(threading.current_thread().name)
        return real(self, region, out)

    monkeypatch.setattr(_paged_file.PagedFile, "read", spy)
    ooc.matmul(x, x)
    assert len(readers) > 2
    assert all(name.startswith("gradpipe-ooc-read") for name in readers)


@dataclasses.dataclass(frozen=True)
class Flip(ooc.BlockParallelOp):
    """``x.T``, with a forward block that is a view of the input block: the driver
    recycles input buffers, so it must copy such a result before the next read."""

    def output_shape(self, s):
        return (s[1], s[0])

    def index_map(self, out_r, red_r, s):
        return ((out_r[1], out_r[0]),)

    def forward_block(self, x):
        return x.T

    def backward_block(self, g, x):
        return (g.T,)


@dataclasses.dataclass(frozen=True)
class ColumnSumAsIs(ooc.BlockParallelOp):
    """``x.sum(axis=0)`` whose partial is the input block itself when it is one row
    tall, combined in place: an accumulator that aliases a recycled buffer."""

    def output_shape(self, s):
        return (1, s[1])

    def reduction_shape(self, s):
        return (s[0],)

    def index_map(self, out_r, red_r, s):
        return ((red_r[0], out_r[1]),)

    def forward_block(self, x):
        return x if x.shape[0] == 1 else x.sum(axis=0, keepdims=True)

    def combine(self, acc, part):
        acc += part
        return acc

    def backward_block(self, g, x):
        return (np.broadcast_to(g, x.shape).copy(),)


def test_results_that_alias_input_blocks_survive_buffer_reuse(rng):
    X = rng.standard_normal((67, 200)).astype(np.float32)
    x = ooc.DiskArray.from_numpy(X, page_shape=(1, 200))
    with ooc.MemoryBudget(4096):  # one 800-byte row a step
        np.testing.assert_array_equal(ooc.make_op(Flip)(x).to_numpy(force=True), X.T)
        # every partial is an input buffer
        got = ooc.make_op(ColumnSumAsIs)(x).to_numpy(force=True)
    np.testing.assert_allclose(got, X.sum(0, keepdims=True), rtol=1e-5)


def test_a_failed_background_write_fails_the_operation_and_leaves_nothing(rng, monkeypatch):
    from gradpipe.ooc.storage import _paged_file

    a = ooc.DiskArray.from_numpy(rng.standard_normal((32, 32)).astype(np.float32))
    before = set(ooc.get_scratch_dir().iterdir())
    real = _paged_file.PagedFile.write
    writes = []

    def failing(self, region, data):
        writes.append(1)
        if len(writes) == 2:
            raise OSError(28, "Disk full while writing (simulated)")
        return real(self, region, data)

    monkeypatch.setattr(_paged_file.PagedFile, "write", failing)
    with pytest.raises(OSError, match="simulated"), ooc.MemoryBudget(8192):
        ooc.matmul(a, a)
    # no file more; one fewer is an earlier test's garbage, collected meanwhile
    assert set(ooc.get_scratch_dir().iterdir()) <= before
