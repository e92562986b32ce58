"""Cotangents computed only if read: the backward pass of a loss whose own pass
computed its gradient (`_one_pass`).

JAX calls each operation's backward in turn. After a loss's one-pass forward, each
gets, instead of a computed cotangent, a `DeferredCotangent`: a promise, computed
only if something reads it, tagged with the chain it is the cotangent of and its
shares (`Share`: a loss's record, the scalar cotangent of that loss, and which
consumers in that loss's graph have contributed). An operation whose output's
cotangent is complete (in every share's graph, every consumer of the chain has
contributed, and nothing else has) returns its in-memory operands' gradients from
the records, each scaled by its loss's cotangent and summed, and deferred
cotangents for its other inputs. JAX adds the cotangents of a chain read twice
(`merge`): a sum of deferred cotangents of the same chain is deferred too, its
shares joined, whether they come from one loss or from two (``tanh(y - mean(y))``
sums over ``y`` twice: once for the mean, once for the loss); anything else is
computed.

Whenever one of those conditions fails, the deferred cotangents are computed by the
ordinary backward passes, which is never wrong, only slower: a chain also used
outside the losses, data differentiated.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np

from ..planning._chain import is_chain
from ..planning._resident import is_resident
from ..storage._paged_file import Region
from ._loss_record import LOSS, Record, take_record
from ._pending import PendingResult
from ._tile_program import in_memory

__all__ = ["DeferredCotangent", "Share", "backward", "merge", "product_gradient"]


@dataclasses.dataclass(frozen=True)
class Share:
    """One loss's share of a deferred cotangent: ``scale`` times the gradient of
    ``record``'s loss that reaches the target through the consumer edges ``edges``."""

    record: Record
    scale: Any  # 0-d: NumPy, or JAX where a device may still compute it (not waited for)
    edges: frozenset[tuple[int, int]]

    def complete(self, target: Any) -> bool:
        return self.edges == frozenset(self.record.consumers.get(id(target), ()))


class DeferredCotangent(PendingResult):
    """The cotangent of ``target`` (a chain of each share's graph): the sum of its
    ``shares``, one per loss whose pass recorded its gradient (a program of two
    losses over one chain has two); computed by the ordinary backward passes only
    if something reads it."""

    def __init__(
        self,
        run: Callable[[], Any],
        target: Any,
        dtype: Any,
        shares: tuple[Share, ...],
        driver: Any = None,
    ) -> None:
        super().__init__(None, target.shape, dtype, target.page_shape)
        self.target = target
        self.shares = shares
        self._computed: Callable[[], Any] | None = run
        self._driver = driver

    def _compute(self) -> Any:
        """A stored array's gradient its losses' passes wrote, when this is all of it
        (scaled by each loss's cotangent, and summed); else computed as usual."""
        files = [s.record.gradient_of(self.target) for s in self.shares]
        if self._driver is None or not self.complete() or any(f is None for f in files):
            assert self._computed is not None  # (dropped only once computed)
            return self._computed()
        total = None
        for f, s in zip(files, self.shares):
            scale = np.asarray(s.scale)
            part = f if np.all(scale == 1) else self._driver.forward(_Scale(scale), [f])
            total = part if total is None else self._driver.forward(_Add(), [total, part])
        return total

    def _adopt(self, f: Any) -> None:
        # computed: its shares (their records hold every gradient file their losses'
        # passes wrote, of other arrays too) and its backward are no longer asked
        # for (`complete` is False), so each stored gradient leaves with its own
        # last reference; `backward` passes a cotangent on before computing it
        super()._adopt(f)
        self.shares, self._computed, self._driver = (), None, None

    def read(self, region: Region | None = None, out: np.ndarray | None = None) -> np.ndarray:
        return self.resolve().read(region, out)  # any computed file, or a constant

    def complete(self) -> bool:
        """Whether this is the whole cotangent of its target: in each loss's graph,
        every consumer of it has contributed."""
        return self._file is None and all(s.complete(self.target) for s in self.shares)

    def holds(self, chain: Any) -> bool:
        """Whether every loss's record holds ``chain``."""
        return all(s.record.holds(chain) for s in self.shares)

    def recorded(self, key: tuple[int, int], shape: tuple[int, ...]) -> np.ndarray | None:
        """The in-memory operand ``key``'s gradient: each loss's recorded one times its
        scale, summed; None where one of them did not record it."""
        total = None
        for s in self.shares:
            g = s.record.grads.get(key)
            if g is None or g.shape != shape:
                return None
            part = _scaled(g, s.scale)
            total = part if total is None else total + part
        return total

    def passed_to(
        self, run: Callable[[], Any], source: Any, edge: tuple[int, int], driver: Any = None
    ) -> Any:
        """The deferred cotangent of ``source``, reached through ``edge`` from this one."""
        shares = tuple(Share(s.record, s.scale, frozenset({edge})) for s in self.shares)
        return DeferredCotangent(run, source, source.dtype, shares, driver)

    def written(self, array: Any) -> bool:
        """Whether every loss's pass wrote the gradient of the stored ``array``."""
        return all(s.record.gradient_of(array) is not None for s in self.shares)


def _scaled(g: Any, scale: Any) -> Any:
    """A recorded gradient times its loss's cotangent, in its own type (a JAX array
    left on its device stays there: no multiplication where the scale is 1; a JAX
    scale, which the device may still be computing, is multiplied there unread)."""
    if isinstance(g, jax.Array):
        if isinstance(scale, jax.Array):
            return (g * scale).astype(g.dtype)
        return g if np.all(scale == 1) else (g * np.asarray(scale)).astype(g.dtype)
    return np.asarray(g * np.asarray(scale), g.dtype)


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
        # (a JAX cotangent is kept as it is: `OocBackwardPrim` hands a loss's over
        # unread, as the device may still be computing it)
        seed = g if isinstance(g, jax.Array) else np.asarray(g)
        if seed.shape != ():
            return None
        top = inputs[0]
        run = _computed(driver, op, inputs, output, g, wants, 0)
        share = Share(record, seed, frozenset({LOSS}))
        return [DeferredCotangent(run, top, top.dtype, (share,))]
    if not isinstance(g, DeferredCotangent) or not g.complete() or g.target is not output:
        return None
    if not g.holds(output):
        return None
    grads: list[Any] = []
    ordinary: list[tuple[int, Callable[[], Any]]] = []
    for pos, (v, w) in enumerate(zip(inputs, wants)):
        if not w:
            grads.append(None)
        elif in_memory(v):
            recorded = g.recorded((id(output), pos), tuple(v.shape))
            if recorded is None:
                return None
            grads.append(recorded)
        elif is_chain(v) and g.holds(v):
            run = _computed(driver, op, inputs, output, g, wants, pos)
            grads.append(g.passed_to(run, v, (id(output), pos)))
        elif g.written(v):  # a stored array's gradient, written by the losses' passes
            run = _computed(driver, op, inputs, output, g, wants, pos)
            grads.append(g.passed_to(run, v, (id(output), pos), driver))
        else:  # a stored array's gradient (data differentiated): the ordinary pass
            grads.append(None)
            ordinary.append((pos, _computed(driver, op, inputs, output, g, wants, pos)))
    for pos, run in ordinary:  # (they compute ``g``, which then lets go of its shares:
        grads[pos] = run()  # after it was passed on to the other inputs)
    return grads


def product_gradient(driver: Any, op: Any, vals: Sequence[Any]) -> Any:
    """The backward product ``op`` of a product (``op.gradient_of`` names the
    operand it is the gradient of, its cotangent at the same position of ``vals``)
    from the losses' records, with no pass: the operand's recorded gradient when it
    is in memory, a deferred cotangent when it is a chain of the losses' graphs;
    None where the records do not hold it (then the product runs as usual).

    A `Contraction`'s backward is made of products applied in JAX, not of one
    backward pass (`backward`), so they ask here."""
    pos = op.gradient_of
    g = vals[pos]
    if not isinstance(g, DeferredCotangent) or not g.complete():
        return None
    target = g.target
    node = getattr(target, "node", None)
    if node is None or not g.holds(target) or len(node.sources) != 2:
        return None
    if not _same_operand(node.sources[1 - pos], vals[1 - pos]):
        return None
    v = node.sources[pos]
    if in_memory(v):
        return g.recorded((id(target), pos), tuple(v.shape))
    if is_chain(v) and g.holds(v):

        def run() -> Any:
            return op.forward(driver, *[g.resolve() if i == pos else x for i, x in enumerate(vals)])

        return g.passed_to(run, v, (id(target), pos))
    return None


def _same_operand(a: Any, b: Any) -> bool:
    """Whether ``b`` is the operand ``a``: the same file, or in-memory arrays of equal
    values (a JAX parameter reaches each host call wrapped anew)."""
    if a is b:
        return True
    if not (is_resident(a) and is_resident(b)):
        return False
    if a.device_array is not None and a.device_array is b.device_array:
        return True  # (one JAX array: not brought to the host to be compared)
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
        cot = np.asarray(cot) if isinstance(cot, jax.Array) else cot  # (a loss's seed)
        only = [w and i == pos for i, w in enumerate(wants)]
        return op.backward(driver, list(inputs), output, cot, only)[pos]

    return run


def merge(driver: Any, x: Any, y: Any) -> DeferredCotangent | None:
    """The sum of two deferred cotangents of the same chain (a chain read by two
    steps of a loss's graph, or by two losses), deferred too; None where they are
    not such a pair."""
    if not (isinstance(x, DeferredCotangent) and isinstance(y, DeferredCotangent)):
        return None
    if x.target is not y.target or x._file is not None or y._file is not None:
        return None  # (computed already: add them as any)
    shares = {id(s.record): s for s in x.shares}
    for s in y.shares:
        mine = shares.get(id(s.record))
        if mine is None:
            shares[id(s.record)] = s
        elif mine.edges & s.edges or _differ(mine.scale, s.scale):
            return None
        else:
            shares[id(s.record)] = Share(s.record, s.scale, mine.edges | s.edges)

    def run() -> Any:
        return driver.forward(_Add(), [x.resolve(), y.resolve()])

    return DeferredCotangent(run, x.target, x.dtype, tuple(shares.values()), driver)


def _differ(a: Any, b: Any) -> bool:
    """Whether two losses' cotangents differ; one loss's shares carry the same one
    (a JAX array the device may still be computing: not read)."""
    return a is not b and bool(np.asarray(a) != np.asarray(b))


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


class _Scale(_Add):
    """``a * scale`` (a stored gradient scaled by its loss's cotangent), fused."""

    name = "multiply"

    def __init__(self, scale: np.ndarray) -> None:
        self.scale = scale

    def output_shape(self, *shapes: tuple[int, ...]) -> tuple[int, ...]:
        return shapes[0]

    def output_dtype(self, *dtypes: np.dtype) -> np.dtype:
        return np.dtype(dtypes[0])

    def index_map(
        self, out_r: Region, red_r: Region, *shapes: tuple[int, ...]
    ) -> tuple[Region, ...]:
        return (out_r,)

    def forward_block(self, *blocks: np.ndarray) -> np.ndarray:
        return np.asarray(blocks[0] * self.scale, blocks[0].dtype)
