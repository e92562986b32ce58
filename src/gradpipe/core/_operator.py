"""`Operator`, one step of a pipeline, and `Sequential`, steps in order: ``a | b``
builds the one from the others (`compose`)."""

from __future__ import annotations

import inspect
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Self, cast, overload

from ._config import (
    ConfigError,
    encode_config,
    from_state,
    nest_in_configs,
    public_module,
    register_operator,
    state_from_json,
    state_from_yaml,
    state_to_json,
    state_to_yaml,
)
from ._describe import describe
from ._node import Node, contains_node

__all__ = ["Operator", "Sequential", "check_operators", "compose", "pipe_steps"]

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
        return compose(self, other)

    def __ror__(self, other: Operator) -> Operator:
        if not isinstance(other, Operator):
            return NotImplemented
        return compose(other, self)

    @classmethod
    def _sequence_type(cls) -> type:
        """The kind of sequence ``|`` builds around this operator (see `compose`)."""
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


nest_in_configs(Operator)


def check_operators(owner: str, operators: Iterable[Any]) -> tuple[Operator, ...]:
    """The operators as a tuple, or a `TypeError` naming the first one that is not."""
    ops = tuple(operators)
    for i, op in enumerate(ops):
        if not isinstance(op, Operator):
            raise TypeError(
                f"{owner}.operators[{i}] must be an Operator, got {type(op).__name__}. "
                f"Wrap a plain function as gradpipe.Lambda(fn)."
            )
    return ops


def pipe_steps(op: Operator) -> list[Operator]:
    """The steps ``op`` contributes to a ``|`` chain: those of a sequence built by
    ``|`` (a `Sequential` or ``JaxSequential``, not a subclass of theirs, which may
    mean more than its steps), else ``op`` itself."""
    if type(op).__dict__.get("_flat_in_pipe", False):
        return list(cast("Sequential", op).operators)
    return [op]


def compose(left: Operator, right: Operator) -> Operator:
    """``left | right``: the steps of both, in one sequence of the right kind.

    The result depends only on the steps, never on the brackets: ``(a | b) | c``
    and ``a | (b | c)`` are the same pipeline of the same class. The class is the
    most specific `_sequence_type` of the steps: a plain `Sequential`, or a
    ``JaxSequential`` as soon as one step is a ``JaxOperator``. This prevents a
    silent loss: ``Lambda(f) | lin | lin`` once built a plain `Sequential`, an
    opaque leaf to ``eqx.filter_grad``, so an optax loop trained nothing, while
    ``Lambda(f) | (lin | lin)`` trained.

    Raises `TypeError` when two steps ask for unrelated kinds of sequence.
    """
    steps = [*pipe_steps(left), *pipe_steps(right)]
    kind: type = Sequential
    for step in steps:
        wanted = type(step)._sequence_type()
        if issubclass(wanted, kind):
            kind = wanted
        elif not issubclass(kind, wanted):
            raise TypeError(
                f"Cannot compose {step.name} with the other steps: it needs a "
                f"{wanted.__name__}, they need a {kind.__name__}. Build the pipeline "
                f"explicitly, e.g. {kind.__name__}([...])."
            )
    return kind(steps)


class Sequential(Operator):
    """Operators applied in order: the first receives the call's arguments, each
    following one the previous output.

    ``a | b | c`` builds ``Sequential([a, b, c])`` whatever the brackets (see
    `compose`; a `JaxOperator` step makes it a ``gradpipe.jax.JaxSequential``).
    A `Sequential` supports ``len``, iteration, indexing (an operator) and slicing
    (a `Sequential`).

    **Arguments:**

    - `operators`: the steps, in order.
    """

    operators: Sequence[Operator]
    _flat_in_pipe = True  # `|` joins its steps (not those of a subclass)

    def __init__(self, operators: Iterable[Operator]) -> None:
        self.operators = list(check_operators("Sequential", operators))

    def _apply(self, *args: Any, **kwargs: Any) -> Any:
        ops = self.operators
        if not ops:
            if kwargs or len(args) != 1:
                raise TypeError("An empty Sequential passes through exactly one argument.")
            return args[0]
        # Steps run through `_apply` directly: in eager mode an operator's output is
        # never a graph node, so the node check of `__call__` would only cost time.
        value = ops[0]._apply(*args, **kwargs)
        for i in range(1, len(ops)):
            value = ops[i]._apply(value)
        return value

    def get_config(self) -> dict[str, Any]:
        """`{"operators": [...]}`, the steps in order (see `Operator.get_config`)."""
        return {"operators": list(self.operators)}

    def __len__(self) -> int:
        return len(self.operators)

    def __iter__(self) -> Iterator[Operator]:
        return iter(self.operators)

    @overload
    def __getitem__(self, index: int) -> Operator: ...
    @overload
    def __getitem__(self, index: slice) -> Sequential: ...
    def __getitem__(self, index: int | slice) -> Operator | Sequential:
        if isinstance(index, slice):
            return type(self)(self.operators[index])
        return self.operators[index]

    def summary(self, example: Any = None) -> str:
        """A table of the steps; with an example input, each step's input and output.

        The example is run eagerly, step by step.
        """
        rows = [("#", "step", "input", "output")]
        value = example
        for i, op in enumerate(self.operators):
            if example is None:
                rows.append((str(i), op.name, "", ""))
                continue
            out = op(value)
            rows.append((str(i), op.name, describe(value), describe(out)))
            value = out
        widths = [max(len(row[c]) for row in rows) for c in range(4)]
        lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
        lines.insert(1, "  ".join("-" * w for w in widths))
        return "\n".join(lines)
