"""`Branch` and `Switch`: Python control flow between operators.

Both decide with a Python value, so they cannot run on a JAX tracer, whose value is
unknown while a function is traced. They refuse with a `TypeError` that points to
the JAX-native twins in `gradpipe.jax`, which trace every branch and choose one at
run time.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from typing import Any

from ._operator import Operator, check_operators
from ._tracing import find_tracer, refuse_tracer

__all__ = ["Branch", "Switch"]


class Branch(Operator):
    """Runs ``if_true`` or ``if_false`` on the input, as ``predicate(input)`` says.

    **Arguments:**

    - `predicate`: an operator or function of the step's arguments returning a bool.
    - `if_true`, `if_false`: the two operators.

    Under ``jax.jit``, ``vmap`` or ``grad`` it raises `TypeError`; use
    ``gradpipe.jax.CondBranch`` there.
    """

    def __init__(
        self, predicate: Callable[..., Any], if_true: Operator, if_false: Operator
    ) -> None:
        if not callable(predicate):
            raise TypeError(f"Branch.predicate must be callable, got {type(predicate).__name__}.")
        check_operators("Branch", [if_true, if_false])
        self.predicate = predicate
        self.if_true = if_true
        self.if_false = if_false

    def _apply(self, *args: Any, **kwargs: Any) -> Any:
        refuse_tracer(
            "Branch",
            "cannot choose a branch from a traced value: under jax.jit, vmap or grad the "
            "value is not known while the pipeline is traced",
            "Use gradpipe.jax.CondBranch, which traces both branches and chooses one with "
            "jax.lax.cond at run time.",
            *args,
            **kwargs,
        )
        decision = self.predicate(*args, **kwargs)
        if find_tracer(decision) is not None:
            raise TypeError(
                "Branch.predicate returned a traced value. Use gradpipe.jax.CondBranch."
            )
        chosen = self.if_true if bool(decision) else self.if_false
        return chosen(*args, **kwargs)


class Switch(Operator):
    """Runs ``branches[index(input)]`` on the input.

    **Arguments:**

    - `index`: an operator or function of the step's arguments returning an int.
    - `branches`: the operators to choose from.

    An index outside ``range(len(branches))`` raises `IndexError` (it is never
    clamped). Under ``jax.jit``, ``vmap`` or ``grad`` it raises `TypeError`; use
    ``gradpipe.jax.CondSwitch`` there.
    """

    def __init__(self, index: Callable[..., Any], branches: Sequence[Operator]) -> None:
        if not callable(index):
            raise TypeError(f"Switch.index must be callable, got {type(index).__name__}.")
        self.index = index
        self.branches = list(check_operators("Switch", branches))
        if not self.branches:
            raise ValueError("Switch needs at least one branch.")

    def _apply(self, *args: Any, **kwargs: Any) -> Any:
        refuse_tracer(
            "Switch",
            "cannot choose a branch from a traced value: under jax.jit, vmap or grad the "
            "value is not known while the pipeline is traced",
            "Use gradpipe.jax.CondSwitch, which traces every branch and chooses one with "
            "jax.lax.switch at run time.",
            *args,
            **kwargs,
        )
        choice = self.index(*args, **kwargs)
        if find_tracer(choice) is not None:
            raise TypeError("Switch.index returned a traced value. Use gradpipe.jax.CondSwitch.")
        try:
            i = operator.index(choice)
        except TypeError:
            raise TypeError(
                f"Switch.index must return an int, got {type(choice).__name__} {choice!r}."
            ) from None
        if not 0 <= i < len(self.branches):
            raise IndexError(
                f"Switch.index returned {i}, outside the {len(self.branches)} branches."
            )
        return self.branches[i](*args, **kwargs)
