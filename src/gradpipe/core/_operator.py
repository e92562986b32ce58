"""The `Operator` base class: one step of a pipeline."""

from __future__ import annotations

import inspect
from typing import Any, Self

from ._config import (
    ConfigError,
    encode_config,
    from_state,
    public_module,
    register_operator,
    state_from_json,
    state_from_yaml,
    state_to_json,
    state_to_yaml,
)
from ._node import Node, contains_node

__all__ = ["Operator"]

_MAY_HOLD_NODE = (Node, tuple, list, dict)


class Operator:
    """One step of a pipeline.

    Subclasses implement ``_apply(*args, **kwargs)`` and never override ``__call__``.
    Calling an operator runs ``_apply`` eagerly, unless an argument (positional or
    keyword, also inside a tuple, list or dict) is a graph `Node`: then the call is
    recorded and a new node returned, to be assembled by `Graph`. A JAX tracer is not
    a node, so an operator whose ``_apply`` is pure JAX runs unchanged under
    ``jax.jit``, ``jax.vmap`` and ``jax.grad``.

    The configuration is read from the ``__init__`` parameters: each one must be
    stored on the instance under the same name (or the subclass overrides
    `get_config`). `state` is ``{"module", "class", "config"}`` and `from_state`
    rebuilds it.

    ```python
    class Scale(Operator):
        def __init__(self, factor: float):
            self.factor = factor

        def _apply(self, x):
            return self.factor * x

    pipeline = Scale(2.0) | Scale(3.0)
    pipeline(1.0)  # 6.0
    ```
    """

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        register_operator(cls)

    # -- running ---------------------------------------------------------------

    def _apply(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__} must implement _apply(...).")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        for arg in args:
            if isinstance(arg, _MAY_HOLD_NODE) and contains_node(arg):
                return Node(self, args, kwargs)
        if kwargs and contains_node(kwargs):
            return Node(self, args, kwargs)
        return self._apply(*args, **kwargs)

    def __or__(self, other: Operator) -> Operator:
        if not isinstance(other, Operator):
            return NotImplemented
        from ._sequential import compose

        return compose(self, other)

    def __ror__(self, other: Operator) -> Operator:
        if not isinstance(other, Operator):
            return NotImplemented
        from ._sequential import compose

        return compose(other, self)

    @classmethod
    def _sequence_type(cls) -> type:
        """The kind of sequence ``|`` builds around this operator (see `compose`)."""
        from ._sequential import Sequential

        return Sequential

    @property
    def name(self) -> str:
        """The name used in summaries and error messages."""
        return type(self).__name__

    # -- configuration -----------------------------------------------------------

    def get_config(self) -> dict[str, Any]:
        """The ``__init__`` arguments that rebuild this operator, by name."""
        config: dict[str, Any] = {}
        if type(self).__init__ is object.__init__:
            return config
        signature = inspect.signature(type(self).__init__)
        for param in list(signature.parameters.values())[1:]:
            if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
                raise ConfigError(
                    f"{self.name}.__init__ takes *{param.name}; its configuration cannot "
                    f"be read from the signature. Override get_config()."
                )
            try:
                config[param.name] = getattr(self, param.name)
            except AttributeError:
                raise ConfigError(
                    f"{self.name} has an __init__ parameter {param.name!r} but no attribute "
                    f"of that name. Store it as self.{param.name}, or override get_config()."
                ) from None
        return config

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> Self:
        """Rebuild an operator from `get_config`'s output."""
        return cls(**config)

    @property
    def state(self) -> dict[str, Any]:
        """``{"module", "class", "config"}`` with a JSON-ready configuration.

        Raises `ConfigError` naming the operator and field when a value has no exact
        JSON form (NumPy scalars, arrays, callables, sets, ...).
        """
        config = {
            key: encode_config(value, owner=self.name, field=key)
            for key, value in self.get_config().items()
        }
        cls = type(self)
        return {"module": public_module(cls), "class": cls.__qualname__, "config": config}

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> Operator:
        """Rebuild an operator from `state`; only registered classes are rebuilt."""
        op = from_state(state)
        if not isinstance(op, cls):
            raise ConfigError(f"The state describes a {type(op).__name__}, not a {cls.__name__}.")
        return op

    def to_json(self, **dumps_kwargs: Any) -> str:
        """The state as strict JSON text."""
        return state_to_json(self.state, **dumps_kwargs)

    @classmethod
    def from_json(cls, text: str) -> Operator:
        """Rebuild an operator from `to_json`'s text."""
        return cls.from_state(state_from_json(text))

    def to_yaml(self) -> str:
        """The state as YAML text."""
        return state_to_yaml(self.state)

    @classmethod
    def from_yaml(cls, text: str) -> Operator:
        """Rebuild an operator from `to_yaml`'s text (read with the safe loader)."""
        return cls.from_state(state_from_yaml(text))

    def __repr__(self) -> str:
        try:
            config = self.get_config()
        except ConfigError:
            return f"{self.name}(...)"
        inner = ", ".join(f"{k}={v!r}" for k, v in config.items())
        return f"{self.name}({inner})"
