"""Integer handles: how an array file is named inside a compiled JAX computation.

Under `jax.jit` a `DiskArray` lowers to one ``int32`` scalar, its handle. Types
carry only shape and dtype, so arrays of equal shape and dtype share one
compilation; host callbacks turn handles back into files through this registry.

Lifetime. A file is kept alive by the `DiskArray` objects that hold it. A file made
by a host callback inside a compiled computation has no such holder yet: it is kept
in ``_unclaimed`` until the computation's outputs are turned back into `DiskArray`
objects (`claim`). Intermediates that never leave the computation are released at
the start of the next compiled call that takes a `DiskArray` (`sweep`), when no
callback is running; so a training loop keeps at most one step's intermediates on
disk. This assumes compiled calls on `DiskArray` are made from one thread at a
time.
"""

from __future__ import annotations

import itertools
import threading
import weakref
from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import DTypeLike

from ..planning._budget import default_page_shape, get_budget
from ..storage._paged_file import Region

__all__ = ["ZERO_HANDLE", "ConstantFile", "ZeroFile", "claim", "lookup", "register", "sweep"]

#: The handle of an all-zero array of any shape (the additive identity for
#: gradients), which has no file.
ZERO_HANDLE = 0


class ConstantFile:
    """An array with every element equal to ``value`` and no file behind it.

    Used for the symbolic zero (handle 0) and for the cotangent of a sum over all
    axes, which would otherwise be written to disk only to be read back.
    """

    writable = False
    on_disk = False  # reads cost no I/O (the plan counts none)

    def __init__(
        self, shape: Sequence[int], dtype: DTypeLike, value: complex | np.generic | np.ndarray = 0
    ):
        self.shape: tuple[int, ...] = tuple(shape)
        self.dtype: np.dtype[Any] = np.dtype(dtype)
        # (numpy's stubs take ``dtype[Any].type`` for `np.void`'s constructor)
        self.value: np.generic = self.dtype.type(value)  # type: ignore[call-overload]
        self.page_shape = default_page_shape(self.shape, self.dtype.itemsize, get_budget())

    def read(self, region: Region | None = None, out: np.ndarray | None = None) -> np.ndarray:
        """The value over ``region``, in ``out`` when given (as `ArrayFile.read`)."""
        if out is not None:
            out.fill(self.value)
            return out
        shape = self.shape if region is None else tuple(s.stop - s.start for s in region)
        return np.full(shape, self.value, self.dtype)

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape)) * self.dtype.itemsize


class ZeroFile(ConstantFile):
    """The all-zero array of handle 0."""

    def __init__(self, shape: Sequence[int], dtype: DTypeLike):
        super().__init__(shape, dtype, 0)
        self.handle = ZERO_HANDLE


_lock = threading.Lock()
_counter = itertools.count(1)
# any array file an operation makes (a `PagedFile`, a `ConstantFile`, a chain's...)
_live: weakref.WeakValueDictionary[int, Any] = weakref.WeakValueDictionary()
_unclaimed: dict[int, Any] = {}
_in_flight = [0]


def register(f: Any, *, unclaimed: bool = False) -> int:
    """Give ``f`` a handle (once); with ``unclaimed`` keep it alive until claimed."""
    with _lock:
        h = getattr(f, "handle", None)
        if h is None:
            h = next(_counter)
            if h >= 2**31:
                raise OverflowError("gradpipe.ooc ran out of int32 array handles.")
            f.handle = h
            _live[h] = f
        if unclaimed:
            _unclaimed[h] = f
        return h


def lookup(handle: int, shape: Sequence[int], dtype: DTypeLike) -> Any:
    """The file behind ``handle``; a clear error when it has been released."""
    handle = int(handle)
    if handle == ZERO_HANDLE:
        return ZeroFile(shape, dtype)
    with _lock:
        f = _live.get(handle)
    if f is None:
        raise RuntimeError(
            f"gradpipe.ooc array handle {handle} refers to an array that has been released. "
            "A DiskArray produced inside one jitted call was used by another after it was "
            "dropped; return it from the jitted function and keep a reference to it."
        )
    return f


def claim(handle: int) -> Any:
    """Hand the file behind ``handle`` to a new holder (None for the zero handle)."""
    handle = int(handle)
    if handle == ZERO_HANDLE:
        return None
    with _lock:
        f = _unclaimed.pop(handle, None) or _live.get(handle)
    if f is None:
        lookup(handle, (), np.float32)  # raises the explanatory error
    return f


def sweep() -> int:
    """Release unclaimed intermediates when no callback is running; returns how many."""
    with _lock:
        if _in_flight[0]:
            return 0
        n = len(_unclaimed)
        _unclaimed.clear()
        return n


class callback_running:
    """Marks a host callback in flight, so `sweep` leaves its files alone."""

    def __enter__(self) -> None:
        with _lock:
            _in_flight[0] += 1

    def __exit__(self, *exc: object) -> None:
        with _lock:
            _in_flight[0] -= 1
