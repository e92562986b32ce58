"""A loss's pass on a device hands its loss and gradients to JAX while its last
tiles still run there (`_running_tails`), as a jitted function returns before its
program ran: nothing is waited for after the last piece is queued. Those tiles'
blocks are kept until they ran: given back by a thread of its own once the device
is done, and at the latest before the next pass plans or before a file they read
is written. Here the device is JAX's CPU (`make test-device` runs these on the
accelerator)."""

from __future__ import annotations

import gc
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from test_compute_device import (
    BUDGET,
    TEST_DEVICE,
    K,
    _close,
    _data,
    _least_squares,
    _mlp,
    _params,
    step_of,
)

from gradpipe import ooc
from gradpipe.ooc.execution import _one_pass, _running_tails, _tile_program
from gradpipe.ooc.planning import _chain_read
from gradpipe.ooc.storage._paged_file import PagedFile


@pytest.fixture
def events(monkeypatch):
    """What the pass does, in order: ``launch`` (a piece queued), ``settle`` (a
    piece waited for), ``write <path>`` (a file written); and the tails' own
    thread's work, held (run only where gradpipe must wait for it)."""
    got: list[str] = []
    launch, settle, write = _one_pass.launch, _tile_program.Launched.settle, PagedFile.write
    monkeypatch.setattr(_one_pass, "launch", lambda *a: (got.append("launch"), launch(*a))[1])
    monkeypatch.setattr(
        _tile_program.Launched, "settle", lambda self: (got.append("settle"), settle(self))[1]
    )
    monkeypatch.setattr(
        PagedFile, "write", lambda f, *a: (got.append(f"write {f.path}"), write(f, *a))[1]
    )

    class Later(list):
        def submit(self, fn):
            self.append(fn)

    later = Later()
    monkeypatch.setattr(_running_tails, "_settler", lambda: later)
    yield got, later
    _running_tails.settle_all()


@pytest.mark.parametrize("name", ["least squares", "mlp"])
def test_an_eager_step_returns_before_its_last_tiles_ran(name, events):
    got, later = events
    A, y, hot = _data(11)
    build = _least_squares if name == "least squares" else _mlp
    second = y if name == "least squares" else hot
    want = jax.value_and_grad(build(jnp, jnp.asarray(A), jnp.asarray(second)))(_params())
    with ooc.MemoryBudget(BUDGET, device=TEST_DEVICE):
        X, Y = ooc.DiskArray.from_numpy(A), ooc.DiskArray.from_numpy(second)
        got.clear()
        value, grads = jax.value_and_grad(build(ooc, X, Y))(_params())
        step = list(got)
        left = step.count("launch") - step.count("settle")
        assert left >= 2 and len(later) == 1  # (the last tiles' pieces, left running)
        _close((value, grads), want)
        assert value.devices() == {jax.devices(TEST_DEVICE)[0]}
        # the next pass waits for them before it plans its own
        total = float(ooc.sum(X))
    assert got[len(step) :].count("settle") == left
    assert got.count("settle") == got.count("launch")  # (each piece waited for once)
    np.testing.assert_allclose(total, A.sum(dtype=np.float64), rtol=1e-5)


def test_a_pass_of_one_tile_returns_before_it_ran(events):
    """Small data, read in one tile: none was folded before the pass's end, and the
    step still returns before that tile's programs ran."""
    got, later = events
    A, y, _ = _data(18)
    A, y = A[:64], y[:64]
    want = jax.value_and_grad(_least_squares(jnp, jnp.asarray(A), jnp.asarray(y)))(_params())
    with ooc.MemoryBudget(BUDGET, device=TEST_DEVICE):
        X, Y = ooc.DiskArray.from_numpy(A), ooc.DiskArray.from_numpy(y)
        got.clear()
        out = jax.value_and_grad(_least_squares(ooc, X, Y))(_params())
        assert got.count("launch") >= 1 and got.count("settle") == 0 and len(later) == 1
    _close(out, want)


@pytest.mark.parametrize("how", ["set item", "renamed over"])
def test_a_write_into_the_data_waits_for_the_tiles_still_reading_it(how, events, tmp_path):
    """A write in place (``X[:10] = 0``), or a new array written under the data's
    name, first waits for the tiles that still read the data's pages (their views
    show a write into the file)."""
    got, later = events
    A, y, _ = _data(12)
    want = jax.value_and_grad(_least_squares(jnp, jnp.asarray(A), jnp.asarray(y)))(_params())
    with ooc.MemoryBudget(BUDGET, device=TEST_DEVICE):
        X = ooc.DiskArray.from_numpy(A, path=tmp_path / "X.gpa")
        Y = ooc.DiskArray.from_numpy(y)
        got.clear()
        value, grads = jax.value_and_grad(_least_squares(ooc, X, Y))(_params())
        step = len(got)
        left = got.count("launch") - got.count("settle")
        assert left >= 2 and later
        if how == "set item":
            X[:10] = 0.0
            after = got[step:]
            into = after.index(f"write {X._file.path}")  # (the write into X's own file)
            assert after[:into].count("settle") == left
        else:
            ooc.DiskArray.from_numpy(np.zeros_like(A), path=tmp_path / "X.gpa")
            assert got[step:].count("settle") == left
        assert _running_tails._tails == []
        _close((value, grads), want)  # (the data as the step read it)


def test_a_steps_last_tiles_are_given_back_once_the_device_is_done(monkeypatch):
    """The tails' own thread waits for the last tiles and gives their blocks back,
    so nothing waits for the next pass: the data's scratch file is removed once the
    caller lets go of it."""
    submitted = []
    settler = _running_tails._settler()
    monkeypatch.setattr(
        _running_tails,
        "_settler",
        lambda: type("Seen", (), {"submit": lambda _, fn: submitted.append(settler.submit(fn))})(),
    )
    A, y, _ = _data(13)
    with ooc.MemoryBudget(BUDGET, device=TEST_DEVICE):
        X, Y = ooc.DiskArray.from_numpy(A), ooc.DiskArray.from_numpy(y)
        path = X._file.path
        value, grads = jax.value_and_grad(_least_squares(ooc, X, Y))(_params())
    (done,) = submitted
    done.result(timeout=120)  # (settled by the tails' thread)
    assert _running_tails._tails == []
    del X, Y
    gc.collect()
    assert not os.path.exists(path)
    jax.block_until_ready((value, grads))


@pytest.mark.parametrize("name", ["least squares", "mlp"])
def test_an_eager_step_reads_nothing_of_the_device_on_the_host(name, monkeypatch):
    """Reading a JAX array on the host waits for every program queued on its device
    before it: an eager step reads none (not the loss's shares, not a 0-d operand's
    gradient, not the loss's cotangent, which JAX computes there behind the pass)."""
    reads = []

    def watched(read):
        def read_it(a, *args, **kwargs):
            if isinstance(a, jax.Array) and not isinstance(a, jax.core.Tracer):
                reads.append(a.shape)
            return read(a, *args, **kwargs)

        return read_it

    build, A, second, params = step_of(name, 14)
    for module, attr in ((np, "asarray"), (np, "array"), (jax, "device_get")):
        monkeypatch.setattr(module, attr, watched(getattr(module, attr)))
    with ooc.MemoryBudget(BUDGET, device=TEST_DEVICE):
        X, Y = ooc.DiskArray.from_numpy(A), ooc.DiskArray.from_numpy(second)
        out = jax.value_and_grad(build(ooc, X, Y))(params)
    assert reads == []
    monkeypatch.undo()
    want = jax.value_and_grad(build(jnp, jnp.asarray(A), jnp.asarray(second)))(params)
    _close(out, want)


def test_blocks_given_back_by_the_tails_thread_serve_the_next_steps(monkeypatch):
    """Blocks read into buffers of their own (the data's pages are half a row wide:
    no view of the file serves a tile) go back, when the tails' thread gives them,
    to the buffers the reading thread reuses: after the first step no step
    allocates a buffer, and none stays with the tails' thread outside the budget."""
    fresh = []
    empty = _chain_read._aligned.empty
    monkeypatch.setattr(
        _chain_read._aligned, "empty", lambda *a, **k: (fresh.append(a[0]), empty(*a, **k))[1]
    )
    A, y, _ = _data(15)
    want = jax.value_and_grad(_least_squares(jnp, jnp.asarray(A), jnp.asarray(y)))(_params())
    with ooc.MemoryBudget(BUDGET, device=TEST_DEVICE):
        X = ooc.DiskArray.from_numpy(A, page_shape=(256, K // 2))
        Y = ooc.DiskArray.from_numpy(y)
        for step in range(3):
            fresh.clear()
            out = jax.value_and_grad(_least_squares(ooc, X, Y))(_params())
            assert fresh if step == 0 else fresh == []
            _close(out, want)
