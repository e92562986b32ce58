"""Residuals of a forward pass, and the per-component cache that keeps them.

`Component.apply` can run the forward pass through ``jax.vjp`` and keep what the
backward pass needs (the *residuals*), so that a following `Component.vjp` on the
same input runs only the backward pass. The cache is keyed by `ContentKey`, which
compares inputs to the bit; it belongs to one component, so two components called
with equal inputs never see each other's entries.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import jax

from ._keys import ContentKey

__all__ = ["CacheInfo", "CacheLimits", "ResidualCache", "Residuals"]


@dataclass(frozen=True)
class CacheLimits:
    """Bounds of a component's residual cache: the least recently used entries are
    dropped once either bound is passed. An entry larger than `max_bytes` is never
    kept.

    **Arguments:**

    - `max_entries`: how many inputs' residuals to keep.
    - `max_bytes`: how many bytes of residuals and key arrays to keep.
    """

    max_entries: int = 8
    max_bytes: int = 1 << 30

    def __post_init__(self) -> None:
        if self.max_entries < 0 or self.max_bytes < 0:
            raise ValueError(f"CacheLimits must be non-negative, got {self}.")


class Residuals:
    """What the backward pass of one input needs, kept on the device.

    Opaque: pass it to `Component.vjp_from` of the component that made it. `nbytes`
    counts the device memory it holds, so a server can bound what it keeps.
    """

    __slots__ = ("_owner", "_signature", "_vjp_fn", "nbytes")

    def __init__(self, owner: object, signature: Any, vjp_fn: Any) -> None:
        self._owner = owner
        self._signature = signature
        self._vjp_fn = vjp_fn
        self.nbytes = sum(leaf.nbytes for leaf in _unique_arrays(vjp_fn))

    def __repr__(self) -> str:
        return f"Residuals(nbytes={self.nbytes})"


def _unique_arrays(tree: Any) -> list[jax.Array]:
    seen: dict[int, jax.Array] = {}
    for leaf in jax.tree.leaves(tree):
        if isinstance(leaf, jax.Array):
            seen.setdefault(id(leaf), leaf)
    return list(seen.values())


@dataclass(frozen=True)
class CacheInfo:
    """Counters of a `ResidualCache`: `hits`, `misses`, `entries` and `nbytes` held."""

    hits: int
    misses: int
    entries: int
    nbytes: int


@dataclass(frozen=True, eq=False)
class _Entry:
    key: ContentKey
    residuals: Residuals
    nbytes: int
    buffers: tuple[jax.Array, ...] = ()

    def dead(self) -> bool:
        """Whether a device buffer of the key or the residuals has been deleted (the
        caller deleted or donated an input array it passed, which the key holds)."""
        return any(a.is_deleted() for a in self.buffers)


class ResidualCache:
    """A thread-safe LRU map from `ContentKey` to `Residuals`, bounded by entries and
    bytes.

    A lookup first keeps the entries of the same kind as the key (structure, static
    values, dtypes, shapes, devices: no array read); only when several remain are
    they narrowed by the fingerprint of their device arrays; an exact comparison
    decides, on the host for NumPy inputs and on the device for JAX arrays. These
    reads happen outside the lock, so threads do not queue behind each other's
    comparisons; an entry is immutable, so one evicted meanwhile still answers
    correctly.

    **Arguments:**

    - `limits`: a `CacheLimits`.
    """

    def __init__(self, limits: CacheLimits | None = None) -> None:
        self.limits = limits or CacheLimits()
        self._lock = threading.Lock()
        self._entries: OrderedDict[int, _Entry] = OrderedDict()
        self._serial = 0
        self._nbytes = 0
        self._hits = 0
        self._misses = 0

    def _kin(self, key: ContentKey) -> list[tuple[int, _Entry]]:
        """The live entries of the same kind as ``key``. An entry whose key or residuals
        hold a deleted buffer can never be read again: it is dropped here, so that a
        cache never makes a call fail."""
        with self._lock:
            kin = [(n, e) for n, e in self._entries.items() if e.key.same_kind(key)]
            dead = [n for n, e in kin if e.dead()]
            for serial in dead:
                self._drop(serial)
        return [(n, e) for n, e in kin if n not in dead]

    def _drop(self, serial: int) -> None:
        entry = self._entries.pop(serial, None)
        if entry is not None:
            self._nbytes -= entry.nbytes

    def _matches(self, serial: int, entry: _Entry, test: Any) -> bool:
        """``test(entry)``, or ``False`` (and the entry dropped) when a buffer it reads
        was deleted meanwhile."""
        try:
            return bool(test(entry))
        except RuntimeError:
            if not entry.dead():
                raise
            with self._lock:
                self._drop(serial)
            return False

    def _find(self, key: ContentKey) -> tuple[int, _Entry] | None:
        candidates = self._kin(key)
        if len(candidates) > 1:  # the fingerprint narrows; only equality decides
            candidates = [
                (n, e)
                for n, e in candidates
                if self._matches(n, e, lambda e: e.key.digest == key.digest)
            ]
        for serial, entry in candidates:
            if self._matches(serial, entry, lambda e: e.key == key):
                return serial, entry
        return None

    def get(self, key: ContentKey) -> Residuals | None:
        """The residuals kept for an input equal to ``key``, or ``None``."""
        found = self._find(key)
        with self._lock:
            if found is None:
                self._misses += 1
                return None
            self._hits += 1
            if found[0] in self._entries:
                self._entries.move_to_end(found[0])
        return found[1].residuals

    def twin(self, key: ContentKey) -> int | None:
        """The entry that almost surely holds ``key``'s input already (see `put`), by
        an opaque handle for `touch`; ``None`` when there is none. `Component.apply`
        asks before it runs the forward pass, so that the comparison does not compete
        with it, and then skips building residuals it would drop."""
        kin = self._kin(key)
        # An entry of the same kind with equal NumPy leaves (compared exactly, on the
        # host) and the same fingerprint of its device leaves is almost surely this
        # input applied again: it is kept (and marked recently used) and the new
        # residuals, equal to the bit since the same program ran on the same input,
        # are dropped, so that their memory is reused at once. Were it another input,
        # the cost is a recomputation on the new input's next vjp, never a wrong
        # answer, since lookups compare exactly.
        for serial, entry in kin:
            same = lambda e: e.key.same_host(key) and e.key.digest == key.digest
            if self._matches(serial, entry, same):
                return serial
        return None

    def touch(self, twin: int | None) -> bool:
        """Mark the entry `twin` found as recently used; whether it is still kept."""
        if twin is None:
            return False
        with self._lock:
            if twin in self._entries:
                self._entries.move_to_end(twin)
                return True
        return False

    def put(self, key: ContentKey, residuals: Residuals, look: bool = True) -> bool:
        """Keep ``residuals`` under ``key``; whether the cache now holds residuals for
        ``key``'s input. With ``look=False`` the caller has already asked `twin`."""
        kept = _unique_arrays(residuals._vjp_fn)
        held = {id(a) for a in kept}
        nbytes = residuals.nbytes + sum(a.nbytes for a in key.arrays if id(a) not in held)
        buffers = tuple(kept) + tuple(a for a in key.arrays if isinstance(a, jax.Array))
        if nbytes > self.limits.max_bytes or self.limits.max_entries == 0:
            return False
        if look and self.touch(self.twin(key)):
            return True
        with self._lock:
            self._serial += 1
            self._entries[self._serial] = _Entry(key, residuals, nbytes, buffers)
            self._nbytes += nbytes
            while (
                len(self._entries) > self.limits.max_entries or self._nbytes > self.limits.max_bytes
            ):
                self._drop(next(iter(self._entries)))
        return True

    def clear(self) -> None:
        """Drop every entry (the counters stay)."""
        with self._lock:
            self._entries.clear()
            self._nbytes = 0

    def info(self) -> CacheInfo:
        """The current `CacheInfo`."""
        with self._lock:
            return CacheInfo(self._hits, self._misses, len(self._entries), self._nbytes)

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)
