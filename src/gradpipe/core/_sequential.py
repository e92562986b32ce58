"""`Sequential`: operators applied one after the other."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, overload

from ._describe import describe
from ._operator import Operator

__all__ = ["Sequential", "check_operators", "compose", "pipe_steps"]


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
        return list(op.operators)
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
