"""Who reads a file without having copied it: chains, and results waiting to be read.

A chain (`_chain.ChainFile`) reads its sources when it is read, so a write into one
of them in place would change the chain's values after the fact. Each chain, and
each result that waits to be read (`execution._pending`), registers here as a
reader of the files it reads (`watch`); a write in place first stores every live
reader (`settle_readers`). `settle` computes the waiting results a pass reads
before the pass starts.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterable
from typing import Any, Protocol

import numpy as np

from ._chain_graph import leaves

__all__ = [
    "Reader",
    "Storer",
    "identity",
    "readers_of",
    "settle",
    "settle_name",
    "settle_readers",
    "unwatch",
    "watch",
]


class Reader(Protocol):
    """A value that reads its sources when it is read: ``stored`` is None until
    ``store(driver)`` writes (or computes) it."""

    @property
    def stored(self) -> Any: ...

    def store(self, driver: Storer) -> Any: ...


class Storer(Protocol):
    """What writes a chain to a file (the `Driver`): ``store(chain)`` is its stored
    copy."""

    def store(self, chain: Any) -> Any: ...


_readers: weakref.WeakKeyDictionary[Any, weakref.WeakSet[Reader]] = weakref.WeakKeyDictionary()
_readers_lock = threading.Lock()


def watch(source: Any, chain: Reader) -> None:
    """Note that ``chain`` reads ``source`` (so a write to it can keep the chain right)."""
    if isinstance(source, np.ndarray):
        return
    try:
        with _readers_lock:
            _readers.setdefault(source, weakref.WeakSet()).add(chain)
    except TypeError:  # not weakly referenceable: never written in place either
        pass


def unwatch(source: Any, chain: Reader) -> None:
    with _readers_lock:
        readers = _readers.get(source) if not isinstance(source, np.ndarray) else None
        if readers is not None:
            readers.discard(chain)


def readers_of(source: Any) -> list[Reader]:
    """The live chains that read ``source`` directly and are still computed on read."""
    try:
        with _readers_lock:
            readers = list(_readers.get(source, ()))
    except TypeError:
        return []
    return [c for c in readers if c.stored is None]


def settle(values: Iterable[Any]) -> None:
    """Compute the results waiting to be read (`execution._pending`) that ``values``
    (files, chains over them) read: a pass does so before it starts, never inside."""
    for v in values:
        if isinstance(v, np.ndarray) or not hasattr(v, "shape"):
            continue
        for leaf in leaves(v):
            if getattr(leaf, "waits_to_be_read", False):
                leaf.resolve()


def settle_readers(f: Any, driver: Storer) -> None:
    """Write every live chain that reads ``f`` before ``f`` is written in place (so
    the chain keeps the values it was made from); ``f`` may be a stored chain. The
    chains of every other handle of the same array (two `DiskArray.open` of one
    path, two `open_zarr` of one store) are written too: they read what ``f``'s
    write changes."""
    sources = [s for s in (f, getattr(f, "stored", None)) if s is not None]
    for source in sources + _other_handles(sources):
        for chain in readers_of(source):
            chain.store(driver)


def settle_name(name: Any, driver: Storer) -> None:
    """Write every live chain that reads an array named ``name`` (an `identity`), as
    `settle_readers` does, before something new is written under that name."""
    with _readers_lock:
        watched = list(_readers.keys())
    for source in watched:
        if identity(source) == name:
            for chain in readers_of(source):
                chain.store(driver)


def identity(x: Any) -> Any:
    """What names the array ``x`` is a handle of (the class's ``identity``
    property), or None. Read off the class: a waiting result asked for an
    attribute it lacks would compute itself."""
    prop = getattr(type(x), "identity", None)
    return prop.__get__(x) if isinstance(prop, property) else None


def _other_handles(sources: list[Any]) -> list[Any]:
    names = {i for i in map(identity, sources) if i is not None}
    if not names:
        return []
    with _readers_lock:
        watched = list(_readers.keys())
    return [k for k in watched if identity(k) in names and all(k is not s for s in sources)]
