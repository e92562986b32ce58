"""`JaxModelOp`: any equinox Module as a pipeline step."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Self, cast

import equinox as eqx
import jax

from gradpipe.core import ConfigError

from ._pytree import JaxOperator
from ._weights import array_spec

__all__ = ["JaxModelOp"]


class JaxModelOp(JaxOperator):
    """Wraps an ``eqx.Module`` (a network, a physical model) as an operator.

    Calling the operator calls the module. The operator is a PyTree containing the
    module, so ``eqx.filter_grad`` reaches the module's arrays through a
    `JaxSequential`; in a plain `Sequential`, differentiate the module itself and
    build the pipeline inside the loss (see the trace-time guide).

    **Arguments:**

    - `module`: the module; it is called with the step's arguments.

    The state records the module's class and the shape and dtype of each of its
    arrays, so that two different models never share a registry address. An
    arbitrary module cannot be rebuilt from that record, so loading needs a template
    of the same structure::

        ref = reg.store(op, weights=op.serialize_weights())
        op2 = from_registry(reg, ref, like=JaxModelOp(BandInversion(jnp.zeros(5))))
    """

    module: eqx.Module

    def __init__(self, module: eqx.Module) -> None:
        if not isinstance(module, eqx.Module):
            raise TypeError(
                f"JaxModelOp wraps an eqx.Module, got {type(module).__name__}. Wrap a "
                f"plain function as gradpipe.Lambda(fn)."
            )
        self.module = module

    def _apply(self, *args: Any, **kwargs: Any) -> Any:
        module = cast("Callable[..., Any]", self.module)  # an eqx.Module with __call__
        return module(*args, **kwargs)

    @property
    def name(self) -> str:
        """`JaxModelOp(<module class>)`: used in summaries and errors."""
        return f"JaxModelOp({type(self.module).__name__})"

    def get_config(self) -> dict[str, Any]:
        """The module's class and each array's path, shape and dtype; no array values.

        The values travel as weights (`serialize_weights`).
        """
        cls = type(self.module)
        arrays = {
            jax.tree_util.keystr(path): array_spec(leaf)
            for path, leaf in jax.tree_util.tree_flatten_with_path(self.module)[0]
            if eqx.is_array(leaf)
        }
        return {"module": {"class": f"{cls.__module__}:{cls.__qualname__}", "arrays": arrays}}

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> Self:
        """Always raises `ConfigError`: an arbitrary `eqx.Module` has no configuration.

        Load the weights into a template instead:
        `gradpipe.jax.from_registry(registry, ref, like=JaxModelOp(YourModule(...)))`.
        """
        module = config.get("module", {})
        raise ConfigError(
            f"JaxModelOp cannot rebuild the module {module.get('class', '?')} from its "
            f"state: an arbitrary eqx.Module has no configuration. Load it into a template "
            f"of the same structure: gradpipe.jax.from_registry(registry, ref, "
            f"like=JaxModelOp(YourModule(...)))."
        )

    def __repr__(self) -> str:
        return f"JaxModelOp({self.module!r})"
