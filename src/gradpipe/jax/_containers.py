"""The core's containers as PyTrees: `Sequential`, `Fanout` and `Graph`.

``gradpipe.core`` never imports JAX, so its containers are plain Python objects,
and to JAX a plain object is one opaque leaf. A `JaxOperator` put in a `Fanout`, a
`Graph` or an explicitly built `Sequential` then held arrays that
``eqx.filter_grad`` never reached: an optax loop over the pipeline ran, reported a
loss, and trained nothing. Registering the three containers as PyTree nodes (when
``gradpipe.jax`` is imported, which any `JaxOperator` does) makes their steps
children, so every parameter is found wherever it sits, with paths such as
``.operators[0].w`` or ``.steps['n1'].w`` for weights.

Only the exact classes are registered; a subclass may hold more than its steps and
stays a leaf. Constants recorded in a graph are not children: a graph's constant
is configuration, not a parameter.
"""

from __future__ import annotations

from typing import Any

import jax

from gradpipe.core import Fanout, Graph, Sequential

__all__: list[str] = []

_OPERATORS = jax.tree_util.GetAttrKey("operators")
_STEPS = jax.tree_util.GetAttrKey("steps")


def _rebuilt(template: Any, **fields: Any) -> Any:
    new = object.__new__(type(template))
    new.__dict__.update(template.__dict__)
    new.__dict__.update(fields)
    return new


# -- Sequential and Fanout: the operators are the one child ---------------------------


class _Template:
    """The non-operator part of a container, equal for every copy made from it."""

    __slots__ = ("original",)

    def __init__(self, original: Any) -> None:
        _token(original)  # before any copy is made, so that the copies share it
        self.original = original

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Template) and _token(other.original) is _token(self.original)

    def __hash__(self) -> int:
        return id(_token(self.original))


def _token(container: Any) -> object:
    """An object shared by a container and every copy `jax.tree_util` makes of it,
    so that their tree structures compare equal (optax states built from the first
    copy keep matching the updated ones)."""
    token = container.__dict__.get("_pytree_token")
    if token is None:
        token = container.__dict__["_pytree_token"] = object()
    return token


def _flatten_operators(container: Any) -> tuple[tuple, Any]:
    return ((_OPERATORS, container.operators),), _Template(container)


def _unflatten_operators(template: _Template, children: Any) -> Any:
    (operators,) = children
    return _rebuilt(template.original, operators=operators)


# -- Graph: the operator of each step is a child, keyed by the step's name -----------


def _flatten_graph(graph: Graph) -> tuple[tuple, Any]:
    operators = {step["name"]: step["operator"] for step in graph.steps if "operator" in step}
    return ((_STEPS, operators),), _Template(graph)


def _unflatten_graph(template: _Template, children: Any) -> Graph:
    (operators,) = children
    original = template.original
    steps = [
        {**step, "operator": operators[step["name"]]} if "operator" in step else step
        for step in original.steps
    ]
    by_name = {step["name"]: step for step in steps}
    plan = [by_name[step["name"]] for step in original._plan]
    return _rebuilt(original, steps=steps, _plan=plan)


def _register() -> None:
    for cls in (Sequential, Fanout):
        jax.tree_util.register_pytree_with_keys(cls, _flatten_operators, _unflatten_operators)
    jax.tree_util.register_pytree_with_keys(Graph, _flatten_graph, _unflatten_graph)


_register()
