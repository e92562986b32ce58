"""The namespace layer, as the array layer sees it.

A DiskArray's operators and methods (``x + y``, ``x[i]``, ``x.sum()``,
``np.exp(x)``) and its JAX type's cotangent addition call the array API functions
of `gradpipe.ooc`, which are built on top of this layer and so cannot be imported
by it. `gradpipe.ooc` binds them here when it is imported (`bind`). Any import of a
gradpipe.ooc module imports the package first, so they are bound before a DiskArray
exists.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from types import ModuleType
from typing import Any

__all__ = ["Namespace", "bind", "namespace"]


@dataclasses.dataclass(frozen=True)
class Namespace:
    #: `gradpipe.ooc`: what ``DiskArray.__array_namespace__`` returns.
    package: ModuleType
    #: `gradpipe.ooc.ops`: the functions operators and methods call, by name.
    ops: ModuleType
    #: Adds two cotangents of a DiskArray (``vspace_add``; `ops._cotangent_sum`).
    add_cotangents: Callable[[Any, Any], Any]
    #: ``x[key] = value``, in place.
    set_item: Callable[[Any, Any, Any], None]


_bound: list[Namespace] = []


def bind(ns: Namespace) -> None:
    """Make ``ns`` the namespace DiskArrays call (done once, by `gradpipe.ooc`)."""
    _bound[:] = [ns]


def namespace() -> Namespace:
    """The bound namespace."""
    if not _bound:
        raise RuntimeError(
            "gradpipe.ooc's array functions are not bound yet: import gradpipe.ooc first."
        )
    return _bound[0]
