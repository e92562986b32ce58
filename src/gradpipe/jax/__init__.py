"""gradpipe.jax: pipelines under jit, vmap and grad, with learnable PyTree operators.

`JaxOperator` and `JaxSequential` make a pipeline a PyTree whose parameters
``eqx.filter_grad`` reaches; `JaxModelOp` wraps any ``eqx.Module``. `CondBranch`,
`CondSwitch` and `DebugTap` are the JAX-native twins of the core's `Branch`,
`Switch` and `Tap`. `truncated_scan` and `ODEForwardModel` (extra ``ode``) are the
forward-model pieces. Weights travel as safetensors blobs keyed by PyTree path.
"""

try:
    import equinox as _equinox  # noqa: F401
    import jax as _jax  # noqa: F401
    import safetensors as _safetensors  # noqa: F401
except ImportError as _error:
    raise ImportError(
        f"gradpipe.jax needs JAX, equinox and safetensors ({_error.name} is missing). "
        f"Install the extra: pip install 'gradpipe[jax]'."
    ) from _error

from . import _containers  # noqa: F401  (registers Sequential, Fanout, Graph as PyTrees)
from ._control import CondBranch, CondSwitch
from ._model import JaxModelOp
from ._observe import DebugTap
from ._ode import (
    BacksolveAdjoint,
    DirectAdjoint,
    ODEForwardModel,
    RecursiveCheckpointAdjoint,
    TruncatedAdjoint,
)
from ._pytree import JaxOperator, JaxSequential
from ._scan import truncated_scan
from ._weights import WeightsError, from_registry, serialize_weights, with_weights

__all__ = [
    "BacksolveAdjoint",
    "CondBranch",
    "CondSwitch",
    "DebugTap",
    "DirectAdjoint",
    "JaxModelOp",
    "JaxOperator",
    "JaxSequential",
    "ODEForwardModel",
    "RecursiveCheckpointAdjoint",
    "TruncatedAdjoint",
    "WeightsError",
    "from_registry",
    "serialize_weights",
    "truncated_scan",
    "with_weights",
]
