"""What JAX can differentiate: the refusals of a component's derivative endpoints,
and what a component remembers per signature about the modes that work."""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

__all__ = ["DERIVATIVE_ERRORS", "DerivativeMemory", "derivative_error"]

# What JAX raises while tracing a derivative it has no rule for: a custom_vjp function
# under forward mode (TypeError), a pure_callback under any derivative (ValueError), a
# primitive without a differentiation rule (NotImplementedError).
DERIVATIVE_ERRORS = (TypeError, ValueError, NotImplementedError)


def derivative_error(endpoint: str, errors: dict[str, Exception]) -> TypeError:
    """The refusal of ``Component.<endpoint>`` when JAX cannot differentiate the
    function, by mode (``"fwd"``, ``"rev"``) with JAX's reason for each, and what to
    use instead. `apply` still runs such a function."""
    reasons = "; ".join(
        f"in {'forward' if m == 'fwd' else 'reverse'} mode: {_first_line(e)}"
        for m, e in errors.items()
    )
    only_reverse = "fwd" in errors and "rev" not in errors and "custom_vjp" in str(errors["fwd"])
    if only_reverse:
        advice = (
            "The function defines only a reverse-mode rule (jax.custom_vjp), which forward "
            "mode cannot use: call vjp, or jacobian with mode='rev' (or 'auto')."
        )
    else:
        advice = (
            "apply still runs it. Give the part without a derivative rule one "
            "(jax.custom_jvp or jax.custom_vjp), or wrap its inputs in "
            "jax.lax.stop_gradient when no derivative flows through it."
        )
    return TypeError(f"Component.{endpoint} cannot differentiate this function {reasons}. {advice}")


def _first_line(error: Exception) -> str:
    text = str(error).strip() or type(error).__name__
    return text.splitlines()[0].rstrip(".")


class DerivativeMemory:
    """Per-signature facts learned by trying, so that each is paid for once: the
    signatures whose forward pass cannot run under ``jax.vjp`` (with JAX's reason),
    and the Jacobian mode that worked for a selection under ``mode="auto"``. Each
    memo keeps its newest 256 entries; thread-safe."""

    _LIMIT = 256

    def __init__(self) -> None:
        self.no_residuals: dict[Any, Exception] = {}
        self.jacobian_modes: dict[Any, str] = {}
        self._lock = threading.Lock()

    def remember(self, memo: dict[Any, Any], key: Any, value: Any) -> None:
        """Note ``value`` under ``key`` in ``memo``, dropping the oldest past the limit."""
        with self._lock:
            memo[key] = value
            while len(memo) > self._LIMIT:
                del memo[next(iter(memo))]

    def jacobian_order(self, sig: Any, ins: tuple[int, ...], outs: tuple[int, ...]) -> tuple:
        """The modes to try under ``mode="auto"``: the one that worked before, else the
        cheaper by size first (forward when there are fewer inputs than outputs)."""
        remembered = self.jacobian_modes.get((sig.key, ins, outs))
        if remembered:
            return (remembered,)
        n_in = sum(int(np.prod(sig.in_avals[i].shape)) for i in ins)
        n_out = sum(int(np.prod(sig.out_avals[o].shape)) for o in outs)
        return ("fwd", "rev") if n_in <= n_out else ("rev", "fwd")
