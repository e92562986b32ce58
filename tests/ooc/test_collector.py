"""A loss's pass leaves the objects that existed when it started out of the
interpreter's cyclic collections (`gradpipe.ooc.execution._collector`), so that a
full collection does not stop the thread that feeds the pieces; it hands them back
when it ends, however it ends, and leaves a heap the caller froze, or a collector
the caller turned off, as they were."""

from __future__ import annotations

import gc
import os
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
    """A least-squares step whose pass records the heap's frozen count per tile."""
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
        seen.append(gc.get_freeze_count())
        return tile(*a)

    monkeypatch.setattr(_one_pass, "Tile", recording)
    return seen


@pytest.mark.parametrize("where", ["host", TEST_DEVICE])
def test_a_pass_freezes_the_heap_it_starts_with_and_hands_it_back(monkeypatch, where):
    assert gc.get_freeze_count() == 0 and gc.isenabled()
    seen = _recording(monkeypatch)
    _step(where, seen)
    assert min(seen) > 0  # every tile with the older objects left out
    assert gc.get_freeze_count() == 0  # and handed back at the end


def test_a_pass_stopped_by_an_error_hands_the_heap_back(monkeypatch):
    def failing(*a):
        assert gc.get_freeze_count() > 0
        raise RuntimeError("a tile failed")

    monkeypatch.setattr(_one_pass, "Tile", failing)
    with pytest.raises(RuntimeError, match="a tile failed"):
        _step("host", [None])
    assert gc.get_freeze_count() == 0


def test_a_heap_the_caller_froze_stays_frozen(monkeypatch):
    """(A process about to fork freezes its heap: a pass meanwhile unfreezes none of
    it.)"""
    gc.freeze()
    try:
        seen = _recording(monkeypatch)
        _step("host", seen)
        assert min(seen) > 0 and gc.get_freeze_count() > 0  # (its objects still frozen)
    finally:
        gc.unfreeze()


def test_a_collector_the_caller_turned_off_is_left_off(monkeypatch):
    gc.disable()
    try:
        seen = _recording(monkeypatch)
        _step("host", seen)
        assert set(seen) == {0} and not gc.isenabled()
    finally:
        gc.enable()


def test_passes_on_two_threads_keep_the_heap_frozen_until_the_last_ends():
    inside, leave = threading.Event(), threading.Event()

    def other():
        with _collector.heap_frozen():
            inside.set()
            leave.wait(10)

    t = threading.Thread(target=other)
    t.start()
    assert inside.wait(10)
    frozen = gc.get_freeze_count()
    with _collector.heap_frozen():
        assert gc.get_freeze_count() >= frozen > 0
    assert gc.get_freeze_count() > 0  # the other pass still runs
    leave.set()
    t.join(10)
    assert gc.get_freeze_count() == 0


def test_cycles_made_during_a_pass_are_collected_by_the_collector_itself():
    """(Not only by an explicit `gc.collect`: the collector stays on.)"""

    class Node:
        pass

    collected = []
    gc.callbacks.append(lambda phase, info: phase == "stop" and collected.append(1))
    try:
        with _collector.heap_frozen():
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
def test_a_child_forked_during_a_pass_starts_with_its_heap_handed_back():
    read, write = os.pipe()
    with _collector.heap_frozen(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (JAX warns that its threads do not fork)
        assert gc.get_freeze_count() > 0
        child = os.fork()
        if child == 0:  # (the child reports and leaves at once)
            os.write(write, str(gc.get_freeze_count()).encode())
            os._exit(0)
    os.close(write)
    assert os.read(read, 64) == b"0"
    os.close(read)
    os.waitpid(child, 0)
