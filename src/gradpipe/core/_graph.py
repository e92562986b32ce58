"""`Graph`: a DAG of operators, built by calling operators on `Input` nodes."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any, cast

from ._config import ConfigError
from ._node import Input, Node
from ._operator import Operator

__all__ = ["Graph", "GraphError"]


class GraphError(ValueError):
    """A graph that cannot run: a cycle, an undeclared input, an unknown reference."""


# -- the plan: a JSON-ready description of the DAG ----------------------------------
#
# A graph is stored as a list of named steps in an order that may be arbitrary (a
# hand-written configuration can list them in any order, or wrongly in a cycle):
#   {"name": "n1", "operator": op, "args": [arg, ...], "kwargs": {"k": arg}}
#   {"name": "n2", "index": ["n1", key]}          # value of n1, indexed by key
# An argument is {"ref": name}, {"value": constant}, or a container of arguments
# {"tuple": [...]}, {"list": [...]}, {"dict": {...}}. Outputs are one argument.


def _refs(arg: Any) -> list[str]:
    if "ref" in arg:
        return [arg["ref"]]
    if "value" in arg:
        return []
    for kind in ("tuple", "list"):
        if kind in arg:
            return [r for item in arg[kind] for r in _refs(item)]
    if "dict" in arg:
        return [r for item in arg["dict"].values() for r in _refs(item)]
    raise GraphError(f"Unknown graph argument {arg!r}.")


def _resolve(arg: dict, env: dict[str, Any]) -> Any:
    if "ref" in arg:
        return env[arg["ref"]]
    if "value" in arg:
        return arg["value"]
    if "tuple" in arg:
        return tuple(_resolve(item, env) for item in arg["tuple"])
    if "list" in arg:
        return [_resolve(item, env) for item in arg["list"]]
    return {k: _resolve(item, env) for k, item in arg["dict"].items()}


def _step_refs(step: dict) -> list[str]:
    if "index" in step:
        return [step["index"][0]]
    return [r for a in step["args"] for r in _refs(a)] + [
        r for a in step["kwargs"].values() for r in _refs(a)
    ]


def _topological_order(inputs: Sequence[str], steps: list[dict]) -> list[dict]:
    """The steps sorted so that each comes after what it reads; errors name the culprit."""
    by_name: dict[str, dict] = {}
    for step in steps:
        name = step["name"]
        if name in by_name or name in inputs:
            raise GraphError(f"Graph step name {name!r} is used twice.")
        by_name[name] = step
    for step in steps:
        for ref in _step_refs(step):
            if ref not in by_name and ref not in inputs:
                raise GraphError(
                    f"Graph step {step['name']!r} reads {ref!r}, which is neither a declared "
                    f"input ({list(inputs)}) nor a step. Declare it in inputs=[...]."
                )
    # Depth first, with an explicit stack: a chain of a few thousand steps is an
    # ordinary graph, and a recursive walk would hit Python's recursion limit.
    order: list[dict] = []
    done: set[str] = set(inputs)
    for step in steps:
        if step["name"] in done:
            continue
        path = [step["name"]]
        stack = [iter(_step_refs(step))]
        while stack:
            for ref in stack[-1]:
                if ref in done:
                    continue
                if ref in path:
                    cycle = [*path[path.index(ref) :], ref]
                    raise GraphError(
                        f"Graph has a cycle: {' -> '.join(cycle)}. A graph must be acyclic."
                    )
                path.append(ref)
                stack.append(iter(_step_refs(by_name[ref])))
                break
            else:
                stack.pop()
                name = path.pop()
                done.add(name)
                order.append(by_name[name])
    return order


def _nodes_in(value: Any) -> list[Node]:
    """The nodes in an argument, through tuples, lists and dict values, in order."""
    if isinstance(value, Node):
        return [value]
    if type(value) in (tuple, list):
        return [node for item in value for node in _nodes_in(item)]
    if type(value) is dict:
        return [node for item in value.values() for node in _nodes_in(item)]
    return []


def _node_inputs(node: Node) -> list[Node]:
    if node.parent is not None:
        return [node.parent]
    return [n for a in (*node.args, *node.kwargs.values()) for n in _nodes_in(a)]


class _Recorder:
    """Turns the nodes reachable from a graph's outputs into named steps."""

    def __init__(self, inputs: Sequence[Input]) -> None:
        self.names: dict[int, str] = {id(node): node.name for node in inputs}
        self.declared = {id(node) for node in inputs}
        self.input_names = [node.name for node in inputs]
        self.steps: list[dict] = []

    def arg(self, value: Any) -> dict:
        if isinstance(value, Node):
            return {"ref": self.node(value)}
        if type(value) is tuple:
            return {"tuple": [self.arg(v) for v in value]}
        if type(value) is list:
            return {"list": [self.arg(v) for v in value]}
        if type(value) is dict:
            return {"dict": {k: self.arg(v) for k, v in value.items()}}
        return {"value": value}

    def node(self, root: Node) -> str:
        """The step name of ``root``, recording it and every node it reads first.

        Depth first with an explicit stack (not recursion), so that a chain of
        thousands of steps records like a short one; names follow the same order
        as a recursive walk (arguments left to right, then the node).
        """
        if id(root) in self.names:
            return self.names[id(root)]
        self._check_declared(root)
        stack = [(root, iter(_node_inputs(root)))]
        while stack:
            current, pending = stack[-1]
            for dep in pending:
                if id(dep) not in self.names:
                    self._check_declared(dep)
                    stack.append((dep, iter(_node_inputs(dep))))
                    break
            else:
                stack.pop()
                if id(current) not in self.names:
                    self._record(current)
        return self.names[id(root)]

    def _check_declared(self, node: Node) -> None:
        if isinstance(node, Input) and id(node) not in self.names:
            raise GraphError(
                f"The graph uses {node!r}, which is not among its inputs "
                f"{self.input_names}. Add it to Graph(inputs=[...])."
            )

    def _record(self, node: Node) -> None:
        """Name ``node`` as the next step; everything it reads is named already."""
        step: dict[str, Any]
        if node.parent is not None:
            step = {"index": [self.names[id(node.parent)], node.key]}
        else:
            step = {
                "operator": node.operator,
                "args": [self.arg(a) for a in node.args],
                "kwargs": {k: self.arg(v) for k, v in node.kwargs.items()},
            }
        name = f"n{len(self.steps)}"
        self.names[id(node)] = name
        self.steps.append({"name": name, **step})


class Graph(Operator):
    """A directed acyclic graph of operators, run as one operator.

    Build it by calling operators on `Input` nodes: every call on a node records a
    step and returns a new node. A node may feed several steps (a diamond), and a
    node whose value is a dict or tuple can be indexed (``node["key"]``, ``node[0]``).

    ```python
    x, scale = Input("x"), Input("scale")
    a = Lambda(jnp.log)(x)
    parts = Fanout({"lo": Lambda(jnp.min), "hi": Lambda(jnp.max)})(a)
    spread = Lambda(lambda hi, lo, factor: factor * (hi - lo))(
        parts["hi"], parts["lo"], factor=scale
    )
    g = Graph(inputs=[x, scale], outputs={"log": a, "spread": spread})
    g(values, 2.0)           # or g(x=values, scale=2.0)
    ```

    **Arguments:**

    - `inputs`: the `Input` nodes, in positional order (or, when rebuilt from a
      configuration, their names).
    - `outputs`: a node, or a tuple/list/dict of nodes (and constants).
    - `steps`: only for rebuilding from a configuration: the named steps.

    Errors: a graph that reads an undeclared input, a step that reads an unknown
    name, and a cycle in a hand-written configuration each raise `GraphError`
    naming the culprit; calling without an input raises `TypeError` naming it.
    """

    def __init__(
        self,
        inputs: Sequence[Input | str],
        outputs: Any,
        steps: list[dict] | None = None,
    ) -> None:
        inputs = list(inputs)
        if steps is None:
            if not all(isinstance(node, Input) for node in inputs):
                raise TypeError("Graph(inputs=...) takes Input nodes, e.g. [Input('x')].")
            recorder = _Recorder(cast("list[Input]", inputs))
            out = recorder.arg(outputs)
            names, steps = recorder.input_names, recorder.steps
        else:
            names, out = [str(name) for name in inputs], outputs
        if len(set(names)) != len(names):
            raise GraphError(f"Graph input names must differ, got {names}.")
        self.inputs = names
        self.outputs = out
        self.steps = steps
        self._plan = _topological_order(names, steps)
        for ref in _refs(out):
            if ref not in names and not any(s["name"] == ref for s in steps):
                raise GraphError(f"Graph output reads unknown name {ref!r}.")

    def _bind(self, args: tuple, kwargs: dict) -> dict[str, Any]:
        if len(args) > len(self.inputs):
            raise TypeError(
                f"Graph takes {len(self.inputs)} inputs {self.inputs}, got {len(args)} "
                f"positional arguments."
            )
        env = dict(zip(self.inputs, args))
        for key, value in kwargs.items():
            if key not in self.inputs:
                raise TypeError(f"Graph has no input {key!r}; its inputs are {self.inputs}.")
            if key in env:
                raise TypeError(f"Graph input {key!r} was given twice.")
            env[key] = value
        missing = [name for name in self.inputs if name not in env]
        if missing:
            raise TypeError(
                f"Graph input(s) {missing} missing: pass them by position (in the order "
                f"{self.inputs}) or by keyword."
            )
        return env

    def _apply(self, *args: Any, **kwargs: Any) -> Any:
        env = self._bind(args, kwargs)
        for step in self._plan:
            if "index" in step:
                source, key = step["index"]
                env[step["name"]] = _index(env[source], key, step["name"])
            else:
                call_args = [_resolve(a, env) for a in step["args"]]
                call_kwargs = {k: _resolve(a, env) for k, a in step["kwargs"].items()}
                env[step["name"]] = step["operator"](*call_args, **call_kwargs)
        return _resolve(self.outputs, env)

    def get_config(self) -> dict[str, Any]:
        """The graph's inputs, outputs and steps (see `Operator.get_config`).

        Raises `ConfigError` naming the step when a constant argument holds an operator.
        """
        for step in self.steps:
            for arg in [*step.get("args", []), *step.get("kwargs", {}).values()]:
                _check_constants(arg, step["name"])
        return {"inputs": list(self.inputs), "outputs": self.outputs, "steps": self.steps}


def _check_constants(arg: dict, step: str) -> None:
    if "value" in arg and isinstance(arg["value"], Operator):
        raise ConfigError(f"Graph step {step!r} has an operator as a constant argument.")


def _index(value: Any, key: Hashable, name: str) -> Any:
    try:
        return value[key]
    except (KeyError, IndexError, TypeError) as error:
        raise GraphError(
            f"Graph step {name!r} indexes a {type(value).__name__} with {key!r}: {error!r}."
        ) from None
