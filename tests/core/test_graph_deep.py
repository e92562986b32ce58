"""Deep graphs: a chain of thousands of steps builds, runs, saves and loads."""

import sys

import gradpipe as gp
from gradpipe import Graph, GraphError, Input


class Inc(gp.Operator):
    def __init__(self, by: int = 1):
        self.by = by

    def _apply(self, x):
        return x + self.by


def _chain(n):
    x = Input("x")
    node = x
    for _ in range(n):
        node = Inc()(node)
    return Graph(inputs=[x], outputs=node)


def test_a_chain_deeper_than_the_recursion_limit(tmp_path):
    n = sys.getrecursionlimit() + 500
    graph = _chain(n)
    assert graph(0) == n
    back = gp.Graph.from_json(graph.to_json())
    assert back(1) == n + 1
    reg = gp.Registry(tmp_path)
    assert reg.load(reg.store(graph))(2) == n + 2


def test_a_deep_hand_written_plan_in_reverse_order_sorts_without_recursion():
    n = sys.getrecursionlimit() + 500
    steps = [
        {"name": f"s{i}", "operator": Inc(), "args": [{"ref": f"s{i - 1}" if i else "x"}],
         "kwargs": {}}
        for i in range(n)
    ][::-1]  # fmt: skip
    graph = Graph(inputs=["x"], outputs={"ref": f"s{n - 1}"}, steps=steps)
    assert graph(0) == n


def test_a_long_cycle_is_named():
    n = 3000
    steps = [
        {"name": f"s{i}", "operator": Inc(), "args": [{"ref": f"s{(i + 1) % n}"}], "kwargs": {}}
        for i in range(n)
    ]
    try:
        Graph(inputs=["x"], outputs={"ref": "s0"}, steps=steps)
    except GraphError as error:
        assert "cycle" in str(error) and "s0 -> s1 -> s2" in str(error)
    else:
        raise AssertionError("a cycle was accepted")


def test_step_names_follow_argument_order():
    x, y = Input("x"), Input("y")
    a = Inc(1)(x)
    b = Inc(2)(y)
    both = gp.Lambda(lambda p, q: (p, q))(a, q=b)
    graph = Graph(inputs=[x, y], outputs=both)
    assert [s["name"] for s in graph.steps] == ["n0", "n1", "n2"]
    assert graph.steps[0]["operator"].by == 1 and graph.steps[1]["operator"].by == 2
    assert graph(0, 0) == (1, 2)


def test_an_undeclared_input_deep_in_a_chain_is_named():
    x, hidden = Input("x"), Input("hidden")
    node = Inc()(hidden)
    for _ in range(2000):
        node = Inc()(node)
    try:
        Graph(inputs=[x], outputs=gp.Lambda(lambda a, b: a + b)(x, node))
    except GraphError as error:
        assert "Input('hidden')" in str(error)
    else:
        raise AssertionError("an undeclared input was accepted")
