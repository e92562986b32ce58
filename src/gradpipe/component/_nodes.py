"""The tree of nodes a `Component` reads from its pydantic models (arrays, static
fields, nested models, lists, dicts, optionals) to flatten its inputs and outputs,
and the flat description of its leaves (`LeafSpec`, `leaf_specs`)."""

from __future__ import annotations

import functools
import types
from dataclasses import dataclass
from typing import Annotated, Any, Union, get_args, get_origin

import pydantic

from ._paths import join_name
from ._schema import DIFFERENTIABLE, ArraySpec, array_spec

__all__ = [
    "ArrayNode",
    "DictNode",
    "LeafSpec",
    "ListNode",
    "ModelNode",
    "Node",
    "OptionalNode",
    "StaticNode",
    "build_node",
    "leaf_specs",
    "model_node",
]


# -- nodes: what a Component reads from a model ----------------------------------


@dataclass(frozen=True, eq=False)
class ArrayNode:
    spec: ArraySpec
    differentiable: bool


@dataclass(frozen=True, eq=False)
class StaticNode:
    annotation: Any

    @functools.cached_property
    def _adapter(self) -> pydantic.TypeAdapter:
        return pydantic.TypeAdapter(self.annotation)

    def validate(self, value: Any) -> Any:
        """``value`` validated as the field's type (used by `abstract_eval`)."""
        return self._adapter.validate_python(value)


@dataclass(frozen=True, eq=False)
class ModelNode:
    model: type[pydantic.BaseModel]
    fields: tuple[tuple[str, Node], ...]


@dataclass(frozen=True, eq=False)
class ListNode:
    item: Node


@dataclass(frozen=True, eq=False)
class DictNode:
    value: Node


@dataclass(frozen=True, eq=False)
class OptionalNode:
    inner: Node


Node = ArrayNode | StaticNode | ModelNode | ListNode | DictNode | OptionalNode


def _has_arrays(node: Node) -> bool:
    return not isinstance(node, StaticNode)


def build_node(annotation: Any, where: str) -> Node:
    """The node for a field annotation; ``where`` names the field in errors."""
    spec = array_spec(annotation)
    if spec is not None:
        return ArrayNode(spec, DIFFERENTIABLE in annotation.__metadata__)
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Annotated:
        if DIFFERENTIABLE in annotation.__metadata__:
            raise TypeError(f"{where}: Differentiable[...] applies to Array[...] fields only.")
        return build_node(args[0], where)
    if isinstance(annotation, type) and issubclass(annotation, pydantic.BaseModel):
        return model_node(annotation, where)
    if origin is list:
        item = build_node(args[0] if args else Any, f"{where}[*]")
        return ListNode(item) if _has_arrays(item) else StaticNode(annotation)
    if origin is dict:
        value = build_node(args[1] if args else Any, f"{where}[*]")
        if not _has_arrays(value):
            return StaticNode(annotation)
        if args[0] is not str:
            raise TypeError(f"{where}: a dict holding arrays needs str keys, got {args[0]!r}.")
        return DictNode(value)
    if origin in (Union, types.UnionType):
        arms = [a for a in args if a is not type(None)]
        nodes = [build_node(a, where) for a in arms]
        if not any(_has_arrays(n) for n in nodes):
            return StaticNode(annotation)
        if len(arms) == 1 and len(args) == 2:
            return OptionalNode(nodes[0])
        raise TypeError(
            f"{where}: a union holding arrays or models is only supported as "
            f"'X | None'; got {annotation!r}."
        )
    if origin in (tuple, set, frozenset) and any(
        _has_arrays(build_node(a, where)) for a in args if a is not Ellipsis
    ):
        raise TypeError(f"{where}: put arrays in a list, dict or model, not in {origin.__name__}.")
    return StaticNode(annotation)


def model_node(model: type[pydantic.BaseModel], where: str = "") -> ModelNode:
    fields = []
    for name, info in model.model_fields.items():
        annotation: Any = info.annotation  # a type, or a typing form once Annotated
        if info.metadata:
            annotation = Annotated[(annotation, *info.metadata)]
        fields.append((name, build_node(annotation, join_name(where, name))))
    return ModelNode(model, tuple(fields))


# -- flat description ------------------------------------------------------------


@dataclass(frozen=True)
class LeafSpec:
    """One leaf of a component's inputs or outputs, as `Component.input_spec` lists it.

    - `path`: the path pattern, ``[*]`` standing for any list index or dict key.
    - `kind`: ``"array"`` or ``"static"``.
    - `dtype`: the dtype name of an array (``None`` for a static leaf).
    - `shape`: sizes, ``None`` for any size and ``...`` for any number of axes.
    - `differentiable`: whether gradient endpoints accept this leaf.
    - `optional`: whether the leaf (or a model holding it) may be ``None``.
    - `annotation`: the Python type of a static leaf, as text.
    """

    path: str
    kind: str
    dtype: str | None
    shape: tuple[Any, ...] | None
    differentiable: bool
    optional: bool = False
    annotation: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict; ``...`` in a shape becomes the string ``"..."``."""
        shape = None if self.shape is None else ["..." if s is ... else s for s in self.shape]
        return {
            "path": self.path,
            "kind": self.kind,
            "dtype": self.dtype,
            "shape": shape,
            "differentiable": self.differentiable,
            "optional": self.optional,
            "annotation": self.annotation,
        }


def leaf_specs(node: Node, path: str = "", optional: bool = False) -> list[LeafSpec]:
    """Every leaf under ``node``, in the order a Component flattens them."""
    if isinstance(node, ArrayNode):
        return [
            LeafSpec(
                path, "array", node.spec.dtype.name, node.spec.shape, node.differentiable, optional
            )
        ]
    if isinstance(node, StaticNode):
        text = getattr(node.annotation, "__name__", None) or repr(node.annotation)
        return [LeafSpec(path, "static", None, None, False, optional, text)]
    if isinstance(node, ModelNode):
        return [
            spec
            for name, child in node.fields
            for spec in leaf_specs(child, join_name(path, name), optional)
        ]
    if isinstance(node, ListNode):
        return leaf_specs(node.item, f"{path}[*]", optional)
    if isinstance(node, DictNode):
        return leaf_specs(node.value, f"{path}[*]", optional)
    return leaf_specs(node.inner, path, True)
