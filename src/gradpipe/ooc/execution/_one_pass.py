"""The gradient of a scalar loss computed in the pass that computes the loss.

``jax.value_and_grad(lambda p: ooc.mean(ooc.square(X * p["w"] - y)))`` would read
``X`` once for the loss and once more for each parameter's gradient. But a VJP is
linear in its cotangent: the gradient of a sum is the sum of each tile's gradient,
and each tile's gradient with respect to in-memory parameters needs only that tile
and the loss's cotangent, a scalar known only later but entering as a factor. So
when a full sum or mean of a fused chain runs forward under differentiation, its
pass computes, tile by tile, the chain's value *and* the gradient of the tile's
share of the loss with respect to every in-memory operand the chain reads
(`Record`): one JAX program per piece shape, the whole graph of the chain and its
VJP, compiled by XLA for the host's CPU. Nothing of the data's size is
written, and the data is read once.

The backward pass then needs no pass at all (`_deferred_cotangents`).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Any

import numpy as np

from ..kernels._promotion import is_differentiable
from ..planning._chain import ChainFile, is_chain
from ..planning._chain_graph import is_chain_file
from ..planning._chain_read import Evaluation, pieces_of
from ..planning._chain_readers import settle
from ..planning._resident import is_resident
from ..planning._tile_plan import stage_of
from ..planning._tile_reads import plan_steps, tile_count
from ..storage._paged_file import PagedFile, Region
from ._executor import current_executor
from ._held_results import hold_in_memory, track
from ._loss_record import LOSS, Fold, Record, keep_record
from ._tile_program import Tile, in_memory, run

__all__ = ["forward", "one_pass_reduction"]


def one_pass_reduction(op: Any, ndim: int) -> bool:
    """Whether ``op`` is a reduction whose forward pass can compute its gradient: a
    plain sum or mean over every axis of an ``ndim``-d input, to a 0-d result."""
    # asked of the class itself: a subclass computing otherwise does not inherit it
    return (
        "one_pass_kind" in type(op).__dict__
        and tuple(getattr(op, "axes", ())) == tuple(range(ndim))
        and ndim > 0
        and not getattr(op, "keepdims", False)
    )


# ---------------------------------------------------------------- the graph


@dataclasses.dataclass
class _Graph:
    """The unstored chains a loss reduces, sources first, and who consumes each."""

    chains: list[ChainFile]
    consumers: dict[int, set[tuple[int, int]]]
    why_not: str | None = None
    #: stored arrays JAX differentiates that steps of the loss read (by id)
    data: dict[int, Any] = dataclasses.field(default_factory=dict)


def _graph(top: Any) -> _Graph:
    """The chains under ``top`` (``why_not`` says why they cannot share the pass).

    A chain's consumers are the steps that send it a cotangent in JAX's backward
    pass: those the loss reaches without crossing a `jax.lax.stop_gradient` (the
    steps under one are still computed, but no cotangent flows through them)."""
    chains: list[ChainFile] = []
    seen: set[int] = set()

    def visit(c: ChainFile) -> str | None:
        if id(c) in seen:
            return None
        seen.add(id(c))
        node = c.node
        if node is None or node.jax is None or node.n_outputs != 1:
            return f"its step {node.label if node else '?'} has no JAX form"
        for s in node.sources:
            if _unstored(s):
                why = visit(s)
                if why is not None:
                    return why
            elif getattr(s, "waits_to_be_read", False) and s.stored is None:
                return "it reads a result that waits to be computed"
        chains.append(c)
        return None

    why = visit(top)
    consumers: dict[int, set[tuple[int, int]]] = {id(top): {LOSS}}
    data: dict[int, Any] = {}
    if why is None:
        live: set[int] = set()
        stack = [top]
        while stack:
            c = stack.pop()
            if id(c) in live or c.node.stops_gradient:
                continue
            live.add(id(c))
            wants = c.node.differentiated
            for pos, s in enumerate(c.node.sources):
                if _unstored(s):
                    consumers.setdefault(id(s), set()).add((id(c), pos))
                    stack.append(s)
                elif wants is not None and wants[pos] and _data(s):
                    consumers.setdefault(id(s), set()).add((id(c), pos))
                    data[id(s)] = s
    return _Graph(chains, consumers, why, data)


def _data(s: Any) -> bool:
    """Whether ``s`` is a stored array whose gradient a loss's pass can write."""
    return (
        not in_memory(s)
        and not is_chain_file(s)
        and bool(getattr(s, "shape", ()))
        and is_differentiable(s.dtype)
        and np.dtype(s.dtype).kind == "f"
    )


def _unstored(s: Any) -> bool:
    return is_chain_file(s) and s.stored is None


#: Pieces of a tile whose programs run at once: XLA leaves a core idle in much of
#: a program (its elementwise loops), and the next piece fills it (a two-layer MLP
#: on 256 MiB, 2 cores: 0.28 s a step one at a time, 0.24-0.26 s two at once).
PIECES_IN_FLIGHT = 2


def _piece_elements(steps: int, dtype: np.dtype, budget: int) -> int:
    """Elements of the pieces a tile is computed in: the program holds at most one
    block per step (XLA fuses most of them) and a few more (its arguments, their
    gradients) at once; the pieces in flight within half the budget."""
    per_piece = budget // 2 // PIECES_IN_FLIGHT
    return max(1024, per_piece // (max(8, dtype.itemsize) * (steps + 4)))


def _piece_limit(region: Region, limit: int) -> int:
    """At most ``limit`` elements a piece, the tile in as many pieces as run at once
    at least, and pieces of one shape where a few more of them make it so (each
    shape is a program XLA compiles, 0.3 s each here)."""
    sizes = [s.stop - s.start for s in region]
    n = math.prod(sizes)
    limit = max(1024, min(limit, -(-n // PIECES_IN_FLIGHT)))
    inner = math.prod(sizes[1:])
    if not sizes or inner == 0 or limit < inner:
        return limit
    rows, fit = sizes[0], limit // inner
    least = -(-rows // fit)
    for k in range(least, 2 * least + 1):
        if rows % k == 0:
            return rows // k * inner
    return limit


@functools.lru_cache(maxsize=1)
def _pool() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(PIECES_IN_FLIGHT, thread_name_prefix="gradpipe-one-pass")


def forward(driver: Any, op: Any, top: Any, token: int) -> np.ndarray | None:
    """The value of the full reduction ``op`` of the chain ``top``, with the gradient
    of every in-memory operand of its graph recorded under ``token`` (for
    `backward`); None where the chain cannot share its pass (then the caller runs
    ``op`` as usual)."""
    if not is_chain(top) or not is_differentiable(top.dtype) or top.dtype.kind == "c":
        return None
    if current_executor() is not None:  # a cluster's tasks run the ordinary passes
        return None
    settle([top])  # results waiting to be read are computed first, as before any pass
    graph = _graph(top)
    if graph.why_not is not None:
        return None
    plan = driver._plan(op, [top], "forward")
    if not is_chain(top):  # the cost rule wrote it: nothing left to fuse
        return None
    kind = op.one_pass_kind
    acc = np.dtype(op.accumulator_dtype(top.dtype) if kind == "sum" else np.float64)
    if acc.kind != "f":
        return None
    if graph.data and (kind != "sum" or any(d.shape != top.shape for d in graph.data.values())):
        return None  # (a stored array's gradient: of a sum, over the loss's own tiles)
    if not graph.data and not any(
        in_memory(s) and is_differentiable(s.dtype)
        for c in graph.chains
        for s in c.node.sources  # type: ignore[union-attr]
    ):  # nothing in memory to differentiate: the ordinary passes lose nothing
        return None
    record = Record(top, graph.chains, graph.consumers)
    try:
        value = _pass(driver, op, top, plan, graph, record, kind, acc)
    except BaseException:
        record.discard()
        raise
    if value is None:
        record.discard()
        return None
    keep_record(token, record)
    return value


def _pass(
    driver: Any,
    op: Any,
    top: ChainFile,
    plan: Any,
    graph: _Graph,
    record: Record,
    kind: str,
    acc: np.dtype,
) -> np.ndarray | None:
    """The loss's pass: its value, with ``record`` filled; None where a tile reads
    a stored array it differentiates other than over the tile (then nothing is kept)."""
    finish = getattr(op, "finish", None)
    # a sum's share of the loss per tile gets the cotangent the finished loss gives
    # it (a mean's 1/count): its gradients come out finished
    seed = np.asarray(finish(np.ones((), acc)) if finish else np.ones((), acc), acc)
    pending = written = 0
    for d in graph.data.values():  # a small one held in memory, as any small result
        small = hold_in_memory(d.nbytes, driver.whole_budget, pending)
        f = PagedFile.create(d.shape, d.dtype, d.page_shape, in_memory=small)
        if small:
            pending += d.nbytes
            track(f)
        else:
            written += d.nbytes
        record.write_gradient(d, f)
    shapes = [tuple(top.shape)]
    fold = Fold(kind, acc, record)
    residents = [s for c in graph.chains for s in c.node.sources if is_resident(s)]  # type: ignore[union-attr]
    out_dtype = np.dtype(op.output_dtype(top.dtype))
    with stage_of(
        op,
        "value and gradient",
        [top],
        plan,
        written,
        driver._bytes_for,
        summed=tuple(s for s in residents if is_differentiable(s.dtype)),
    ):
        bar = driver._bar(tile_count(plan[1], plan[2]), "value and gradient")
        limit = _piece_elements(len(graph.chains), top.dtype, driver.budget.nbytes)
        for step in plan_steps(op, shapes, plan):
            region = step[3][0]
            assert region is not None
            ev = Evaluation(top, region)
            running: list[tuple[Tile, Future[list[np.ndarray]]]] = []
            try:
                for piece in pieces_of(region, _piece_limit(region, limit)):
                    tile = Tile(top, piece, ev, graph.data)
                    if tile.irregular:
                        return None
                    args = [*tile.args, seed] if kind == "sum" else tile.args
                    running.append((tile, _pool().submit(run, tile.program(kind, acc), args)))
                for tile, work in running:
                    try:
                        outs = work.result()
                    except NotImplementedError:  # a step JAX cannot differentiate:
                        return None  # the ordinary passes say so in their words
                    fold.add(tile.uses, outs)
                    for d, grad in zip(tile.data, outs[1 + len(tile.uses) :]):
                        record.gradient_of(d).write(tile.region, np.asarray(grad, d.dtype))
            finally:
                wait([work for _, work in running])  # (they read the tile's views)
                ev.release()
            if bar is not None:
                bar.update(1)
        if bar is not None:
            bar.close()
    value = fold.finish(finish)
    record.commit()
    return np.asarray(value, out_dtype)
