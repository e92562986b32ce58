"""`random_inputs`: inputs drawn from a component's input model, for checks such as
`check_gradients` that need some point to work at."""

from __future__ import annotations

from typing import Any

import numpy as np

from ._component import Component
from ._nodes import (
    ArrayNode,
    DictNode,
    ListNode,
    ModelNode,
    Node,
    OptionalNode,
    StaticNode,
    model_node,
)
from ._paths import join_index, join_name

__all__ = ["random_inputs"]


def random_inputs(component: Component, *, seed: int = 0, size: int = 4) -> dict[str, Any]:
    """Inputs drawn from a component's input model, for `check_gradients`.

    Float arrays are uniform on [0.5, 1.5] (away from zero, so that ``log``,
    ``sqrt`` and division are defined), integers uniform on 1..3, bools fair coins;
    an axis declared ``None`` has length `size`, ``...`` stands for no axes, a list
    holds two items. A field with a default (static or optional) keeps it. A static
    field without a default, or a dict of arrays (whose keys cannot be guessed),
    gets a `ValueError` asking for the inputs.

    **Returns:** a nested dict the component accepts.
    """
    rng = np.random.default_rng(seed)
    return _draw_model(model_node(component.input_model), rng, size, "")


def _draw_model(node: ModelNode, rng: np.random.Generator, size: int, path: str) -> dict:
    drawn = {}
    for name, child in node.fields:
        where = join_name(path, name)
        info = node.model.model_fields[name]
        if not info.is_required() and isinstance(child, StaticNode | OptionalNode):
            continue
        drawn[name] = _draw(child, rng, size, where)
    return drawn


def _draw(node: Node, rng: np.random.Generator, size: int, path: str) -> Any:
    if isinstance(node, ArrayNode):
        shape = tuple(size if s is None else s for s in node.spec.shape if s is not ...)
        dtype = node.spec.dtype
        if dtype == np.bool_:
            return rng.random(shape) < 0.5
        if np.issubdtype(dtype, np.integer):
            return rng.integers(1, 4, shape).astype(dtype)
        values = rng.uniform(0.5, 1.5, shape)
        if np.issubdtype(dtype, np.complexfloating):
            values = values + 1j * rng.uniform(0.5, 1.5, shape)
        return np.asarray(values).astype(dtype)
    if isinstance(node, ModelNode):
        return _draw_model(node, rng, size, path)
    if isinstance(node, ListNode):
        return [_draw(node.item, rng, size, join_index(path, i)) for i in range(2)]
    if isinstance(node, OptionalNode):
        return _draw(node.inner, rng, size, path)
    if isinstance(node, DictNode):
        raise ValueError(
            f"The input {path!r} is a dict of arrays, whose keys cannot be drawn at random; "
            f"give the inputs (inputs=..., or --inputs FILE on the command line)."
        )
    raise ValueError(
        f"The input {path!r} is a static {getattr(node.annotation, '__name__', node.annotation)} "
        f"without a default, which cannot be drawn at random; give the inputs "
        f"(inputs=..., or --inputs FILE on the command line)."
    )
