"""Paths of leaves in nested inputs and outputs, spelled as `gradpipe.component` does.

Model fields join with ``.``, list items are ``[i]`` and dict entries ``[key]``
(``"layers[0].w"``, ``"bands[red]"``). A plain Python dict on the client could be
either a model or a dict field; the component's leaf specs decide: a dict whose
path pattern is followed by ``[*]`` in some spec is a dict field.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from gradpipe.component._paths import join_index, join_key, join_name, path_pattern

__all__ = ["flatten", "is_differentiable_path", "keyed_prefixes", "unflatten"]


def keyed_prefixes(spec_paths: Iterable[str]) -> frozenset[str]:
    """The path patterns of dict fields, read from leaf-spec patterns."""
    out = set()
    for pattern in spec_paths:
        start = 0
        while (k := pattern.find("[*]", start)) >= 0:
            out.add(pattern[:k])
            start = k + 3
    return frozenset(out)


def _join(path: str, key: Any, keyed: frozenset[str]) -> str:
    if isinstance(key, int):
        return join_index(path, key)
    if path and path_pattern(path) in keyed:
        return join_key(path, key)
    return join_name(path, key)


def _container(node: Any, is_leaf: Callable[[Any], bool] | None) -> bool:
    return isinstance(node, dict | list | tuple) and not (is_leaf and is_leaf(node))


def flatten(
    tree: Any,
    keyed: frozenset[str] = frozenset(),
    is_leaf: Callable[[Any], bool] | None = None,
    path: str = "",
) -> list[tuple[str, Any]]:
    """``[(path, leaf), ...]`` in a fixed order (dict insertion order, list order)."""
    if not _container(tree, is_leaf):
        return [(path, tree)]
    items = tree.items() if isinstance(tree, dict) else enumerate(tree)
    out: list[tuple[str, Any]] = []
    for key, child in items:
        out.extend(flatten(child, keyed, is_leaf, _join(path, key, keyed)))
    return out


def unflatten(
    tree: Any,
    values: dict[str, Any],
    keyed: frozenset[str] = frozenset(),
    is_leaf: Callable[[Any], bool] | None = None,
    path: str = "",
) -> Any:
    """A copy of ``tree`` with the leaf at each path in ``values`` replaced."""
    if not _container(tree, is_leaf):
        return values.get(path, tree)
    if isinstance(tree, dict):
        return {
            k: unflatten(v, values, keyed, is_leaf, _join(path, k, keyed)) for k, v in tree.items()
        }
    return [unflatten(v, values, keyed, is_leaf, _join(path, i, keyed)) for i, v in enumerate(tree)]


def is_differentiable_path(path: str, differentiable: Iterable[str]) -> bool:
    """Whether a concrete leaf path matches one of the spec patterns."""
    general = path_pattern(path)
    return any(general == p for p in differentiable)
