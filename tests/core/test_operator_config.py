"""Operators: dispatch, composition and configuration round trips."""

import json
import math

import numpy as np
import pytest
import yaml

import gradpipe as gp
from gradpipe import ConfigError, Operator


class Scale(Operator):
    def __init__(self, factor: float = 1.0):
        self.factor = factor

    def _apply(self, x):
        return self.factor * x


class Options(Operator):
    def __init__(self, value):
        self.value = value

    def _apply(self, x):
        return x


class Forgetful(Operator):
    def __init__(self, hidden):
        self._hidden = hidden

    def _apply(self, x):
        return x


def test_call_runs_apply_eagerly():
    assert Scale(2.0)(3.0) == 6.0


def test_pipe_builds_flat_sequential():
    pipe = Scale(2.0) | Scale(3.0) | Scale(4.0)
    assert type(pipe) is gp.Sequential
    assert len(pipe) == 3
    assert pipe(1.0) == 24.0
    left = Scale(5.0) | (Scale(2.0) | Scale(3.0))
    assert len(left) == 3 and left(1.0) == 30.0


def test_sequential_indexing_and_slicing():
    a, b, c = Scale(2.0), Scale(3.0), Scale(4.0)
    pipe = gp.Sequential([a, b, c])
    assert pipe[1] is b
    tail = pipe[1:]
    assert type(tail) is gp.Sequential and len(tail) == 2 and tail(1.0) == 12.0
    assert list(pipe) == [a, b, c]


def test_sequential_refuses_non_operators():
    with pytest.raises(TypeError, match=r"Sequential.operators\[1\] must be an Operator"):
        gp.Sequential([Scale(), 3])


def test_summary_lists_shapes_of_each_step():
    pipe = gp.Lambda(lambda x: x.reshape(2, 3), name="reshape") | gp.Lambda(
        lambda x: x.sum(0), name="sum"
    )
    table = pipe.summary(np.zeros(6, dtype=np.float32))
    assert "Lambda(reshape)" in table and "float32[6]" in table
    assert "float32[2, 3]" in table and "float32[3]" in table
    assert "Lambda(sum)" in pipe.summary()


@pytest.mark.parametrize(
    "value",
    [None, True, 3, -2.5, "text", [1, 2], (1, (2.0, "x")), {"a": (1, [2, {"b": None}])}, []],
)
def test_config_values_round_trip_exactly_through_json_and_yaml(value):
    op = Options(value)
    for text, loader in ((op.to_json(), Operator.from_json), (op.to_yaml(), Operator.from_yaml)):
        back = loader(text)
        assert type(back) is Options
        assert back.value == value
        assert type(back.value) is type(value)
        if isinstance(value, tuple):
            assert type(back.value[1]) is tuple


@pytest.mark.parametrize(
    "value, kind",
    [
        (np.float32(2.0), "numpy.float32"),
        (np.int64(3), "numpy.int64"),
        (np.arange(3), "numpy.ndarray"),
        (print, "builtin_function_or_method"),
        ({1, 2}, "set"),
        ([1, np.float64(2.0)], "numpy.float64"),
    ],
)
def test_non_json_values_are_refused_naming_operator_and_field(value, kind):
    with pytest.raises(ConfigError, match=rf"Options\.value.*{kind}") as info:
        Options(value).state
    assert "cannot be saved" in str(info.value)


def test_non_finite_floats_and_bad_keys_are_refused():
    with pytest.raises(ConfigError, match="non-finite"):
        Options(math.nan).state
    with pytest.raises(ConfigError, match="str keys"):
        Options({1: "a"}).state
    with pytest.raises(ConfigError, match="reserved"):
        Options({"$tuple": 1}).state


def test_missing_attribute_is_a_clear_error():
    with pytest.raises(ConfigError, match=r"self\.hidden"):
        Forgetful(1).state


def test_nested_operators_round_trip():
    pipe = Scale(2.0) | Options({"k": (1, 2)}) | gp.Identity() | gp.Const((1, 2))
    back = Operator.from_json(pipe.to_json())
    assert [type(op) for op in back] == [Scale, Options, gp.Identity, gp.Const]
    assert back[1].value == {"k": (1, 2)}
    assert back(5.0) == (1, 2)


def test_lambda_refuses_to_save_with_its_position():
    pipe = Scale() | gp.Lambda(abs)
    with pytest.raises(
        ConfigError, match=r"Sequential.operators\[1\].*Lambda\(abs\).*cannot be saved"
    ):
        pipe.to_json()


def test_from_state_only_rebuilds_registered_classes():
    state = {"module": "os", "class": "system", "config": {}}
    with pytest.raises(ConfigError, match="not registered"):
        Operator.from_state(state)
    state = {"module": "subprocess", "class": "Popen", "config": {"args": "true"}}
    with pytest.raises(ConfigError, match="not registered"):
        Operator.from_state(state)


def test_yaml_loader_is_safe():
    text = "!!python/object/apply:os.system ['echo pwned']"
    with pytest.raises(yaml.YAMLError):
        Operator.from_yaml(text)


def test_state_is_plain_json():
    state = (Scale(2.0) | Options((1, "a"))).state
    assert json.loads(json.dumps(state)) == state
