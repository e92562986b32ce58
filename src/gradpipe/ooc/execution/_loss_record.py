"""What a loss's own pass records besides its value (`_one_pass`): the gradient of
the loss with respect to each in-memory operand of its graph, folded tile by tile
(`Fold`), kept under the loss's token until its backward pass takes it
(`take_record`, read by `_deferred_cotangents`).
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

from ..planning._chain import ChainFile
from ..storage._page_layout import is_whole
from ..storage._paged_file import Region

__all__ = ["LOSS", "Fold", "Record", "keep_record", "take_record"]

#: The consumer edge of the chain a loss reduces: the loss itself.
LOSS = (0, -1)

# The latest record of each call site (a token), as long as the chain its loss
# reduces lives: a backward pass needs that chain too, and a record whose backward
# never runs (its gradient unused, pruned by jit) goes with it, gradient files and all.
_records: dict[int, weakref.ref[Record]] = {}
_kept: weakref.WeakKeyDictionary[Any, Record] = weakref.WeakKeyDictionary()
_records_lock = threading.Lock()


class Record:
    """What a loss's pass computed besides its value: the gradient of the loss (for
    a cotangent of 1) with respect to each in-memory operand of each chain in its
    graph (``grads[(id(chain), position)]``), and the consumers of each chain."""

    def __init__(
        self,
        top: ChainFile,
        chains: list[ChainFile],
        consumers: dict[int, set[tuple[int, int]]],
    ) -> None:
        self.top = weakref.ref(top)
        self.consumers = consumers
        # (a JAX array where a device's pass left it there: `Fold.add_summed`)
        self.grads: dict[tuple[int, int], np.ndarray | jax.Array] = {}
        self._chains = {id(c): weakref.ref(c) for c in chains}
        # stored arrays differentiated: the file their gradient is written to
        self._data: dict[int, tuple[Any, Any]] = {}

    def write_gradient(self, array: Any, file: Any) -> None:
        """Write the gradient of the stored ``array`` to ``file`` (a new scratch file)."""
        self._data[id(array)] = (array, file)

    def gradient_of(self, array: Any) -> Any:
        """The file the gradient of the stored ``array`` goes to, or None."""
        kept = self._data.get(id(array))
        return kept[1] if kept is not None and kept[0] is array else None

    def commit(self) -> None:
        """The stored arrays' gradients are written (`PagedFile.commit`)."""
        for _, f in self._data.values():
            f.commit()

    def discard(self) -> None:
        """Remove the stored arrays' gradient files (a pass that did not finish)."""
        for _, f in self._data.values():
            f.discard()
        self._data.clear()

    def holds(self, chain: Any) -> bool:
        ref = self._chains.get(id(chain))
        return ref is not None and ref() is chain


class Fold:
    """The tiles' shares of the loss and of its gradients, folded as they come: a
    sum adds them; an extremum keeps the best tile's, adding those of tiles that tie
    with it, and divides the gradients by the number of tied elements at the end
    (JAX's share of an extremum's gradient). A NaN extremum stays, with no ties."""

    def __init__(self, kind: str, acc: np.dtype, record: Record) -> None:
        self.kind, self.record = kind, record
        self.value: Any = np.zeros((), acc) if kind == "sum" else None
        self.ties = np.zeros((), acc)

    def add(self, uses: list[tuple[ChainFile, int, Region | None]], outs: list[Any]) -> None:
        if self.kind == "sum":
            self.value = self.value + np.asarray(outs[0], self.value.dtype)
            grads = outs[1:]
        else:
            best, ties, grads = outs[0], outs[1], outs[2:]
            if self.value is not None and np.isnan(self.value):
                return
            if np.isnan(best) or self.value is None or self._beats(best, self.value):
                self.record.grads.clear()  # a new extremum: the earlier ties are not
                self.value, self.ties = best, np.zeros((), self.ties.dtype)
            elif best != self.value:
                return
            self.ties = self.ties + ties
        for (c, pos, r), grad in zip(uses, grads):
            _add(self.record, c, pos, r, grad)

    def add_summed(
        self,
        shares: list[Any],
        groups: list[tuple[list[tuple[ChainFile, int, Region | None]], list[Any]]],
    ) -> int:
        """A sum's tiles folded on their device (`_device_sums`): their shares of the
        loss added here in the order they came, as `add` adds them, and each
        group's gradients' sums once, each left on the device where it is an
        operand's whole gradient (JAX takes it there). Returns the bytes of the
        gradients brought back."""
        for share in shares:
            self.value = self.value + np.asarray(share, self.value.dtype)
        return self.add_groups(groups)

    def add_groups(
        self, groups: list[tuple[list[tuple[ChainFile, int, Region | None]], list[Any]]]
    ) -> int:
        """Each group's gradients' sums from a device, as `add_summed` takes them;
        returns the bytes brought back."""
        back = 0
        for uses, grads in groups:
            for (c, pos, r), grad in zip(uses, grads):
                back += _add(self.record, c, pos, r, grad)
        return back

    def _beats(self, a: Any, b: Any) -> bool:
        return bool(a > b) if self.kind == "max" else bool(a < b)

    def finish(self, finish: Callable[[Any], Any] | None) -> Any:
        grads = self.record.grads
        if self.kind != "sum":  # (a sum's tiles computed them finished: `Tile.program`)
            for key, grad in grads.items():
                with np.errstate(divide="ignore", invalid="ignore"):
                    grads[key] = np.asarray(grad / self.ties, grad.dtype)
        if self.kind == "sum" and finish is not None:
            return finish(self.value)
        return self.value


def _add(record: Record, c: ChainFile, pos: int, region: Region | None, grad: Any) -> int:
    """Add ``grad`` to the gradient recorded for that use; returns the bytes it
    brought back from a device (a device's whole gradient of an operand, the first
    for it, is kept there)."""
    src = c.node.sources[pos]  # type: ignore[union-attr]
    key = (id(c), pos)
    acc = record.grads.get(key)
    back = 0
    if isinstance(grad, jax.Array):
        whole = is_whole(region, src.shape)
        same = grad.shape == src.shape and np.dtype(grad.dtype) == src.dtype
        if acc is None and whole and same:
            record.grads[key] = grad
            return 0
        back += grad.nbytes
        grad = np.asarray(grad)
    if isinstance(acc, jax.Array):  # (a second gradient for it: added on the host)
        back += acc.nbytes
        acc = record.grads[key] = np.array(acc)
    if acc is None:
        acc = record.grads[key] = np.zeros(src.shape, src.dtype)
    if region is None or not src.shape:
        acc += np.asarray(grad, src.dtype).reshape(acc.shape)
    else:
        acc[region] += np.asarray(grad, src.dtype)
    return back


def take_record(token: int) -> Record | None:
    """The record the pass of the loss named ``token`` left (once: it is removed)."""
    with _records_lock:
        ref = _records.pop(token, None)
        record = None if ref is None else ref()
        top = None if record is None else record.top()
        if top is not None:
            _kept.pop(top, None)
        return record


def keep_record(token: int, record: Record) -> None:
    """Keep ``record`` for the backward pass of the loss named ``token``."""
    top = record.top()
    if top is None:
        return
    with _records_lock:
        _records[token] = weakref.ref(record)
        _kept[top] = record
