"""`Sequential`: operators applied one after the other."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, overload

from ._describe import describe
from ._operator import Operator

__all__ = ["Sequential", "check_operators"]


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


class Sequential(Operator):
    """Operators applied in order: the first receives the call's arguments, each
    following one the previous output.

    ``a | b | c`` builds ``Sequential([a, b, c])`` (nested sequences are flattened).
    A `Sequential` supports ``len``, iteration, indexing (an operator) and slicing
    (a `Sequential`).

    **Arguments:**

    - `operators`: the steps, in order.
    """

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
        return {"operators": list(self.operators)}

    def __or__(self, other: Operator) -> Sequential:
        if not isinstance(other, Operator):
            return NotImplemented
        tail = list(other.operators) if type(other) is Sequential else [other]
        return type(self)([*self.operators, *tail])

    def __ror__(self, other: Operator) -> Sequential:
        if not isinstance(other, Operator):
            return NotImplemented
        return type(self)([other, *self.operators])

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
