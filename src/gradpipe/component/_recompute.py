"""Which residuals a component's forward pass keeps, and which its backward pass
recomputes.

Keeping every intermediate value of the forward pass (what ``jax.vjp`` does) makes
the backward pass cheapest, but each kept value is a fresh device buffer written by
the forward pass and held until the backward pass runs — for a served component,
until the client asks for the VJP. Elementwise arithmetic and layout operations are
far cheaper to recompute than to write out and hold, so by default a component
keeps the outputs of everything else (matrix products, loops, solves) and
recomputes the elementwise operations inside the compiled
backward pass, through ``jax.checkpoint``. The gradients are the same function of
the same inputs; only where the work happens changes.

Recomputation runs part of the forward pass a second time, so a function with side
effects (``jax.debug.callback``, ``io_callback``), host callbacks (``pure_callback``,
a `RemoteComponent`) or primitives defined outside JAX (`gradpipe.ooc` operations)
keeps everything instead: its callbacks then fire once per forward pass, as written.
The check runs on the differentiated forward pass, so it sees inside custom
derivative rules too.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import jax

__all__ = ["RESIDUAL_CHOICES", "check_residuals", "has_host_effects", "residual_policy"]

RESIDUAL_CHOICES = ("auto", "all", "inputs")

# Primitives that read each input element once and cost about as much as a copy:
# elementwise arithmetic, comparisons, conversions and pure layout changes. A
# primitive missing here is kept, never recomputed: slower at worst, never wrong.
_CHEAP = frozenset(
    """
    abs acos acosh add and asin asinh atan atan2 atanh broadcast_in_dim cbrt ceil clamp
    complex concatenate conj convert_element_type copy cos cosh div eq erf erf_inv erfc
    exp exp2 expm1 floor ge gt imag integer_pow iota is_finite le log log1p logistic lt
    max min mul ne neg nextafter not one_minus_square or pad pow real reduce_precision
    rem reshape rev round rsqrt select_n sign sin sinh slice split sqrt square squeeze
    sub tan tanh transpose xor
    """.split()  # noqa: SIM905 (a word list reads better than 75 quoted names)
)


def _keep_costly(primitive: Any, *_: Any, **__: Any) -> bool:
    """The ``jax.checkpoint`` policy of ``"auto"``: keep what is not cheap."""
    return primitive.name not in _CHEAP


def check_residuals(residuals: Any) -> None:
    """Refuse a ``residuals=`` setting that is neither a known name nor a policy."""
    if callable(residuals) or residuals in RESIDUAL_CHOICES:
        return
    choices = ", ".join(repr(c) for c in RESIDUAL_CHOICES)
    raise ValueError(
        f"Component residuals= must be one of {choices} or a jax.checkpoint policy "
        f"(e.g. jax.checkpoint_policies.dots_saveable), got {residuals!r}."
    )


def residual_policy(residuals: Any, host_effects: Callable[[], bool]) -> Callable[..., bool] | None:
    """The ``jax.checkpoint`` policy for a ``residuals=`` setting, or ``None`` to keep
    every residual (no ``jax.checkpoint`` at all). ``host_effects`` is asked only for
    ``"auto"``."""
    if residuals == "all" or (residuals == "auto" and host_effects()):
        return None
    if residuals == "auto":
        return _keep_costly
    if residuals == "inputs":
        return jax.checkpoint_policies.nothing_saveable
    return residuals


def has_host_effects(closed_jaxpr: Any) -> bool:
    """Whether a traced function has side effects, calls back into Python, or holds a
    primitive defined outside JAX (``call_hi_primitive``: `gradpipe.ooc` operations),
    whose derivative rules ``jax.checkpoint`` cannot be trusted to rerun.

    Trace the *differentiated* function (``jax.vjp`` of it): custom derivative rules
    are opaque thunks in the primal jaxpr and appear only once differentiated."""
    if closed_jaxpr.effects:
        return True
    return any(
        "callback" in eqn.primitive.name or eqn.primitive.name == "call_hi_primitive"
        for eqn in _equations(closed_jaxpr.jaxpr)
    )


def _equations(jaxpr: Any) -> Iterator[Any]:
    for eqn in jaxpr.eqns:
        yield eqn
        for value in eqn.params.values():
            yield from _inner_equations(value)


def _inner_equations(value: Any) -> Iterator[Any]:
    if hasattr(value, "eqns"):  # a Jaxpr
        yield from _equations(value)
    elif hasattr(value, "jaxpr") and hasattr(value.jaxpr, "eqns"):  # a ClosedJaxpr
        yield from _equations(value.jaxpr)
    elif isinstance(value, tuple | list):
        for item in value:
            yield from _inner_equations(item)
