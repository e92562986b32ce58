"""gradpipe.core: operators and composition. Never imports JAX."""

from ._blocks import Const, Identity, Lambda
from ._cache import Cache
from ._combine import Fanout
from ._config import ConfigError, from_state, register_operator
from ._control import Branch, Switch
from ._graph import Graph, GraphError
from ._keys import UnkeyableError, content_key
from ._node import Input, Node
from ._observe import Profile, ShapeTrace, Sink, Snapshot, Tap
from ._operator import Operator, Sequential
from ._registry import Registry, RegistryError, RegistryWarning
from ._sizes import format_size, parse_size
from ._tracing import find_tracer, is_tracer

__all__ = [
    "Branch",
    "Cache",
    "ConfigError",
    "Const",
    "Fanout",
    "Graph",
    "GraphError",
    "Identity",
    "Input",
    "Lambda",
    "Node",
    "Operator",
    "Profile",
    "Registry",
    "RegistryError",
    "RegistryWarning",
    "Sequential",
    "ShapeTrace",
    "Sink",
    "Snapshot",
    "Switch",
    "Tap",
    "UnkeyableError",
    "content_key",
    "find_tracer",
    "format_size",
    "from_state",
    "is_tracer",
    "parse_size",
    "register_operator",
]
