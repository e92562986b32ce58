"""Graph nodes: the symbolic values an operator returns when called on a node."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any, NoReturn

__all__ = ["Input", "Node", "contains_node"]


class Node:
    """A value in a graph under construction.

    Calling an operator on a node (anywhere in its positional or keyword arguments,
    also inside tuples, lists and dicts) records the call and returns a new node;
    ``node[key]`` records an index into the node's value (a dict key or a tuple
    position). `Graph` turns the nodes into a runnable operator.
    """

    __slots__ = ("args", "key", "kwargs", "operator", "parent")

    def __init__(
        self,
        operator: Any = None,
        args: tuple = (),
        kwargs: dict | None = None,
        *,
        parent: Node | None = None,
        key: Hashable = None,
    ) -> None:
        self.operator = operator
        self.args = args
        self.kwargs = kwargs or {}
        self.parent = parent
        self.key = key

    def __getitem__(self, key: Hashable) -> Node:
        try:
            hash(key)
        except TypeError:
            raise TypeError(
                f"A graph node can be indexed by a dict key or a tuple position; "
                f"got an unhashable {type(key).__name__}."
            ) from None
        return Node(parent=self, key=key)

    def __bool__(self) -> bool:
        raise TypeError(
            "A graph node has no value while the graph is being built, so it cannot "
            "be used in an if statement. Use gradpipe.Branch (or "
            "gradpipe.jax.CondBranch) as a step of the graph instead."
        )

    def __iter__(self) -> NoReturn:
        raise TypeError(
            "A graph node cannot be unpacked while the graph is being built; index it "
            "instead: node[0], node[1] or node['key']."
        )

    def __repr__(self) -> str:
        if self.parent is not None:
            return f"{self.parent!r}[{self.key!r}]"
        return f"<node {type(self.operator).__name__}>"


class Input(Node):
    """A named input of a `Graph`.

    **Arguments:**

    - `name`: the input's name; the graph accepts it by position (in the order of
      ``Graph(inputs=[...])``) or as a keyword argument of that name.
    """

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        if not isinstance(name, str) or not name.isidentifier():
            raise ValueError(f"Input name must be a Python identifier, got {name!r}.")
        super().__init__()
        self.name = name

    def __repr__(self) -> str:
        return f"Input({self.name!r})"


def contains_node(tree: Any) -> bool:
    """Whether a node appears in ``tree`` (through tuples, lists and dict values)."""
    # Every operator call runs this; plain loops are about twice as fast as any()
    # over a generator, which matters for a pipeline of cheap steps.
    kind = type(tree)
    if kind is tuple or kind is list:
        for item in tree:  # noqa: SIM110
            if contains_node(item):
                return True
        return False
    if kind is dict:
        for item in tree.values():  # noqa: SIM110
            if contains_node(item):
                return True
        return False
    return isinstance(tree, Node)
