"""Cotangents computed only if read: the backward pass of a loss whose own pass
computed its gradient (`_one_pass`).

JAX calls each operation's backward in turn. After a loss's one-pass forward, each
gets, instead of a computed cotangent, a `DeferredCotangent`: a promise, computed
only if something reads it, tagged with what it stands for (the loss's record,
the chain it is the cotangent of, the scalar cotangent of the loss, and which
consumers' shares it holds). An operation whose output's cotangent is complete
(every consumer of the chain in the loss's graph has contributed, and nothing else
has) returns its in-memory operands' gradients from the record, scaled by the
loss's cotangent, and deferred cotangents for its other inputs. JAX adds the
cotangents of a chain read twice (`merge`): a sum of deferred cotangents of the
same chain and record is deferred too; anything else is computed.

Whenever one of those conditions fails, the deferred cotangents are computed by the
ordinary backward passes, which is never wrong, only slower: a chain also used
outside the loss, a loss of two reductions of one chain, data differentiated.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..planning._chain import is_chain
from ..planning._resident import is_resident
from ..storage._paged_file import Region
from ._one_pass import LOSS, Record, in_memory, take_record
from ._pending import PendingResult

__all__ = ["DeferredCotangent", "backward", "merge", "product_gradient"]


class DeferredCotangent(PendingResult):
    """The cotangent of ``target`` (a chain of ``record``'s graph): ``scale`` times
    the share of the loss's gradient that reaches it through the consumer edges
    ``edges``; computed by the ordinary backward passes only if something reads it."""

    def __init__(
        self,
        run: Callable[[], Any],
        target: Any,
        dtype: Any,
        record: Record,
        scale: np.ndarray,
        edges: frozenset[tuple[int, int]],
    ) -> None:
        super().__init__(run, target.shape, dtype, target.page_shape)
        self.target = target
        self.record = record
        self.scale = scale
        self.edges = edges

    def read(self, region: Region | None = None, out: np.ndarray | None = None) -> np.ndarray:
        f = self.resolve()  # any computed file: a constant takes no ``out``
        return f.read(region) if out is None else f.read(region, out)

    def complete(self) -> bool:
        """Whether this is the whole cotangent of its target: every consumer of it in
        the loss's graph has contributed."""
        return self._file is None and self.edges == frozenset(
            self.record.consumers.get(id(self.target), ())
        )


def backward(
    driver: Any,
    op: Any,
    inputs: Sequence[Any],
    output: Any,
    g: Any,
    wants: Sequence[bool],
    token: int | None,
) -> list[Any] | None:
    """Gradients of ``op``'s inputs from a recorded pass, with no pass of their own,
    or None where there is no such record (then run the backward as usual)."""
    if token is not None:  # the loss itself: its input's cotangent, deferred
        record = take_record(token)
        if record is None or record.top() is not inputs[0] or not wants[0] or inputs[0] is None:
            return None
        seed = np.asarray(g)
        if seed.shape != ():
            return None
        top = inputs[0]
        run = _computed(driver, op, inputs, output, g, wants, 0)
        return [DeferredCotangent(run, top, top.dtype, record, seed, frozenset({LOSS}))]
    if not isinstance(g, DeferredCotangent) or not g.complete() or g.target is not output:
        return None
    record, seed = g.record, g.scale
    if not record.holds(output):
        return None
    grads: list[Any] = []
    for pos, (v, w) in enumerate(zip(inputs, wants)):
        if not w:
            grads.append(None)
        elif in_memory(v):
            recorded = record.grads.get((id(output), pos))
            if recorded is None:
                return None
            grads.append(np.asarray(recorded * seed, recorded.dtype))
        elif is_chain(v) and record.holds(v):
            run = _computed(driver, op, inputs, output, g, wants, pos)
            edge = frozenset({(id(output), pos)})
            grads.append(DeferredCotangent(run, v, v.dtype, record, seed, edge))
        else:  # a stored array's gradient (data differentiated): the ordinary pass
            grads.append(_computed(driver, op, inputs, output, g, wants, pos)())
    return grads


def product_gradient(driver: Any, op: Any, vals: Sequence[Any]) -> Any:
    """The backward product ``op`` of a product (``op.gradient_of`` names the
    operand it is the gradient of, its cotangent at the same position of ``vals``)
    from the loss's record, with no pass: the operand's recorded gradient when it is
    in memory, a deferred cotangent when it is a chain of the loss's graph; None
    where the record does not hold it (then the product runs as usual).

    A `Contraction`'s backward is made of products applied in JAX, not of one
    backward pass (`backward`), so they ask here."""
    pos = op.gradient_of
    g = vals[pos]
    if not isinstance(g, DeferredCotangent) or not g.complete():
        return None
    target, record = g.target, g.record
    node = getattr(target, "node", None)
    if node is None or not record.holds(target) or len(node.sources) != 2:
        return None
    if not _same_operand(node.sources[1 - pos], vals[1 - pos]):
        return None
    v = node.sources[pos]
    if in_memory(v):
        recorded = record.grads.get((id(target), pos))
        if recorded is None or recorded.shape != tuple(v.shape):
            return None
        return np.asarray(recorded * g.scale, recorded.dtype)
    if is_chain(v) and record.holds(v):

        def run() -> Any:
            return op.forward(driver, *[g.resolve() if i == pos else x for i, x in enumerate(vals)])

        edge = frozenset({(id(target), pos)})
        return DeferredCotangent(run, v, v.dtype, record, g.scale, edge)
    return None


def _same_operand(a: Any, b: Any) -> bool:
    """Whether ``b`` is the operand ``a``: the same file, or in-memory arrays of equal
    values (a JAX parameter reaches each host call wrapped anew)."""
    if a is b:
        return True
    if not (is_resident(a) and is_resident(b)):
        return False
    x, y = a.read(), b.read()
    return x.shape == y.shape and x.dtype == y.dtype and np.array_equal(x, y)


def _computed(
    driver: Any,
    op: Any,
    inputs: Sequence[Any],
    output: Any,
    g: Any,
    wants: Sequence[bool],
    pos: int,
) -> Callable[[], Any]:
    """The ordinary backward of ``op`` for input ``pos`` alone, run when called."""

    def run() -> Any:
        cot = g.resolve() if isinstance(g, PendingResult) else g
        only = [w and i == pos for i, w in enumerate(wants)]
        return op.backward(driver, list(inputs), output, cot, only)[pos]

    return run


def merge(driver: Any, x: Any, y: Any) -> DeferredCotangent | None:
    """The sum of two deferred cotangents of the same chain and loss (a chain read
    by two steps of the graph), deferred too; None where they are not such a pair."""
    if not (isinstance(x, DeferredCotangent) and isinstance(y, DeferredCotangent)):
        return None
    if x.record is not y.record or x.target is not y.target:
        return None
    if x._file is not None or y._file is not None:  # computed already: add them as any
        return None
    if np.asarray(x.scale) != np.asarray(y.scale) or x.edges & y.edges:
        return None

    def run() -> Any:
        return driver.forward(_Add(), [x.resolve(), y.resolve()])

    return DeferredCotangent(run, x.target, x.dtype, x.record, x.scale, x.edges | y.edges)


class _Add:
    """``a + b`` of two cotangents of one shape, as a fused chain (how a merged
    deferred cotangent is computed when read)."""

    name = "add"
    fusable = True

    def output_shape(self, a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
        return a

    def reduction_shape(self, *shapes: tuple[int, ...]) -> tuple[int, ...]:
        return ()

    def output_dtype(self, a: np.dtype, b: np.dtype) -> np.dtype:
        return np.result_type(a, b)

    def thin_axes(self, *shapes: tuple[int, ...]) -> tuple[int, ...]:
        return ()

    def index_map(
        self, out_r: Region, red_r: Region, *shapes: tuple[int, ...]
    ) -> tuple[Region, ...]:
        return (out_r, out_r)

    def forward_block(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return np.add(a, b)
