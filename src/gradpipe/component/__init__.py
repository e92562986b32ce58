"""gradpipe.component: serve a JAX function or pipeline with typed inputs and outputs
and autodiff endpoints (`apply`, `jacobian`, `jvp`, `vjp`, `abstract_eval`), with an
exact residual cache.

Declare the inputs and outputs as pydantic models with `Array[dtype, shape]` fields
(wrapped in `Differentiable[...]` where derivatives are wanted) and plain static
fields; wrap the function with `Component`.

Paths address one leaf: ``x``, ``layer.w`` (nested model), ``layers[0].w`` (list
index), ``bands[red]`` or ``bands["a key"]`` (dict key). See `Component` for the
details and `docs/guides/components.md` for a walk-through.
"""

try:
    import equinox  # noqa: F401
    import jax  # noqa: F401
    import pydantic  # noqa: F401
except ImportError as error:
    raise ImportError(
        f"gradpipe.component needs JAX, equinox and pydantic ({error.name} is missing). "
        f"Install the extra: pip install 'gradpipe[component]'."
    ) from error

from ._check_gradients import check_gradients
from ._component import Component
from ._gradient_report import GradientCheck, GradientCheckRow
from ._keys import ContentKey
from ._nodes import LeafSpec
from ._paths import ComponentInputError, canonical_path
from ._random_inputs import random_inputs
from ._residuals import CacheInfo, CacheLimits, ResidualCache, Residuals
from ._schema import Array, ArraySpec, Differentiable

__all__ = [
    "Array",
    "ArraySpec",
    "CacheInfo",
    "CacheLimits",
    "Component",
    "ComponentInputError",
    "ContentKey",
    "Differentiable",
    "GradientCheck",
    "GradientCheckRow",
    "LeafSpec",
    "ResidualCache",
    "Residuals",
    "canonical_path",
    "check_gradients",
    "random_inputs",
]
