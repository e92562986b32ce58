"""A loss's pass pauses the interpreter's cyclic collector while it streams its
pieces (`gradpipe.ooc.execution._collector`), so that a full collection does not
stop the thread that feeds them; it resumes it when it ends, however it ends, and
leaves a collector the caller turned off as it was."""

from __future__ import annotations

import gc
import os
import select
import signal
import threading
import warnings
import weakref

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gradpipe import ooc
from gradpipe.ooc.execution import _collector, _one_pass

TEST_DEVICE = os.environ.get("GRADPIPE_TEST_DEVICE", "cpu")
N, K = 4096, 8


def _step(where, seen):
    """A least-squares step whose pass records per tile whether the collector runs."""
    rng = np.random.default_rng(0)
    A = rng.standard_normal((N, K)).astype(np.float32)
    y = A @ np.arange(K, dtype=np.float32)
    w = jnp.zeros(K)

    def loss(xp, X, t):
        return lambda w: xp.mean(xp.square(X @ w - t))

    want = jax.value_and_grad(loss(jnp, jnp.asarray(A), jnp.asarray(y)))(w)
    with ooc.MemoryBudget("64KiB", device=None if where == "host" else where):
        X, Y = ooc.DiskArray.from_numpy(A), ooc.DiskArray.from_numpy(y)
        got = jax.value_and_grad(loss(ooc, X, Y))(w)
    np.testing.assert_allclose(float(got[0]), float(want[0]), rtol=1e-5)
    np.testing.assert_allclose(np.asarray(got[1]), np.asarray(want[1]), rtol=1e-4, atol=1e-5)
    assert seen, "the step ran no tile in a loss's pass"


def _recording(monkeypatch):
    seen = []
    tile = _one_pass.Tile

    def recording(*a):
        seen.append(gc.isenabled())
        return tile(*a)

    monkeypatch.setattr(_one_pass, "Tile", recording)
    return seen


@pytest.mark.parametrize("where", ["host", TEST_DEVICE])
def test_a_pass_pauses_the_collector_and_resumes_it(monkeypatch, where):
    assert gc.isenabled()
    seen = _recording(monkeypatch)
    _step(where, seen)
    assert not any(seen)  # paused at every tile
    assert gc.isenabled()  # and resumed at the end


def test_a_pass_stopped_by_an_error_resumes_the_collector(monkeypatch):
    def failing(*a):
        assert not gc.isenabled()
        raise RuntimeError("a tile failed")

    monkeypatch.setattr(_one_pass, "Tile", failing)
    with pytest.raises(RuntimeError, match="a tile failed"):
        _step("host", [None])
    assert gc.isenabled()


def test_a_collector_the_caller_turned_off_is_left_off(monkeypatch):
    gc.disable()
    try:
        seen = _recording(monkeypatch)
        _step("host", seen)
        assert not any(seen) and not gc.isenabled()
    finally:
        gc.enable()


def test_passes_on_two_threads_keep_it_paused_until_the_last_ends():
    inside, leave = threading.Event(), threading.Event()

    def other():
        with _collector.collector_paused():
            inside.set()
            leave.wait(10)

    t = threading.Thread(target=other)
    t.start()
    assert inside.wait(10) and not gc.isenabled()
    with _collector.collector_paused():
        assert not gc.isenabled()
    assert not gc.isenabled()  # the other pass still runs
    leave.set()
    t.join(10)
    assert gc.isenabled()


def test_cycles_made_during_a_pass_are_collected_by_the_collector_after_it():
    """(By the collector itself, resumed: not only by an explicit `gc.collect`.)"""

    class Node:
        pass

    collected = []
    gc.callbacks.append(lambda phase, info: phase == "stop" and collected.append(1))
    try:
        with _collector.collector_paused():
            a, b = Node(), Node()
            a.other, b.other = b, a
            ref = weakref.ref(a)
            del a, b
        kept = []
        for _ in range(100_000):  # allocations enough to set off a collection
            if collected and ref() is None:
                break
            kept.append([])
        assert collected and ref() is None
    finally:
        gc.callbacks.pop()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this system")
def test_a_child_forked_during_a_pass_starts_with_its_collector_resumed():
    read, write = os.pipe()
    with _collector.collector_paused(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (JAX warns that its threads do not fork)
        assert not gc.isenabled()
        child = os.fork()
        if child == 0:  # (the child reports and leaves at once)
            os.write(write, b"on" if gc.isenabled() else b"off")
            os._exit(0)
    os.close(write)
    ready: list[int] = []
    try:
        ready, _, _ = select.select([read], [], [], 60)
        assert ready, "the forked child did not report"
        assert os.read(read, 64) == b"on"
    finally:
        os.close(read)
        if not ready:
            os.kill(child, signal.SIGKILL)
        os.waitpid(child, 0)
