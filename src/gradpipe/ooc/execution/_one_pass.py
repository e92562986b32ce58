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
VJP, compiled by XLA for the host's CPU or for the device the budget names
(`_compute_device`: tiles read on the host are sent there, several queued at
once). Nothing of the data's size is written, and the data is read once.

The backward pass then needs no pass at all (`_deferred_cotangents`).
"""

from __future__ import annotations

import dataclasses
import functools
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from ..kernels._promotion import is_differentiable
from ..planning._chain import ChainFile, is_chain
from ..planning._chain_graph import is_chain_file
from ..planning._chain_read import Evaluation, pieces_of
from ..planning._chain_readers import settle
from ..planning._resident import is_resident
from ..planning._stages import Where, note_next, recording_active
from ..planning._tile_plan import stage_of
from ..planning._tile_reads import plan_steps, tile_count
from ..storage._allocator import kept_between_pieces
from ._collector import collector_paused
from ._compute_device import device_budget, device_for, runs_64_bit
from ._device_sums import DeviceSums
from ._executor import current_executor
from ._held_results import hold_in_memory, result_file
from ._loss_record import LOSS, Fold, Record, keep_record
from ._running_tails import Tail
from ._tile_flow import Flow
from ._tile_pieces import PIECES_IN_FLIGHT, piece_elements, piece_limit
from ._tile_program import Sender, Tile, in_memory, launch, reads_elsewhere, run

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


#: Tiles queued on a device beyond the oldest one: the pass's thread queues a
#: piece's transfer and program and goes on (as a loop written by hand does),
#: waiting for the oldest piece's program to have run (a tile's views released once
#: all its pieces ran) only once this many tiles' pieces are queued behind it, and
#: bringing a tile's results back (where they are not folded there: `_device_sums`)
#: only once as many more tiles have run. The host's budget holds three tiles'
#: blocks (`ahead_for`).
DEVICE_AHEAD = 2

#: The most bytes of data a piece on a device reads: a 512 MiB budget's 128 MiB
#: tiles go in two. Measured on a TPU v5e, a loop by hand over 2 GiB (least
#: squares; MLP): 128 MiB blocks with two queued behind the one waited for took
#: 0.18-0.19 s a step, 64 MiB ones with five queued 0.163-0.164 s (as the loop
#: that queues all sixteen: 0.16 s), 32 MiB ones with eleven 0.18-0.19 s; and
#: gradpipe's step over 2, 8 and 24 GiB took 2-10% less in pieces than whole tiles
#: (`benchmarks/ooc_device.py --whole-tiles`).
DEVICE_PIECE_BYTES = 96 * 2**20


#: Whether a sum's pass on a device folds its tiles there (`_device_sums`), or brings
#: each tile's results back to fold them on the host.
SUMS_ON_DEVICE = True

#: why a pass cannot compute a stored array's gradient
_IRREGULAR = "a stored array it differentiates is read other than tile by tile"


@functools.lru_cache(maxsize=2)
def _pool(workers: int) -> ThreadPoolExecutor:
    return ThreadPoolExecutor(workers, thread_name_prefix="gradpipe-one-pass")


def _count(where: Where, args: list[Any], keys: list[Any], device: Any) -> None:
    """Count the bytes a piece sends to its device: its data's blocks (in-memory
    operands are sent once a pass, and are few)."""
    if device is not None:
        where.to_device += sum(a.nbytes for a, k in zip(args, keys) if k is None)


def forward(driver: Any, op: Any, top: Any, token: int) -> np.ndarray | None:
    """The value of the full reduction ``op`` of the chain ``top``, with the gradient
    of every in-memory operand of its graph recorded under ``token`` (for
    `backward`); None where the chain cannot share its pass (then the caller runs
    ``op`` as usual, and `explain` notes why on its pass)."""
    value, why = _forward(driver, op, top, token)
    if why is not None and is_chain(top):
        note_next(f"its gradient needs passes of its own: {why}")
    return value


def _forward(driver: Any, op: Any, top: Any, token: int) -> tuple[np.ndarray | None, str | None]:
    if not is_chain(top):
        return None, "it reduces a stored array, not a chain of steps"
    if not is_differentiable(top.dtype) or top.dtype.kind == "c":
        return None, f"the loss is {top.dtype.name}"
    if current_executor() is not None:
        return None, "a cluster's tasks run the ordinary passes"
    settle([top])  # results waiting to be read are computed first, as before any pass
    graph = _graph(top)
    if graph.why_not is not None:
        return None, graph.why_not
    plan = driver._plan(op, [top], "forward")
    if not is_chain(top):
        return None, "its chain is written first (the cost rule)"
    kind = op.one_pass_kind
    acc = np.dtype(op.accumulator_dtype(top.dtype) if kind == "sum" else np.float64)
    if acc.kind != "f":
        return None, f"it sums in {acc.name}"
    if graph.data and (kind != "sum" or any(d.shape != top.shape for d in graph.data.values())):
        return None, "it differentiates a stored array not read over the loss's own tiles"
    if not graph.data and not any(
        in_memory(s) and is_differentiable(s.dtype)
        for c in graph.chains
        for s in c.node.sources  # type: ignore[union-attr]
    ):  # nothing in memory to differentiate: the ordinary passes lose nothing
        return None, "nothing in memory is differentiated"
    if graph.data and any(
        r is not None and reads_elsewhere(top, r, graph.data)
        for r in (step[3][0] for step in plan_steps(op, [tuple(top.shape)], plan))
    ):
        return None, _IRREGULAR
    dtypes = [c.dtype for c in graph.chains]
    dtypes += [s.dtype for c in graph.chains for s in c.node.sources if hasattr(s, "dtype")]  # type: ignore[union-attr]
    device = device_for(driver.whole_budget, dtypes)
    record = Record(top, graph.chains, graph.consumers)
    try:
        value = _pass(driver, op, top, plan, graph, record, kind, acc, device)
    except BaseException:
        record.discard()
        raise
    if isinstance(value, str):
        record.discard()
        return None, value
    keep_record(token, record)
    return value, None


def _pass(
    driver: Any,
    op: Any,
    top: ChainFile,
    plan: Any,
    graph: _Graph,
    record: Record,
    kind: str,
    acc: np.dtype,
    device: Any = None,
) -> Any:
    """The loss's pass: its value (a NumPy one, or a JAX array on the device that
    computes it), with ``record`` filled; why not (a str), where a tile
    reads a stored array it differentiates other than over the tile (then nothing
    is kept) or a step has no derivative in JAX."""
    finish = getattr(op, "finish", None)
    # a sum's share of the loss per tile gets the cotangent the finished loss gives
    # it (a mean's 1/count): its gradients come out finished
    # on a device, the tiles' programs compute in the types jax.numpy uses there
    # (their shares then added in ``acc``: there, or on the host, `leave_running`)
    tile_acc = acc if device is None else np.dtype(np.promote_types(top.dtype, np.float32))
    seed = np.asarray(finish(np.ones((), acc)) if finish else np.ones((), acc), tile_acc)
    pending = written = 0
    for d in graph.data.values():  # a small one held in memory, as any small result
        small = hold_in_memory(d.nbytes, driver.whole_budget, pending)
        f = result_file(d.shape, d.dtype, d.page_shape, small)
        if f.on_disk:  # (a small one too, where the system has no anonymous files)
            written += d.nbytes
        else:
            pending += d.nbytes
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
    ) as where:
        bar = driver._bar(tile_count(plan[1], plan[2]), "value and gradient")
        # on a device, the next tiles are queued while the last one computes; on the
        # host the next tile runs while the last one is retired and folded (the plan
        # holds two tiles' inputs; least squares, 1 GiB: 0.156 s a step, not 0.182 s)
        ahead = DEVICE_AHEAD if device is not None else 1
        # the host's pieces in flight within half its budget; a device's, queued
        # one after another, of at most DEVICE_PIECE_BYTES read, the tiles queued
        # there within the device's budget
        in_flight = PIECES_IN_FLIGHT if device is None else 1
        room = (
            driver.budget.nbytes // 2
            if device is None
            # (and a stored array's gradient, tile-sized, for the tiles whose results
            # wait to come back)
            else device_budget(driver.whole_budget, device)
            // (2 * ahead + 1 if graph.data else ahead + 1)
        )
        limit = piece_elements(len(graph.chains), top.dtype, room // in_flight)
        if device is not None:  # (what a piece reads from disk, per element)
            limit = min(limit, int(DEVICE_PIECE_BYTES / max(1.0, top.stats().leaf_bytes)))
        sender = None if device is None else Sender(device)
        if device is not None:
            where.runs_on = str(device)
        sums = None
        if device is not None and kind == "sum" and SUMS_ON_DEVICE:
            # the loss added up there too; in 64 bits where the device runs them
            # (a float32 chain's `sum(..., dtype=float64)` on a TPU: on the host)
            sums = DeviceSums(acc if acc.itemsize < 8 or runs_64_bit(device) else None)
        flow = Flow(
            fold, record, None if device is None else where, bar, sums, by_piece=device is not None
        )
        lag = ahead if device is not None else 0
        left = None
        # on the host, each piece's program allocates its blocks afresh: they are
        # kept in the heaps between pieces (`kept_between_pieces`); the interpreter's
        # cyclic collector waits for the pass's end (`collector_paused`)
        with kept_between_pieces(room // in_flight if device is None else 0), collector_paused():
            try:
                # on a device, the pieces queued behind the one waited for: those of
                # ``ahead`` tiles beside the rest of its own, of the most pieces a tile
                # has had
                queue, shape = ahead, None
                for step in plan_steps(op, shapes, plan):
                    region = step[3][0]
                    assert region is not None
                    if sender is not None:
                        # the host's budget holds ``ahead + 1`` tiles' blocks
                        # (`ahead_for`): the pages of ``queue + 1`` pieces sent (each
                        # piece's released once it ran), and a tile read into memory
                        # of its own only once at most ``ahead`` older ones are held
                        # (one of another shape than the last, the grid's partial
                        # last tile, may be read so where the others were mapped)
                        last, shape = shape, tuple(s.stop - s.start for s in region)
                        held = ahead if flow.holds_buffers() or shape != last else None
                        why = flow.advance(queue, lag, tiles=held)
                        if why is not None:
                            return why
                    ev = Evaluation(top, region)
                    running = flow.start(ev)
                    pieces = list(pieces_of(region, piece_limit(region, limit, in_flight)))
                    queue = max(queue, (ahead + 1) * len(pieces) - 1)
                    for piece in pieces:
                        tile = Tile(top, piece, ev, graph.data, device)
                        if tile.irregular:
                            return _IRREGULAR
                        args = [*tile.args, seed] if kind == "sum" else tile.args
                        keys = [*tile.keys, "seed"] if kind == "sum" else tile.keys
                        program = tile.program(kind, tile_acc, device is None)
                        _count(where, args, keys, device)
                        if sender is None:
                            running.append((tile, _pool(in_flight).submit(run, program, args)))
                            continue
                        running.append((tile, launch(program, args, sender, keys)))
                        why = flow.advance(queue, lag)
                        if why is not None:
                            return why
                    # on the host, the last tile retired once this one's pieces run
                    why = flow.advance(len(pieces), lag) if sender is None else None
                    if why is not None:
                        return why
                # a sum's tiles folded on the device: the loss and gradients are
                # handed to JAX while its last tiles still run (`_running_tails`)
                left = flow.leave_running(op)
                if left is None:
                    why = flow.advance(0, 0)
                    if why is not None:
                        return why
                    flow.drain()
                elif recording_active():  # (`explain`: the whole pass, measured)
                    Tail(top, left[1]).settle()
                else:
                    Tail(top, left[1])
            finally:
                flow.abandon()
        if bar is not None:
            bar.close()
        if left is None:
            value = np.asarray(fold.finish(finish), out_dtype)
        else:
            value = left[0] if left[0].dtype == out_dtype else left[0].astype(out_dtype)
        where.value = value  # (a later pass that reads it says so: `explain`)
    record.commit()
    return value
