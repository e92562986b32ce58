"""Tangents and cotangents given to a component's derivative endpoints, and the
results those endpoints fill in for the leaves nothing flowed through."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ._casting import cast_problem
from ._endpoints import Selection, Signature
from ._paths import ComponentInputError, canonical_path
from ._tree import to_device

__all__ = ["fill", "inexact", "vectors"]


def inexact(selection: Selection, differentiable: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(i for i in selection.indices if i in differentiable)


def fill(selection: Selection, computed: dict[int, Any], avals: tuple[Any, ...]) -> dict[str, Any]:
    """The result per requested path: computed arrays; zeros of the leaf's dtype for
    an inexact leaf nothing flowed into; ``float0`` zeros for integer leaves."""
    result: dict[str, Any] = {}
    for path, i in selection.items:
        if i in computed:
            result[path] = computed[i]
        elif jnp.issubdtype(avals[i].dtype, jnp.inexact):
            result[path] = jnp.zeros(avals[i].shape, avals[i].dtype)
        else:
            result[path] = np.zeros(avals[i].shape, jax.dtypes.float0)
    return result


def vectors(
    sig: Signature,
    selection: Selection,
    given: Any,
    side: str,
    what: str,
    casting: str = "checked",
) -> dict[int, Any]:
    """Tangents or cotangents by leaf index, checked to match the selection exactly
    (one per leaf, however its path is spelled) and to have the shape of the leaf
    they address, cast to the leaf's dtype by the component's casting rules (a
    complex one for a real leaf, or a float64 value beyond a float32 leaf's range, is
    refused rather than changed). They may share the caller's buffers: the
    endpoint waits for its result."""
    if not isinstance(given, Mapping):
        raise ComponentInputError("", f"The {what}s must be a dict from path to array.")
    by_path: dict[str, Any] = {}
    spelled: dict[str, str] = {}
    for key, value in given.items():
        canonical = canonical_path(key, what=f"{what} path")
        if canonical in by_path:
            raise ComponentInputError(
                key,
                f"Two {what}s were given for one leaf: {spelled[canonical]!r} and {key!r} "
                f"are the same path. Give it once.",
            )
        by_path[canonical], spelled[canonical] = value, key
    paths = sig.in_paths if side == "input" else sig.out_paths
    avals = sig.in_avals if side == "input" else sig.out_avals
    wanted = {paths[i]: (name, i) for name, i in selection.items}
    for path in by_path:
        if path not in wanted:
            raise ComponentInputError(
                path, f"A {what} was given for {path!r}, which is not among the {side}s chosen."
            )
    vectors: dict[int, Any] = {}
    for canonical, (name, i) in wanted.items():
        if canonical not in by_path:
            raise ComponentInputError(name, f"The {what} for {name!r} is missing.")
        value = by_path[canonical]
        if not isinstance(value, jax.Array):
            try:
                value = np.asarray(value)
            except (TypeError, ValueError):
                value = np.asarray(None)
        if value.dtype != jax.dtypes.float0 and not (
            np.issubdtype(value.dtype, np.number)
            or value.dtype == np.bool_
            or jnp.issubdtype(value.dtype, jnp.floating)
        ):
            raise ComponentInputError(name, f"The {what} for {name!r} must be a numeric array.")
        if jnp.issubdtype(value.dtype, jnp.complexfloating) and not jnp.issubdtype(
            avals[i].dtype, jnp.complexfloating
        ):
            raise ComponentInputError(
                name,
                f"The {what} for {name!r} is complex, but that {side} is real "
                f"({np.dtype(avals[i].dtype).name}): casting would drop the imaginary part. "
                f"Pass a real array (its .real, if that is what you mean).",
            )
        if tuple(value.shape) != tuple(avals[i].shape):
            raise ComponentInputError(
                name,
                f"The {what} for {name!r} has shape {tuple(value.shape)}, expected "
                f"{tuple(avals[i].shape)} (the shape of that {side}).",
            )
        if jnp.issubdtype(avals[i].dtype, jnp.inexact):
            problem = cast_problem(value, avals[i].dtype, casting)
            if problem:
                raise ComponentInputError(name, f"The {what} for {name!r}: {problem}.")
            vectors[i] = to_device(value, avals[i].dtype, private=False)
    return vectors
