"""Detect JAX tracers without importing JAX.

`gradpipe.core` never imports JAX. When JAX has not been imported by anyone, nothing
can be traced, so there is nothing to check; when it has, a leaf is a tracer exactly
when it is an instance of ``jax.core.Tracer``.
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


def find_tracer(*args: Any, **kwargs: Any) -> Any | None:
    """The first tracer among the leaves of ``args`` and ``kwargs``, or ``None``.

    Leaves are found through tuples, lists and dicts, the containers a pipeline passes
    between steps.
    """
    tracer = _tracer_type()
    if tracer is None:
        return None
    for leaf in iter_leaves((args, kwargs)):
        if isinstance(leaf, tracer):
            return leaf
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
