"""The smallest operators: `Identity`, `Const` and `Lambda`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ._config import ConfigError
from ._operator import Operator

__all__ = ["Const", "Identity", "Lambda"]


class Identity(Operator):
    """Returns its single input unchanged."""

    def _apply(self, x: Any) -> Any:
        return x


class Const(Operator):
    """Ignores its inputs and returns ``value``.

    **Arguments:**

    - `value`: what every call returns. To be saved it must be a configuration
      value (JSON primitives, lists, tuples, dicts).
    """

    def __init__(self, value: Any) -> None:
        self.value = value

    def _apply(self, *args: Any, **kwargs: Any) -> Any:
        return self.value


class Lambda(Operator):
    """Wraps a Python function as an operator.

    A `Lambda` cannot be saved: a function has no configuration that rebuilds it.
    Write an `Operator` subclass for a step that must round-trip through JSON, YAML
    or the registry.

    **Arguments:**

    - `fn`: the function; it receives the step's arguments.
    - `name`: the name shown in summaries (default: the function's name).
    """

    def __init__(self, fn: Callable[..., Any], name: str | None = None) -> None:
        if not callable(fn):
            raise TypeError(f"Lambda needs a callable, got {type(fn).__name__}.")
        self.fn = fn
        self._name = name or getattr(fn, "__name__", "lambda")
        # `Sequential` calls `_apply` directly; pointing it at the function itself
        # makes a step of Lambdas as cheap as calling the functions.
        self._apply = fn  # type: ignore[method-assign]  # deliberately, per instance

    @property
    def name(self) -> str:
        """`Lambda(<function name>)`, or the `name=` given; used in summaries and errors."""
        return f"Lambda({self._name})"

    def get_config(self) -> dict[str, Any]:
        """Always raises `ConfigError`: a wrapped Python function has no configuration.

        Write an `Operator` subclass with an `_apply` method for a step that must be saved.
        """
        raise ConfigError(
            f"{self.name} cannot be saved: it wraps a Python function, which has no "
            f"configuration. Write an Operator subclass with a _apply method for a "
            f"step that must be saved."
        )

    def __repr__(self) -> str:
        return self.name
