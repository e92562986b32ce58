"""`CondBranch` and `CondSwitch`: choosing a branch at run time with ``jax.lax``.

The core's `Branch` and `Switch` decide in Python, which needs a concrete value and
so refuses a tracer. These twins trace every branch and let ``lax.cond`` or
``lax.switch`` choose one when the compiled function runs. Because all branches are
traced, they must return the same structure, shapes and dtypes.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp

from gradpipe.core import find_tracer
from gradpipe.core._describe import describe

from ._pytree import JaxOperator

__all__ = ["CondBranch", "CondSwitch"]


def _branch_fn(branch: Callable[..., Any]) -> Callable[[tuple[tuple, dict]], Any]:
    def run(operands: tuple[tuple, dict]) -> Any:
        args, kwargs = operands
        return branch(*args, **kwargs)

    return run


def _output_types(branch: Callable[..., Any], args: tuple, kwargs: dict) -> str | None:
    """``float32[3]``-style description of a branch's output; ``None`` if it fails."""
    try:
        return describe(jax.eval_shape(lambda a, k: branch(*a, **k), args, kwargs))
    except Exception:
        return None


def _check_same_outputs(
    owner: str,
    labels: Sequence[str],
    branches: Sequence[Callable[..., Any]],
    args: tuple,
    kwargs: dict,
    error: TypeError,
) -> None:
    """Re-raise a ``lax`` output mismatch as an error naming every branch's output;
    any other error (a branch that fails by itself) propagates unchanged."""
    kinds = [_output_types(b, args, kwargs) for b in branches]
    if None not in kinds and len(set(kinds)) > 1:
        listed = "; ".join(f"{label} returns {kind}" for label, kind in zip(labels, kinds))
        raise TypeError(
            f"{owner}: every branch must return the same structure, shapes and dtypes, "
            f"because all of them are traced and one is chosen at run time. Here {listed}."
        ) from error
    raise error


class CondBranch(JaxOperator):
    """Runs ``if_true`` or ``if_false`` as ``predicate(input)`` says, under tracing too.

    The JAX-native twin of `gradpipe.Branch`: both branches are traced and
    ``jax.lax.cond`` chooses at run time, so it works under ``jax.jit``, ``vmap``
    (where both branches run and the results are selected) and ``grad``. On concrete
    inputs it returns what `Branch` returns.

    **Arguments:**

    - `predicate`: an operator or function of the step's arguments returning a
      scalar bool.
    - `if_true`, `if_false`: operators (or functions) with outputs of the same
      structure, shapes and dtypes; a mismatch raises `TypeError` at the first call,
      naming both outputs.

    ```python
    step = CondBranch(lambda y: y[-1] > 0.1, retrieval, last_band)
    jax.jit(jax.vmap(step))(ys)
    ```
    """

    predicate: Callable[..., Any]
    if_true: Callable[..., Any]
    if_false: Callable[..., Any]

    def __init__(
        self,
        predicate: Callable[..., Any],
        if_true: Callable[..., Any],
        if_false: Callable[..., Any],
    ) -> None:
        named = (("predicate", predicate), ("if_true", if_true), ("if_false", if_false))
        for label, value in named:
            if not callable(value):
                raise TypeError(f"CondBranch.{label} must be callable, got {type(value).__name__}.")
        self.predicate = predicate
        self.if_true = if_true
        self.if_false = if_false

    def _apply(self, *args: Any, **kwargs: Any) -> Any:
        decision = self.predicate(*args, **kwargs)
        if jnp.shape(decision) != ():
            raise TypeError(
                f"CondBranch.predicate must return a scalar bool, got {describe(decision)}. "
                f"Reduce it (jnp.all, jnp.any) or vmap the CondBranch over the batch."
            )
        branches = (self.if_true, self.if_false)
        try:
            return jax.lax.cond(decision, *(_branch_fn(b) for b in branches), (args, kwargs))
        except TypeError as error:
            _check_same_outputs(
                "CondBranch", ("if_true", "if_false"), branches, args, kwargs, error
            )


class CondSwitch(JaxOperator):
    """Runs ``branches[index(input)]``, chosen at run time with ``jax.lax.switch``.

    The JAX-native twin of `gradpipe.Switch`, for ``jax.jit``, ``vmap`` and ``grad``.
    On concrete inputs it returns what `Switch` returns, and an index outside
    ``range(len(branches))`` raises `IndexError` as `Switch` does. ``lax.switch``
    alone would clamp such an index to the nearest branch, a silent wrong answer, so
    a traced index is checked with ``eqx.error_if`` and an out-of-range value fails
    when the compiled function runs.

    **Arguments:**

    - `index`: an operator or function of the step's arguments returning a scalar int.
    - `branches`: operators (or functions) with outputs of the same structure, shapes
      and dtypes; a mismatch raises `TypeError` at the first call, naming each output.
    """

    index: Callable[..., Any]
    branches: tuple[Callable[..., Any], ...]

    def __init__(self, index: Callable[..., Any], branches: Sequence[Callable[..., Any]]) -> None:
        if not callable(index):
            raise TypeError(f"CondSwitch.index must be callable, got {type(index).__name__}.")
        branches = tuple(branches)
        if not branches:
            raise ValueError("CondSwitch needs at least one branch.")
        for i, branch in enumerate(branches):
            if not callable(branch):
                raise TypeError(
                    f"CondSwitch.branches[{i}] must be callable, got {type(branch).__name__}."
                )
        self.index = index
        self.branches = branches

    def _apply(self, *args: Any, **kwargs: Any) -> Any:
        choice = self.index(*args, **kwargs)
        n = len(self.branches)
        if find_tracer(choice) is None:
            try:
                i = operator.index(choice)
            except TypeError:
                raise TypeError(
                    f"CondSwitch.index must return an int, got {describe(choice)} {choice!r}."
                ) from None
            if not 0 <= i < n:
                raise IndexError(f"CondSwitch.index returned {i}, outside the {n} branches.")
        else:
            if jnp.shape(choice) != () or not jnp.issubdtype(jnp.result_type(choice), jnp.integer):
                raise TypeError(
                    f"CondSwitch.index must return a scalar int, got {describe(choice)}."
                )
            i = eqx.error_if(
                choice,
                (choice < 0) | (choice >= n),
                f"CondSwitch.index returned an index outside the {n} branches.",
            )
        try:
            return jax.lax.switch(i, [_branch_fn(b) for b in self.branches], (args, kwargs))
        except TypeError as error:
            labels = [f"branches[{j}]" for j in range(n)]
            _check_same_outputs("CondSwitch", labels, self.branches, args, kwargs, error)
