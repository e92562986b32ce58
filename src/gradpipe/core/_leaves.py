"""The leaves of the containers a pipeline passes between steps."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

__all__ = ["iter_leaves"]


def iter_leaves(tree: Any) -> Iterator[Any]:
    """Every value inside ``tree`` that is not a tuple, list or dict, in order."""
    if isinstance(tree, (list, tuple)):
        for item in tree:
            yield from iter_leaves(item)
    elif isinstance(tree, dict):
        for item in tree.values():
            yield from iter_leaves(item)
    else:
        yield tree
