"""Branch, Switch and the observation operators, run eagerly."""

import threading

import numpy as np
import pytest

import gradpipe as gp
from gradpipe import Branch, Lambda, Profile, ShapeTrace, Sink, Snapshot, Switch, Tap

double = Lambda(lambda x: 2 * x, name="double")
negate = Lambda(lambda x: -x, name="negate")


def test_branch_picks_by_predicate():
    b = Branch(lambda x: x > 0, double, negate)
    assert b(3.0) == 6.0
    assert b(-3.0) == 3.0


def test_switch_picks_by_index_and_refuses_out_of_range():
    s = Switch(lambda x: int(x) % 3, [double, negate, gp.Identity()])
    assert s(4.0) == -4.0
    assert s(5.0) == 5.0
    bad = Switch(lambda x: 7, [double])
    with pytest.raises(IndexError, match="returned 7"):
        bad(1.0)
    with pytest.raises(TypeError, match="must return an int"):
        Switch(lambda x: 0.5, [double])(1.0)


def test_tap_sees_every_value_and_passes_it_through():
    seen = []
    pipe = double | Tap(seen.append) | negate
    assert pipe(1.0) == -2.0
    assert pipe(2.0) == -4.0
    assert seen == [2.0, 4.0]


def test_sink_collects_thread_safely():
    sink = Sink()

    def work(start):
        for i in range(200):
            sink(start + i)

    threads = [threading.Thread(target=work, args=(1000 * t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(sink.items) == sorted(1000 * t + i for t in range(4) for i in range(200))
    sink.clear()
    assert sink.items == []


def test_snapshot_captures_by_name_and_clears():
    snap = Snapshot()
    pipe = double | snap.at("doubled") | negate | snap.at("final")
    pipe(np.array([1.0, 2.0]))
    np.testing.assert_array_equal(snap["doubled"], [2.0, 4.0])
    np.testing.assert_array_equal(snap["final"], [-2.0, -4.0])
    snap.clear()
    with pytest.raises(KeyError, match="no capture 'doubled'"):
        snap["doubled"]


def test_profile_reports_calls():
    prof = Profile()
    pipe = prof.wrap(double) | prof.wrap(negate, name="neg")
    for _ in range(3):
        pipe(1.0)
    assert prof.stats["Lambda(double)"]["calls"] == 3
    assert prof.stats["neg"]["calls"] == 3
    report = prof.report()
    assert "neg" in report and "mean ms" in report


def test_shape_trace_records_shapes():
    trace = ShapeTrace()
    (trace | double)(np.zeros((2, 3), np.float32))
    assert trace.records == ["float32[2, 3]"]


def test_live_objects_refuse_to_save():
    with pytest.raises(gp.ConfigError, match="live Snapshot"):
        Snapshot().at("z").state
    with pytest.raises(gp.ConfigError, match="live Profile"):
        Profile().wrap(double).state


def test_profile_waits_for_arrays_inside_pytrees():
    import dataclasses

    import jax
    import jax.numpy as jnp

    @jax.tree_util.register_dataclass
    @dataclasses.dataclass
    class State:
        value: jax.Array

    waited = []
    original = jax.block_until_ready

    def spy(tree):
        waited.append(tree)
        return original(tree)

    prof = Profile()
    op = prof.wrap(Lambda(lambda x: State(jnp.sin(x))))
    jax.block_until_ready = spy
    try:
        out = op(jnp.ones(3))
    finally:
        jax.block_until_ready = original
    assert waited and waited[0] is out
    assert prof.stats["Lambda(<lambda>)"]["calls"] == 1
