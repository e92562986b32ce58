"""gradpipe.core: operators and composition. Never imports JAX."""

from ._blocks import Const, Identity, Lambda
from ._config import ConfigError, from_state, register_operator
from ._node import Input, Node
from ._operator import Operator
from ._registry import Registry, RegistryError
from ._sequential import Sequential
from ._tracing import find_tracer, is_tracer

__all__ = [
    "ConfigError",
    "Const",
    "Identity",
    "Input",
    "Lambda",
    "Node",
    "Operator",
    "Registry",
    "RegistryError",
    "Sequential",
    "find_tracer",
    "from_state",
    "is_tracer",
    "register_operator",
]
