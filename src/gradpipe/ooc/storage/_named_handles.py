"""Every handle of a named file reads what the name holds now.

`DiskArray.open` twice on one path gives two `PagedFile` objects, each with its own
descriptor. A rewrite through one of them (``update_``, a set-item, ``from_numpy``
or ``save`` over the path) renames a new file over the name, and a descriptor opened
before the rename keeps reading the old file: the other handle would read stale
values, silently, for as long as it lives. So the handles of one path are
registered here by the path they resolve to, each path has a *generation* that
every replacement bumps, and a handle whose generation is behind reopens the path
before it next touches the file (`PagedFile._fd`).

The bump happens in a ``finally`` of the replacing code, so an interrupt at any
point still leaves the other handles reopening on next use; reopening when nothing
was replaced costs one ``open`` and is never wrong.

Results computed lazily from the other handles must be computed before the
replacement (else they would read the new values): the layers above register a
hook for that (`on_replace`), called with the handles about to be replaced.
"""

from __future__ import annotations

import contextlib
import os
import threading
import weakref
from collections.abc import Callable
from typing import Any

from ._file_ops import Closer
from ._header import HEADER_BYTES, decode_header

__all__ = [
    "NamedHandle",
    "aliases",
    "before_replace",
    "generation",
    "key_of",
    "on_replace",
    "register",
    "replaced",
]

_lock = threading.Lock()
_handles: dict[str, weakref.WeakSet[Any]] = {}
_generations: dict[str, int] = {}
_pruned = [256]  # how many names there were after the last pruning
_hooks: list[Callable[[list[Any]], None]] = []


def key_of(path: str) -> str:
    """The name every handle of ``path`` is registered by (symlinks resolved)."""
    return os.path.realpath(path)


def register(handle: Any, key: str) -> int:
    """Note that ``handle`` reads the file named ``key``; returns its generation."""
    with _lock:
        if len(_handles) > 4 * _pruned[0]:
            # forget the names no handle reads any more (the scratch files a
            # cluster's tasks open by path would otherwise pile up)
            for name in [k for k, v in _handles.items() if not v]:
                del _handles[name]
            _pruned[0] = max(256, len(_handles))
        _handles.setdefault(key, weakref.WeakSet()).add(handle)
        return _generations.get(key, 0)


def generation(key: str) -> int:
    """How many times the file named ``key`` was replaced in this process."""
    return _generations.get(key, 0)


def replaced(key: str) -> int:
    """Record that a new file was renamed over ``key`` (or may have been); returns
    the new generation. Handles behind it reopen the name on next use."""
    with _lock:
        _generations[key] = _generations.get(key, 0) + 1
        live = _handles.get(key)
        if live is not None and not live:
            del _handles[key]
        return _generations[key]


def aliases(handle: Any, key: str | None) -> list[Any]:
    """The other live handles of the file named ``key``."""
    if key is None:
        return []
    with _lock:
        return [h for h in _handles.get(key, ()) if h is not handle]


def on_replace(hook: Callable[[list[Any]], None]) -> None:
    """Call ``hook(handles)`` before a file is renamed over the name those handles
    read (the layers above compute what still reads them lazily)."""
    _hooks.append(hook)


def before_replace(handle: Any, key: str | None) -> None:
    """Run the hooks for the handles of ``key`` other than ``handle``."""
    others = aliases(handle, key)
    if others:
        for hook in _hooks:
            hook(others)


def names(path: str, fd: int) -> bool:
    """Whether ``path`` names the open file ``fd`` now."""
    try:
        a, b = os.stat(path), os.fstat(fd)
    except OSError:
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


class NamedHandle:
    """The descriptor of a `PagedFile`, kept on the file its name holds now."""

    path: str
    shape: tuple[int, ...]
    dtype: Any
    page_shape: tuple[int, ...]
    writable: bool
    _own_fd: int
    _map: Any
    _closer: Closer
    _key: str | None
    _generation: int
    _follow_lock: threading.Lock

    def _paged(self, page_shape: tuple[int, ...]) -> None:
        raise NotImplementedError

    @property
    def _fd(self) -> int:
        """The descriptor of the file this handle's name holds now: a handle whose
        name was replaced through another handle reopens it first (`_named_handles`)."""
        if self._key is not None and self._generation != generation(self._key):
            self._follow()
        return self._own_fd

    def _adopt(self, fd: int, keep: bool = True) -> None:
        """Read and write ``fd`` from now on, closing the descriptor held before."""
        old = self._own_fd
        self._closer.state = (fd, () if keep else (self.path,))
        self._own_fd, self._map = fd, None
        if old != fd:
            with contextlib.suppress(OSError):
                os.close(old)

    def _register(self) -> None:
        self._key = key_of(self.path)
        self._generation = register(self, self._key)

    def _follow(self) -> None:
        assert self._key is not None
        with self._follow_lock:
            gen = generation(self._key)
            if gen == self._generation:
                return
            fd = os.open(self._key, os.O_RDWR if self.writable else os.O_RDONLY)
            try:
                found = decode_header(os.pread(fd, HEADER_BYTES, 0), self.path)
            except BaseException:
                os.close(fd)
                raise
            if found[:2] != (self.shape, self.dtype):
                os.close(fd)
                raise ValueError(
                    f"{self.path!r} was replaced in this process by an array of shape "
                    f"{found[0]} and dtype {found[1]}; this handle had shape {self.shape} "
                    f"and dtype {self.dtype}. Open the file again with DiskArray.open."
                )
            self._adopt(fd)
            self._paged(found[2])  # the new file may be paged otherwise
            self._generation = gen
