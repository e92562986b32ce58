"""A bounded server-side store of VJP residuals, addressed by opaque handles."""

from __future__ import annotations

import secrets
import threading
import time
from collections import OrderedDict
from typing import Any

__all__ = ["HANDLE_BYTES", "HandleStore", "UnknownHandle"]

HANDLE_BYTES = 16


class UnknownHandle(KeyError):
    """The handle was never issued by this server process, or has been evicted."""


class HandleStore:
    """Residuals kept by a forward request, for the vjp request that follows it.

    A handle is ``2 * HANDLE_BYTES`` random hex characters, so it cannot be guessed
    and never collides with an earlier one: a vjp that names a handle gets the
    residuals of exactly the forward request that issued it, or `UnknownHandle`.
    The store is bounded by entries, bytes and age; the least recently used entries
    go first. A missing handle is never an error of the caller's data — the client
    answers it by re-sending the inputs — so eviction costs time, never correctness.
    Thread-safe.

    **Arguments:**

    - `max_entries`: at most this many residual sets are held.
    - `max_bytes`: at most this many bytes of residuals (as reported by ``.nbytes``).
    - `ttl`: seconds after which an unused entry expires.
    """

    def __init__(self, max_entries: int = 64, max_bytes: int = 2**30, ttl: float = 600.0):
        if max_entries < 1 or max_bytes < 1 or ttl <= 0:
            raise ValueError(
                "HandleStore needs max_entries >= 1, max_bytes >= 1 and ttl > 0, got "
                f"{max_entries=}, {max_bytes=}, {ttl=}."
            )
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.ttl = ttl
        self._entries: OrderedDict[str, tuple[Any, int, float]] = OrderedDict()
        self._bytes = 0
        self._kept = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def nbytes(self) -> int:
        """Bytes of residuals held now."""
        return self._bytes

    @property
    def kept_bytes(self) -> int:
        """Bytes of residuals ever kept (a running total, evicted ones included)."""
        return self._kept

    def put(self, residuals: Any, nbytes: int | None = None) -> str | None:
        """Keep ``residuals``; return the new handle, or ``None`` if they cannot fit."""
        size = int(nbytes if nbytes is not None else getattr(residuals, "nbytes", 0))
        if size > self.max_bytes:
            return None
        handle = secrets.token_hex(HANDLE_BYTES)
        with self._lock:
            self._expire(time.monotonic())
            while self._entries and (
                len(self._entries) >= self.max_entries or self._bytes + size > self.max_bytes
            ):
                _, (_, old_size, _) = self._entries.popitem(last=False)
                self._bytes -= old_size
            self._entries[handle] = (residuals, size, time.monotonic())
            self._bytes += size
            self._kept += size
        return handle

    def get(self, handle: str) -> Any:
        """The residuals under ``handle``; raises `UnknownHandle` when there are none."""
        with self._lock:
            now = time.monotonic()
            self._expire(now)
            entry = self._entries.get(handle)
            if entry is None:
                raise UnknownHandle(handle)
            residuals, size, _ = entry
            self._entries[handle] = (residuals, size, now)
            self._entries.move_to_end(handle)
            return residuals

    def discard(self, handle: str) -> None:
        """Forget ``handle`` if it is held."""
        with self._lock:
            entry = self._entries.pop(handle, None)
            if entry is not None:
                self._bytes -= entry[1]

    def _expire(self, now: float) -> None:
        while self._entries:
            handle, (_, size, stamp) = next(iter(self._entries.items()))
            if now - stamp <= self.ttl:
                break
            del self._entries[handle]
            self._bytes -= size
