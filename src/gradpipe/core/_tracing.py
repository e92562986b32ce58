"""Detect JAX tracers without importing JAX.

`gradpipe.core` never imports JAX. When JAX has not been imported by anyone, nothing
can be traced, so there is nothing to check; when it has, a leaf is a tracer exactly
when it is an instance of ``jax.core.Tracer``. Tracers are looked for inside every
registered PyTree too (a dataclass or ``eqx.Module`` of arrays), not only inside
tuples, lists and dicts: a state object holding tracers would otherwise slip past
the guards, and an observer would store a tracer.
"""

from __future__ import annotations

import sys
from typing import Any

from ._leaves import iter_leaves

__all__ = ["find_tracer", "is_tracer", "refuse_tracer"]


def _tracer_type() -> type | None:
    jax = sys.modules.get("jax")
    if jax is None:
        return None
    core = getattr(jax, "core", None)
    return getattr(core, "Tracer", None)


def is_tracer(value: Any) -> bool:
    """Whether ``value`` is a JAX tracer (always ``False`` when JAX is not imported)."""
    tracer = _tracer_type()
    return tracer is not None and isinstance(value, tracer)


_PLAIN = (bool, int, float, complex, str, bytes, type(None))


def find_tracer(*args: Any, **kwargs: Any) -> Any | None:
    """The first tracer among the leaves of ``args`` and ``kwargs``, or ``None``.

    Leaves are found through tuples, lists and dicts, the containers a pipeline passes
    between steps, and through any other PyTree registered with JAX.
    """
    tracer = _tracer_type()
    if tracer is None:
        return None
    tree_leaves = getattr(getattr(sys.modules["jax"], "tree_util", None), "tree_leaves", None)
    for leaf in iter_leaves((args, kwargs)):
        if isinstance(leaf, tracer):
            return leaf
        if tree_leaves is None or isinstance(leaf, _PLAIN) or hasattr(type(leaf), "__array__"):
            continue
        for inner in tree_leaves(leaf):
            if isinstance(inner, tracer):
                return inner
    return None


def refuse_tracer(operator: str, why: str, instead: str, *args: Any, **kwargs: Any) -> None:
    """Raise ``TypeError`` if any input leaf is a tracer.

    **Arguments:**

    - `operator`: the operator's name, as the user wrote it (``"Cache"``).
    - `why`: what the operator cannot do with a traced value.
    - `instead`: what to use under ``jax.jit``/``vmap``/``grad``.
    """
    if find_tracer(*args, **kwargs) is not None:
        raise TypeError(f"{operator} {why}. {instead}")
