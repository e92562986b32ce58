"""Registry: content-addressed, verified, and confined to its directory."""

import json

import pytest

import gradpipe as gp
from gradpipe import Operator, Registry, RegistryError


class Scale(Operator):
    def __init__(self, factor: float = 1.0):
        self.factor = factor

    def _apply(self, x):
        return self.factor * x


def test_store_and_load_round_trip(tmp_path):
    reg = Registry(tmp_path / "reg")
    op = Scale(2.5) | gp.Identity()
    ref = reg.store(op, weights=b"\x00\x01weights", tags=["v1"])
    assert len(ref) == 64
    assert reg.store(op, weights=b"\x00\x01weights") == ref  # idempotent
    back = reg.load("v1")
    assert back(2.0) == 5.0
    assert reg.load(ref[:10])(1.0) == 2.5
    assert reg.load_weights(ref) == b"\x00\x01weights"


class Ordered(Operator):
    def __init__(self, weights: dict):
        self.weights = weights

    def _apply(self, x):
        return [w * x for w in self.weights.values()]


def test_round_trip_keeps_the_order_of_config_dicts(tmp_path):
    reg = Registry(tmp_path / "reg")
    op = Ordered({"b": 1.0, "a": 2.0})
    back = reg.load(reg.store(op))
    assert list(back.weights) == ["b", "a"]
    assert back(1.0) == op(1.0) == [1.0, 2.0]
    assert reg.store(Ordered({"a": 2.0, "b": 1.0})) != reg.store(op)


def test_address_depends_on_config_and_weights(tmp_path):
    reg = Registry(tmp_path)
    a = reg.store(Scale(1.0), weights=b"a")
    b = reg.store(Scale(1.0), weights=b"b")
    c = reg.store(Scale(2.0), weights=b"a")
    assert len({a, b, c}) == 3


def test_modified_files_fail_verification(tmp_path):
    reg = Registry(tmp_path)
    ref = reg.store(Scale(1.0), weights=b"abc")
    (tmp_path / "objects" / ref / "weights.bin").write_bytes(b"abd")
    with pytest.raises(RegistryError, match="fails its hash check"):
        reg.load_weights(ref)
    ref2 = reg.store(Scale(3.0))
    path = tmp_path / "objects" / ref2 / "config.json"
    state = json.loads(path.read_text())
    state["config"]["factor"] = 4.0
    path.write_text(json.dumps(state))
    with pytest.raises(RegistryError, match="fails its hash check"):
        reg.load(ref2)


def test_tags_move_only_with_force_and_list_by_tag(tmp_path):
    reg = Registry(tmp_path)
    a = reg.store(Scale(1.0), tags=["best"])
    b = reg.store(Scale(2.0))
    with pytest.raises(RegistryError, match="force=True"):
        reg.tag(b, "best")
    reg.tag(b, "best", force=True)
    assert reg.resolve("best") == b
    assert [e["ref"] for e in reg.list(tag="best")] == [b]
    assert {e["ref"] for e in reg.list()} == {a, b}


@pytest.mark.parametrize("name", ["../escape", "/abs", "a/b", "..", ".hidden", "", "x" * 200])
def test_names_that_could_escape_are_refused(tmp_path, name):
    reg = Registry(tmp_path / "reg")
    ref = reg.store(Scale())
    with pytest.raises(RegistryError, match="not allowed"):
        reg.tag(ref, name)
    with pytest.raises(RegistryError):
        reg.load(name)
    assert not (tmp_path / "escape").exists()


def test_unknown_reference(tmp_path):
    with pytest.raises(RegistryError, match="No registry entry"):
        Registry(tmp_path).load("nothing")


def test_unsaveable_operator_is_refused_and_nothing_is_written(tmp_path):
    reg = Registry(tmp_path)
    with pytest.raises(gp.ConfigError):
        reg.store(gp.Lambda(abs))
    assert reg.list() == []
    assert [p for p in (tmp_path / "objects").iterdir()] == []


def test_registry_never_unpickles(tmp_path):
    import pickle

    reg = Registry(tmp_path)
    ref = reg.store(Scale(1.0), weights=pickle.dumps({"a": 1}))
    assert reg.load_weights(ref) == pickle.dumps({"a": 1})  # bytes, untouched
