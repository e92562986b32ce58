"""`Fanout`: several operators applied to the same input."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ._operator import Operator, check_operators

__all__ = ["Fanout"]


class Fanout(Operator):
    """Applies each operator to the same input and returns all the outputs.

    **Arguments:**

    - `operators`: a list of operators (the output is a tuple, in order) or a dict
      of operators (the output is a dict with the same keys).

    ```python
    stats = Fanout({"low": Lambda(jnp.min), "high": Lambda(jnp.max)})
    stats(x)  # {"low": ..., "high": ...}
    ```
    """

    def __init__(self, operators: Sequence[Operator] | Mapping[str, Operator]) -> None:
        if isinstance(operators, Mapping):
            check_operators("Fanout", operators.values())
            self.operators: dict[str, Operator] | list[Operator] = dict(operators)
        else:
            self.operators = list(check_operators("Fanout", operators))

    def _apply(self, *args: Any, **kwargs: Any) -> Any:
        if isinstance(self.operators, dict):
            return {key: op(*args, **kwargs) for key, op in self.operators.items()}
        return tuple(op(*args, **kwargs) for op in self.operators)
