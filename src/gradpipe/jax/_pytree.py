"""`JaxOperator` and `JaxSequential`: operators that are also equinox Modules.

A plain `Operator` is an ordinary Python object, so JAX sees a whole pipeline as one
opaque leaf and ``eqx.filter_grad`` finds nothing to differentiate. Making each
operator an ``eqx.Module`` and the container one too turns the pipeline into a PyTree
whose array fields are leaves: gradients reach every operator's parameters, optax
updates them, ``eqx.tree_at`` swaps a step, and ``jax.vmap`` maps over parameters.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from typing import Any, Self

import equinox as eqx
import jax

from gradpipe.core import ConfigError, Operator, Sequential
from gradpipe.core._describe import describe
from gradpipe.core._operator import check_operators

from ._weights import (
    array_spec,
    is_array_spec,
    placeholder_array,
    serialize_weights,
    with_weights,
)

__all__ = ["JaxOperator", "JaxSequential"]

_CONFIG_SCALARS = (bool, int, float, complex, str)


def _is_array(value: Any) -> bool:
    return eqx.is_array(value)


def _replace_in_config(value: Any, match: Callable[[Any], bool], new: Callable[[Any], Any]) -> Any:
    """``value`` with each part that ``match``es replaced by ``new(part)``, looking
    through lists, tuples and dicts (the containers a configuration may hold)."""
    if match(value):
        return new(value)
    if type(value) in (list, tuple):
        return type(value)(_replace_in_config(v, match, new) for v in value)
    if type(value) is dict:
        return {k: _replace_in_config(v, match, new) for k, v in value.items()}
    return value


def _static_fields(cls: type) -> set[str]:
    return {f.name for f in dataclasses.fields(cls) if f.metadata.get("static", False)}


class JaxOperator(Operator, eqx.Module):
    """An `Operator` that is an equinox Module: a PyTree whose arrays are leaves.

    Declare array fields (parameters) as ordinary fields and configuration fields
    (numbers, strings, flags) with ``eqx.field(static=True)``. Static fields become
    part of the PyTree structure, so two operators with the same configuration and
    array shapes share one compiled function; a configuration value left as a leaf
    is refused when the operator is built, because under ``jax.jit`` it would be
    traced and under ``eqx.filter_jit`` it would recompile for every new value.

    Configuration and weights are separate. `get_config` (and so `state`, JSON and
    the registry) records each array field as ``{"shape", "dtype"}`` only (plus
    ``"weak_type": true`` for a weakly typed one such as ``jnp.asarray(0.5)``); the
    values travel as a blob from `serialize_weights` and come back with
    `with_weights`. An operator rebuilt from its state holds NaN placeholders until
    its weights are loaded.

    A custom ``__init__`` works as for any `Operator`: store each parameter under
    its own name.

    ```python
    class Invert(JaxOperator):
        log_k: jax.Array

        def _apply(self, y):
            return -jnp.log(y) / jnp.exp(self.log_k)

    op = Invert(jnp.log(K))
    eqx.filter_grad(lambda op, y: jnp.sum(op(y)))(op, y).log_k   # d/d log k
    json.dumps(op.state)   # {"config": {"log_k": {"shape": [5], "dtype": "float32"}}, ...}
    ```

    Equality and hashing are by identity, as for every `Operator`: ``jax.jit(op)``
    then compiles ``op`` with its arrays as constants. Compare two operators'
    values with ``eqx.tree_equal``.
    """

    def __check_init__(self) -> None:
        static = _static_fields(type(self))
        for f in dataclasses.fields(self):
            if f.name in static:
                continue
            value = getattr(self, f.name, None)
            leaves = jax.tree_util.tree_leaves(value, is_leaf=lambda x: isinstance(x, eqx.Module))
            for leaf in leaves:
                if isinstance(leaf, _CONFIG_SCALARS):
                    kind = type(leaf).__name__
                    fix = (
                        f"Declare a configuration value as "
                        f"`{f.name}: {kind} = eqx.field(static=True)`"
                    )
                    if not isinstance(leaf, str):
                        fix += (
                            f", or, for a parameter to learn, store an array: jnp.asarray({leaf!r})"
                        )
                    raise TypeError(
                        f"{type(self).__name__}.{f.name} holds a {kind} ({leaf!r}) in a field "
                        f"that is a PyTree leaf, so it would be traced. {fix}."
                    )

    # -- configuration -----------------------------------------------------------

    def get_config(self) -> dict[str, Any]:
        """The ``__init__`` arguments, with every array recorded as its shape and dtype."""
        config = super().get_config()
        return {k: _replace_in_config(v, _is_array, array_spec) for k, v in config.items()}

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> Self:
        """Rebuild from `get_config`; arrays become NaN placeholders (see `with_weights`)."""
        static = _static_fields(cls)
        args = {
            k: v if k in static else _replace_in_config(v, is_array_spec, placeholder_array)
            for k, v in config.items()
        }
        return cls(**args)

    # -- weights -----------------------------------------------------------------

    def serialize_weights(self) -> bytes:
        """This operator's arrays as a safetensors blob keyed by PyTree path."""
        return serialize_weights(self)

    def with_weights(self, blob: bytes) -> Self:
        """A copy holding the arrays in ``blob``; a mismatched path, shape or dtype
        raises `WeightsError` naming the path."""
        return with_weights(self, blob)

    # -- composition and display -------------------------------------------------

    @classmethod
    def _sequence_type(cls) -> type:
        # ``|`` around a JaxOperator builds a JaxSequential, whatever the brackets.
        return JaxSequential

    __eq__ = Operator.__eq__  # identity; eqx.Module would compare arrays
    __hash__ = Operator.__hash__

    def __repr__(self) -> str:
        try:
            config = Operator.get_config(self)
        except ConfigError:
            return f"{self.name}(...)"
        inner = ", ".join(
            f"{k}={describe(v) if _is_array(v) else repr(v)}" for k, v in config.items()
        )
        return f"{self.name}({inner})"


class JaxSequential(Sequential, JaxOperator):
    """A `Sequential` that is a PyTree: its steps are a tuple field.

    With `JaxOperator` steps, ``eqx.filter_grad`` reaches every step's arrays and
    ``eqx.tree_at(lambda s: s.operators[1], seq, new_step)`` replaces a step. It
    keeps `Sequential`'s ``|``, ``len``, indexing, slicing and `summary`, and the
    weights interface of `JaxOperator` (paths such as ``.operators[0].log_k``).

    A step that is a plain `Operator` (a `Lambda`) is one opaque leaf: it runs, but
    holds nothing to differentiate, and ``jax.jit`` cannot take the pipeline as an
    argument (``eqx.filter_jit`` can).

    **Arguments:**

    - `operators`: the steps, in order.
    """

    operators: tuple[Operator, ...]
    _flat_in_pipe = True  # `|` joins its steps (not those of a subclass)

    def __init__(self, operators: Iterable[Operator]) -> None:
        self.operators = check_operators("JaxSequential", operators)

    def get_config(self) -> dict[str, Any]:
        """`{"operators": [...]}`, the steps in order (see `Operator.get_config`)."""
        return {"operators": list(self.operators)}

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> Self:
        """Rebuild from `get_config`; the array weights are loaded separately."""
        return cls(**config)

    def __repr__(self) -> str:
        return f"JaxSequential({list(self.operators)!r})"
