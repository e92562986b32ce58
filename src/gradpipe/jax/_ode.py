"""`ODEForwardModel`: an ODE solved with diffrax, as a pipeline step.

How the solve is differentiated is chosen by passing a small frozen spec, as in
diffrax: `DirectAdjoint`, `BacksolveAdjoint` or `RecursiveCheckpointAdjoint`.
diffrax is an optional dependency (the ``ode`` extra) and is imported on the first
solve, so ``import gradpipe.jax`` works without it.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable
from typing import Any, Self, cast

import equinox as eqx
import jax
import jax.numpy as jnp

from gradpipe.core import ConfigError

from ._pytree import JaxOperator

__all__ = [
    "BacksolveAdjoint",
    "DirectAdjoint",
    "ODEForwardModel",
    "RecursiveCheckpointAdjoint",
    "TruncatedAdjoint",
]


# -- adjoint specs ----------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class RecursiveCheckpointAdjoint:
    """Backpropagate through the solver's steps, storing `checkpoints` of them and
    recomputing the rest. Exact gradients of the discrete solve; the default.

    - `checkpoints`: how many steps to store; ``None`` lets diffrax choose from
      ``max_steps``.
    """

    checkpoints: int | None = None


@dataclasses.dataclass(frozen=True)
class DirectAdjoint:
    """Differentiate the solver's loop directly: exact gradients, also forward-mode
    (``jax.jvp``), at the cost of memory and compile time."""


@dataclasses.dataclass(frozen=True)
class BacksolveAdjoint:
    """Solve the adjoint ODE backwards in time: constant memory; the gradient is that
    of the continuous problem, accurate to the solver's tolerance."""


@dataclasses.dataclass(frozen=True)
class TruncatedAdjoint:
    """Truncated backpropagation over the last `k` steps of a *rollout*.

    Truncation belongs to a sequence of solves, not to one solve, so
    `ODEForwardModel.with_adjoint` refuses this spec; roll the model out with
    `gradpipe.jax.truncated_scan(f, init, xs, k=k)` instead.
    """

    k: int


AdjointSpec = RecursiveCheckpointAdjoint | DirectAdjoint | BacksolveAdjoint
_SPEC_NAMES: dict[str, type] = {
    "recursive_checkpoint": RecursiveCheckpointAdjoint,
    "direct": DirectAdjoint,
    "backsolve": BacksolveAdjoint,
}


def _check_spec(spec: Any) -> AdjointSpec:
    if isinstance(spec, TruncatedAdjoint):
        raise ValueError(
            f"ODEForwardModel cannot truncate one solve ({spec!r}): truncation is a "
            f"property of a rollout. Step the model inside "
            f"gradpipe.jax.truncated_scan(f, init, xs, k={spec.k}) instead."
        )
    if not isinstance(spec, tuple(_SPEC_NAMES.values())):
        raise TypeError(
            f"adjoint must be gradpipe.jax.RecursiveCheckpointAdjoint(), DirectAdjoint() "
            f"or BacksolveAdjoint(), got {spec!r}."
        )
    return cast("AdjointSpec", spec)


def _import_diffrax() -> Any:
    try:
        return importlib.import_module("diffrax")
    except ImportError as error:
        raise ImportError(
            "ODEForwardModel needs diffrax, which is in the 'ode' extra: "
            "pip install 'gradpipe[ode]'."
        ) from error


# Solver names a configuration may hold, and diffrax's class for each.
_SOLVERS = {
    "tsit5": "Tsit5",
    "dopri5": "Dopri5",
    "dopri8": "Dopri8",
    "bosh3": "Bosh3",
    "heun": "Heun",
    "midpoint": "Midpoint",
    "ralston": "Ralston",
    "euler": "Euler",
    "kvaerno5": "Kvaerno5",
}


def _diffrax_adjoint(dfx: Any, spec: AdjointSpec) -> Any:
    if isinstance(spec, DirectAdjoint):
        return dfx.DirectAdjoint()
    if isinstance(spec, BacksolveAdjoint):
        return dfx.BacksolveAdjoint()
    return dfx.RecursiveCheckpointAdjoint(checkpoints=spec.checkpoints)


def _as_float_array(x: Any) -> jax.Array:
    return jnp.asarray(x, dtype=jnp.result_type(float, x))


# -- the operator -----------------------------------------------------------------


class ODEForwardModel(JaxOperator):
    """Integrates ``dy/dt = vector_field(t, y, args)`` over `dt` from the input state.

    Calling the operator on a state ``y0`` returns ``y(dt)``; `step` takes the
    duration explicitly. The state may be any PyTree of arrays; `args` holds the
    parameters, which ``eqx.filter_grad`` reaches like any other operator's arrays.

    **Arguments:**

    - `vector_field`: ``(t, y, args) -> dy/dt``, a function or an ``eqx.Module``.
    - `dt`: the duration one call integrates over.
    - `dt0`: the solver's (initial) step size.
    - `args`: parameters passed to `vector_field` (arrays; ``None`` if unused).
    - `solver`: a diffrax solver by name: ``"tsit5"`` (default), ``"dopri5"``,
      ``"dopri8"``, ``"bosh3"``, ``"heun"``, ``"midpoint"``, ``"ralston"``,
      ``"euler"`` or ``"kvaerno5"`` (for stiff problems).
    - `rtol`, `atol`: adaptive step-size tolerances; ``None`` (default) for constant
      steps of `dt0`.
    - `max_steps`: an upper bound on the number of steps.
    - `adjoint`: how to differentiate the solve (default
      `RecursiveCheckpointAdjoint()`); see `with_adjoint`.

    ```python
    decay = ODEForwardModel(lambda t, c, lam: -lam * c, dt=1.0, dt0=0.01,
                            args=jnp.asarray(0.25))
    decay.step(100.0, 1.0)                                       # 77.88
    jax.grad(decay.with_adjoint(BacksolveAdjoint()))(100.0)      # 0.7788
    ```
    """

    vector_field: Callable[..., Any]
    dt: float = eqx.field(static=True)
    dt0: float = eqx.field(static=True)
    args: Any = None
    solver: str = eqx.field(static=True, default="tsit5")
    rtol: float | None = eqx.field(static=True, default=None)
    atol: float | None = eqx.field(static=True, default=None)
    max_steps: int = eqx.field(static=True, default=4096)
    adjoint: AdjointSpec = eqx.field(static=True, default=RecursiveCheckpointAdjoint())

    def __check_init__(self) -> None:
        _check_spec(self.adjoint)
        if not callable(self.vector_field):
            raise TypeError(
                f"ODEForwardModel.vector_field must be callable, got "
                f"{type(self.vector_field).__name__}."
            )
        if self.solver not in _SOLVERS:
            raise ValueError(
                f"ODEForwardModel.solver must be one of {sorted(_SOLVERS)}, got {self.solver!r}."
            )
        if (self.rtol is None) != (self.atol is None):
            raise ValueError("ODEForwardModel: give both rtol and atol, or neither.")

    def with_adjoint(self, spec: AdjointSpec) -> Self:
        """A copy that differentiates the solve as `spec` says.

        A `TruncatedAdjoint` raises `ValueError`: use `truncated_scan` over steps.
        """
        return dataclasses.replace(self, adjoint=_check_spec(spec))

    def step(self, state: Any, dt: float | jax.Array) -> Any:
        """The state after integrating for `dt` from ``state`` at ``t = 0``."""
        dfx = _import_diffrax()
        solver = getattr(dfx, _SOLVERS[self.solver])()
        if self.rtol is None:
            controller = dfx.ConstantStepSize()
        else:
            controller = dfx.PIDController(rtol=self.rtol, atol=self.atol)
        y0 = jax.tree_util.tree_map(_as_float_array, state)
        solution = dfx.diffeqsolve(
            dfx.ODETerm(self.vector_field),
            solver,
            t0=0.0,
            t1=dt,
            dt0=self.dt0,
            y0=y0,
            args=self.args,
            saveat=dfx.SaveAt(t1=True),
            stepsize_controller=controller,
            adjoint=_diffrax_adjoint(dfx, self.adjoint),
            max_steps=self.max_steps,
        )
        return jax.tree_util.tree_map(lambda y: y[-1], solution.ys)

    def _apply(self, state: Any) -> Any:
        return self.step(state, self.dt)

    # -- configuration: the adjoint spec is saved by name ------------------------

    def get_config(self) -> dict[str, Any]:
        """`JaxOperator.get_config`, with the adjoint spec saved by name and fields."""
        config = super().get_config()
        spec = self.adjoint
        name = next(n for n, cls in _SPEC_NAMES.items() if isinstance(spec, cls))
        config["adjoint"] = {"kind": name, **dataclasses.asdict(spec)}
        return config

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> Self:
        """Rebuild from `get_config`, the adjoint spec from its saved name.

        Raises `ConfigError` on an unknown adjoint kind.
        """
        config = dict(config)
        saved = dict(config.get("adjoint") or {"kind": "recursive_checkpoint"})
        kind = saved.pop("kind", None)
        if kind not in _SPEC_NAMES:
            raise ConfigError(f"ODEForwardModel.adjoint: unknown kind {kind!r}.")
        config["adjoint"] = _SPEC_NAMES[kind](**saved)
        return super().from_config(config)
