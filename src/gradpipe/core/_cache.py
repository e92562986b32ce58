"""`Cache`: memoise an operator on the content of its whole input."""

from __future__ import annotations

import copy
import threading
from collections import OrderedDict
from typing import Any

import numpy as np

from ._config import ConfigError
from ._keys import UnkeyableError, content_key
from ._operator import Operator
from ._tracing import refuse_tracer

__all__ = ["Cache"]


def _detach(value: Any, *, copy_arrays: bool) -> Any:
    """``value`` with fresh tuples, lists and dicts and, with ``copy_arrays``, each
    NumPy array replaced by a read-only copy.

    The cache stores a detached copy of the inner output and hands out fresh
    containers around it, so that nothing a caller does changes what later hits
    return: an output sharing memory with the input (``x[1:]``, or ``x`` itself)
    would otherwise change when the caller writes into the input, and a returned list
    or dict would change when the caller appends to it. Writing into a returned array
    raises instead.
    """
    if isinstance(value, np.ndarray):
        if not copy_arrays:
            return value
        value = value.copy()
        value.flags.writeable = False
        return value
    if isinstance(value, dict):
        out = copy.copy(value)
        for k, v in value.items():
            out[k] = _detach(v, copy_arrays=copy_arrays)
        return out
    if isinstance(value, list):
        items = copy.copy(value)
        items[:] = [_detach(v, copy_arrays=copy_arrays) for v in value]
        return items
    if type(value) is tuple:
        return tuple(_detach(v, copy_arrays=copy_arrays) for v in value)
    if isinstance(value, tuple) and hasattr(value, "_make"):  # a namedtuple
        return value._make(_detach(v, copy_arrays=copy_arrays) for v in value)
    return value


class _Same:
    """A key part equal only to another `_Same` of the very same object."""

    __slots__ = ("obj",)

    def __init__(self, obj: Any) -> None:
        self.obj = obj

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Same) and other.obj is self.obj

    def __hash__(self) -> int:
        return id(self.obj)


def _operator_key(op: Operator, _path: tuple[int, ...] = ()) -> tuple:
    """A key for ``op`` and every operator it holds: equal only while none changed.

    Each operator is keyed by identity (the key holds it, so its id cannot be reused
    while the key lives) and by the content of its configuration, field by field:
    numbers, strings, arrays (by their bytes) and containers of them by content,
    nested operators by this same key, anything else (a function) by identity. So
    a parameter changed in place anywhere in a pipeline changes the key, also beside
    or inside a step that cannot be saved. Keying the whole pipeline by its saved
    state instead lost every parameter as soon as one step had no state: with
    ``Scale(2.0) | Lambda(f)``, setting ``factor = 3.0`` kept serving the old
    results. Identity is needed too: a JAX operator's configuration records its
    arrays only by shape and dtype, so a retrained one put in the old one's place
    would otherwise share its key.

    An operator whose configuration cannot be read (a `Lambda`, a profiled or
    snapshot step) is keyed by identity and by the operators it holds; what else
    it holds (a function, what that function closes over) is not seen.
    """
    if id(op) in _path:  # an operator that holds itself: its identity is its key
        return ("cycle", _Same(op))
    path = (*_path, id(op))
    try:
        config = op.get_config()
    except ConfigError:
        held = {
            name: _operators_in(value, path) for name, value in getattr(op, "__dict__", {}).items()
        }
        return (_Same(op), "held", tuple((name, key) for name, key in held.items() if key))
    return (_Same(op), "config", tuple((name, _config_key(v, path)) for name, v in config.items()))


def _config_key(value: Any, path: tuple[int, ...]) -> Any:
    if isinstance(value, Operator):
        return _operator_key(value, path)
    kind = type(value)
    if kind is tuple or kind is list:
        return (kind.__name__, tuple(_config_key(v, path) for v in value))
    if kind is dict:
        return (
            "dict",
            tuple((_config_key(k, path), _config_key(v, path)) for k, v in value.items()),
        )
    try:
        return content_key(value)
    except UnkeyableError:
        return _Same(value)  # a function, an arbitrary object: only by identity


def _operators_in(value: Any, path: tuple[int, ...]) -> tuple:
    """The keys of the operators in ``value``, through tuples, lists and dict values."""
    if isinstance(value, Operator):
        return (_operator_key(value, path),)
    if type(value) in (tuple, list):
        return tuple(key for v in value for key in _operators_in(v, path))
    if type(value) is dict:
        return tuple(key for v in value.values() for key in _operators_in(v, path))
    return ()


class Cache(Operator):
    """Runs ``inner`` once per distinct input and returns the stored result after.

    The key is the content of the whole input (every positional and keyword
    argument, arrays anywhere in nested tuples, lists and dicts by dtype, shape and
    bytes; scalars with their type; dict keys and structure; see `content_key`)
    together with the inner operator and every step it holds, at any depth, each by
    identity and by its parameters. So a parameter changed in place
    (``pipeline[0].factor = 3.0``, ``step.weights[0] = 1.0``) or a step replaced is
    a new key, also beside or inside steps that cannot be saved.

    Not seen, so call `clear` after changing them: what a `Lambda`'s function (or
    any function parameter) reads from its closure or from globals, and an object
    parameter other than a number, string, array, operator or a tuple, list or dict
    of them that is changed in place (it is compared by identity).

    The cache is bounded (least recently used entries are dropped first),
    thread-safe, and counts hits and misses. It keeps its own read-only copy of the
    NumPy arrays in an output and returns fresh tuples, lists and dicts on every
    call, so writing into an input or appending to a result never changes what a
    later hit returns; writing into a returned array raises.

    Under ``jax.jit``/``vmap``/``grad`` it raises `TypeError`: a tracer has no value
    to key. JAX's compilation cache already reuses the compiled function; apply
    `Cache` outside the jitted function.

    **Arguments:**

    - `inner`: the operator to memoise.
    - `maxsize`: the most entries kept (>= 1).
    """

    def __init__(self, inner: Operator, maxsize: int = 128) -> None:
        if not isinstance(inner, Operator):
            raise TypeError(f"Cache.inner must be an Operator, got {type(inner).__name__}.")
        if type(maxsize) is not int or maxsize < 1:
            raise ValueError(f"Cache.maxsize must be an int >= 1, got {maxsize!r}.")
        self.inner = inner
        self.maxsize = maxsize
        self.hits = 0
        self.misses = 0
        self._entries: OrderedDict[tuple, Any] = OrderedDict()
        self._lock = threading.Lock()

    def _apply(self, *args: Any, **kwargs: Any) -> Any:
        refuse_tracer(
            "Cache",
            "cannot key a traced value: inside jax.jit, JAX's compilation cache already does this",
            "Apply Cache outside the jitted function.",
            *args,
            **kwargs,
        )
        try:
            key = (_operator_key(self.inner), content_key(args), content_key(kwargs))
        except UnkeyableError as error:
            raise TypeError(f"Cache cannot key this input: {error}") from None
        with self._lock:
            if key in self._entries:
                self._entries.move_to_end(key)
                self.hits += 1
                return _detach(self._entries[key], copy_arrays=False)
            self.misses += 1
        value = _detach(self.inner(*args, **kwargs), copy_arrays=True)
        with self._lock:
            self._entries[key] = value
            self._entries.move_to_end(key)
            while len(self._entries) > self.maxsize:
                self._entries.popitem(last=False)
        return _detach(value, copy_arrays=False)

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        """Drop every entry and reset the counters."""
        with self._lock:
            self._entries.clear()
            self.hits = self.misses = 0

    def info(self) -> dict[str, int]:
        """``{"hits", "misses", "size", "maxsize"}``."""
        with self._lock:
            return {
                "hits": self.hits,
                "misses": self.misses,
                "size": len(self._entries),
                "maxsize": self.maxsize,
            }
