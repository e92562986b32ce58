"""`persist`: write a fused result now, so later reads come from disk."""

from __future__ import annotations

from collections.abc import Sequence

from ..arrays._array import ArrayLike, Result
from ..arrays._op import CustomOp, apply, frozen
from ..execution._driver import Driver, Value
from ..planning._chain import is_chain
from ._arg_types import BudgetLike

__all__ = ["persist"]


@frozen
class Persist(CustomOp):
    """The input itself, its chain (if it is one) written to a scratch file first."""

    reads_through = True  # it decides itself: a chain is what it writes

    @property
    def name(self) -> str:
        return "persist"

    def output_shape(self, s: tuple[int, ...]) -> tuple[int, ...]:
        return s

    def forward(self, driver: Driver, x: Value) -> Value:
        return x.store(driver) if is_chain(x) else x

    def backward(
        self,
        driver: Driver,
        inputs: Sequence[Value],
        output: Value,
        g: Value,
        wants: Sequence[bool],
    ) -> list[Value | None]:
        return [g if wants[0] else None]


def persist(x: ArrayLike, /, *, budget: BudgetLike = None) -> Result:
    """``x`` with its values written to disk now, when it is a fused result.

    Elementwise and layout results (``ooc.exp(x) * 2``, ``x.T``) are not written
    when made: they are computed when read, by the reduction, product or save that
    uses them (see `explain`). ``persist`` writes one now, so that the many
    consumers that follow read it from disk instead of recomputing it, or so that a
    timing includes the work. Every holder of the array sees the stored copy. An
    array already on disk is returned as it is. Under `jax.grad` its gradient is the
    identity; under `jax.jit` the write happens when the compiled call runs.

    **Arguments:**

    - `x`: a `DiskArray`.

    **Returns:**

    ``x``, stored.
    """
    return apply(Persist(), x, budget=budget)
