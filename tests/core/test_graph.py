"""Graph: DAGs built by calling operators on input nodes."""

import numpy as np
import pytest

import gradpipe as gp
from gradpipe import Fanout, Graph, GraphError, Input, Lambda, Operator


class Add(Operator):
    def _apply(self, a, b=0.0, *, scale=1.0):
        return (a + b) * scale


class Pair(Operator):
    def _apply(self, x):
        return {"double": 2 * x, "parts": (x, -x)}


def test_diamond_graph_with_keyword_inputs():
    x = Input("x")
    left = Lambda(lambda v: v + 1)(x)
    right = Lambda(lambda v: v * 10)(x)
    out = Add()(left, right)
    g = Graph(inputs=[x], outputs=out)
    assert g(2.0) == 3.0 + 20.0
    assert g(x=2.0) == 23.0


def test_keyword_arguments_are_kept_in_graph_mode():
    x, s = Input("x"), Input("s")
    g = Graph(inputs=[x, s], outputs=Add()(x, b=1.0, scale=s))
    assert g(2.0, 10.0) == 30.0
    assert g(s=10.0, x=2.0) == 30.0


def test_indexing_dict_and_tuple_nodes():
    x = Input("x")
    pair = Pair()(x)
    g = Graph(inputs=[x], outputs={"d": pair["double"], "neg": pair["parts"][1]})
    assert g(3.0) == {"d": 6.0, "neg": -3.0}


def test_nodes_inside_containers_and_fanout():
    x = Input("x")
    stats = Fanout([Lambda(np.min), Lambda(np.max)])(x)
    joined = Lambda(lambda pair: pair[1] - pair[0])((stats[0], stats[1]))
    g = Graph(inputs=[x], outputs=joined)
    assert g(np.array([1.0, 5.0, 3.0])) == 4.0


def test_undeclared_input_is_an_error():
    x, y = Input("x"), Input("y")
    with pytest.raises(GraphError, match=r"Input\('y'\).*not among its inputs"):
        Graph(inputs=[x], outputs=Add()(x, y))


def test_missing_and_unknown_inputs_at_call():
    x, y = Input("x"), Input("y")
    g = Graph(inputs=[x, y], outputs=Add()(x, y))
    with pytest.raises(TypeError, match=r"\['y'\] missing"):
        g(1.0)
    with pytest.raises(TypeError, match="no input 'z'"):
        g(1.0, 2.0, z=3.0)
    with pytest.raises(TypeError, match="given twice"):
        g(1.0, 2.0, x=3.0)


def test_cycle_in_a_configuration_is_named():
    steps = [
        {"name": "a", "operator": Add(), "args": [{"ref": "b"}], "kwargs": {}},
        {"name": "b", "operator": Add(), "args": [{"ref": "a"}], "kwargs": {}},
    ]
    with pytest.raises(GraphError, match="cycle: a -> b -> a"):
        Graph(inputs=["x"], outputs={"ref": "a"}, steps=steps)


def test_unknown_reference_in_configuration():
    steps = [{"name": "a", "operator": Add(), "args": [{"ref": "nope"}], "kwargs": {}}]
    with pytest.raises(GraphError, match="reads 'nope'"):
        Graph(inputs=["x"], outputs={"ref": "a"}, steps=steps)


def test_graph_round_trips_through_json():
    x, s = Input("x"), Input("s")
    pair = Pair()(x)
    g = Graph(inputs=[x, s], outputs=(Add()(pair["double"], 1.0, scale=s), pair["parts"]))
    back = Operator.from_json(g.to_json())
    assert back(2.0, 3.0) == g(2.0, 3.0) == (15.0, (2.0, -2.0))


def test_graph_is_an_operator_usable_in_a_graph():
    x = Input("x")
    inner = Graph(inputs=[x], outputs=Add()(x, 1.0))
    y = Input("y")
    outer = Graph(inputs=[y], outputs=inner(inner(y)))
    assert outer(0.0) == 2.0
    assert (outer | gp.Lambda(lambda v: v * 2))(0.0) == 4.0


def test_node_cannot_be_used_as_a_bool():
    with pytest.raises(TypeError, match="Branch"):
        bool(Input("x"))
