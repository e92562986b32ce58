"""Stored arrays a backward pass will read, kept as the forward pass saw them.

JAX's backward pass of an operation reads the operation's inputs and output as
they were when it ran (its residuals). A `DiskArray` residual names a file, and a
file can be written in place afterwards (``x[...] = v``, `update_`, a new file
saved over its name) before the backward pass runs: inside the loss itself, or
between ``jax.vjp`` and a call of its pullback. The backward pass would then read
the new values: a gradient of another function, silently.

So an operation JAX differentiates eagerly keeps each DiskArray residual it holds
(`keep`) as a reader of its file (`_chain_readers`, as a chain is): a write in
place first copies the file to a scratch file, and the backward pass reads the
copy (`as_kept`). Once the backward pass has run (`done`), a write no longer
copies: the pullback is usually dropped by then, and copying each step's data
after its gradient would double a training loop's I/O. A pullback called again
after such a write is refused, never computed on the new values.
"""

from __future__ import annotations

from typing import Any

from ..execution._store import Store
from ..planning._chain_readers import Storer, watch
from ..planning._resident import is_resident
from ._array import DiskArray, _is_concrete

__all__ = ["KeptResidual", "as_kept", "done", "keep"]


class KeptResidual:
    """One residual's file, copied before it is written in place (`store`)."""

    def __init__(self, f: Any) -> None:
        self.file = f
        self.stored: Any = None  # the copy, once the file was written
        self.done = False  # the backward pass has run
        self.stale = False  # written after it ran: a later backward pass is refused
        watch(f, self)

    def store(self, driver: Storer) -> KeptResidual:
        """Called before the file is written in place (`settle_readers`)."""
        if self.done:
            self.stale = True
        elif self.stored is None:
            self.stored = driver.forward(Store(), [self.file])  # type: ignore[attr-defined]
        return self


def keep(value: Any) -> KeptResidual | None:
    """A keeper of ``value`` where it is a concrete `DiskArray` whose file can be
    written in place: a stored file, or a chain (a result a set-item writes into)."""
    if not isinstance(value, DiskArray) or not _is_concrete(value._handle):
        return None
    f = value._file
    if is_resident(f) or not callable(getattr(f, "write", None)):
        return None  # (a parameter, a constant: never written in place)
    return KeptResidual(f)


def as_kept(value: Any, kept: KeptResidual | None) -> Any:
    """``value`` as the forward pass saw it: the copy made before a write, or a
    clear refusal where it was written after an earlier backward pass."""
    if kept is None:
        return value
    if kept.stale:
        raise RuntimeError(
            f"gradpipe.ooc: a DiskArray{list(kept.file.shape)} this backward pass reads "
            "was written in place after the pass ran once; running it again would read "
            "the new values. Compute the gradient anew (call jax.vjp again), or write to "
            "a copy of the array (copy.deepcopy(x))."
        )
    return DiskArray._wrap(kept.stored) if kept.stored is not None else value


def done(kept: tuple[KeptResidual | None, ...]) -> None:
    """The backward pass ran: later writes copy nothing (`KeptResidual.store`)."""
    for k in kept:
        if k is not None:
            k.done = True
