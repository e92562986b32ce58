"""`Cache`: memoise an operator on the content of its whole input."""

from __future__ import annotations

import copy
import threading
from collections import OrderedDict
from typing import Any

import numpy as np

from ._config import ConfigError, state_to_json
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
        out = copy.copy(value)
        out[:] = [_detach(v, copy_arrays=copy_arrays) for v in value]
        return out
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


class Cache(Operator):
    """Runs ``inner`` once per distinct input and returns the stored result after.

    The key is the content of the whole input (every positional and keyword
    argument, arrays anywhere in nested tuples, lists and dicts by dtype, shape and
    bytes; scalars with their type; dict keys and structure; see `content_key`)
    together with the inner operator (by identity) and its configuration. The cache
    is bounded (least recently used entries are dropped first), thread-safe, and
    counts hits and misses. It keeps its own read-only copy of the NumPy arrays in
    an output and returns fresh tuples, lists and dicts on every call, so writing
    into an input or appending to a result never changes what a later hit returns;
    writing into a returned array raises.

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

    def _inner_key(self) -> tuple:
        """The inner operator itself and, when it can be saved, its configuration.

        The configuration makes a parameter changed in place a new key. It is not
        enough alone: a JAX operator's configuration records its arrays only by
        shape and dtype, so a retrained operator put in place of the old one would
        hit the old one's entries. The operator is compared by identity and held by
        the key, so its id cannot be reused by another object while an entry lives.
        """
        try:
            # Unsorted: an operator may read a configuration dict in order.
            config = state_to_json(self.inner.state)
        except ConfigError:
            config = None  # an unsaveable inner operator (a Lambda): identity alone
        return (_Same(self.inner), config)

    def _apply(self, *args: Any, **kwargs: Any) -> Any:
        refuse_tracer(
            "Cache",
            "cannot key a traced value: inside jax.jit, JAX's compilation cache already does this",
            "Apply Cache outside the jitted function.",
            *args,
            **kwargs,
        )
        try:
            key = (self._inner_key(), content_key(args), content_key(kwargs))
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
