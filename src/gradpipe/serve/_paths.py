"""Paths of leaves in nested inputs and outputs, as the client names them.

A path joins dict keys (and model attributes) with ``.`` and list indices as
``[i]``: ``"layers[0].weight"``. It is the same form the server uses in its error
messages and its ``x-gradpipe`` leaf specs.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any

__all__ = ["flatten", "is_differentiable_path", "join", "unflatten"]


def join(path: str, key: str | int) -> str:
    """The path of child ``key`` under ``path``."""
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


def _container(node: Any, is_leaf: Callable[[Any], bool] | None) -> bool:
    return isinstance(node, dict | list | tuple) and not (is_leaf and is_leaf(node))


def flatten(
    tree: Any, is_leaf: Callable[[Any], bool] | None = None, path: str = ""
) -> list[tuple[str, Any]]:
    """``[(path, leaf), ...]`` in a fixed order (dict insertion order, list order)."""
    if not _container(tree, is_leaf):
        return [(path, tree)]
    items = tree.items() if isinstance(tree, dict) else enumerate(tree)
    out: list[tuple[str, Any]] = []
    for key, child in items:
        out.extend(flatten(child, is_leaf, join(path, key)))
    return out


def unflatten(
    tree: Any, values: dict[str, Any], is_leaf: Callable[[Any], bool] | None = None, path: str = ""
) -> Any:
    """A copy of ``tree`` with the leaf at each path in ``values`` replaced."""
    if not _container(tree, is_leaf):
        return values.get(path, tree)
    if isinstance(tree, dict):
        return {k: unflatten(v, values, is_leaf, join(path, k)) for k, v in tree.items()}
    return [unflatten(v, values, is_leaf, join(path, i)) for i, v in enumerate(tree)]


def _pattern(spec_path: str) -> re.Pattern[str]:
    # A spec path may stand for many leaves: "[*]"/"[]" any list index, "*" any key.
    escaped = re.escape(spec_path)
    escaped = escaped.replace(r"\[\*\]", r"\[\d+\]").replace(r"\[\]", r"\[\d+\]")
    escaped = escaped.replace(r"\*", r"[^.\[]+")
    return re.compile(escaped)


def is_differentiable_path(path: str, differentiable: Iterable[str]) -> bool:
    """Whether a concrete leaf path is one of the (possibly wildcard) spec paths."""
    return any(_pattern(p).fullmatch(path) for p in differentiable)
