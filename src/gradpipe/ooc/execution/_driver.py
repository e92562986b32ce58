"""The tile loop that runs a `BlockParallelOp` forward or backward on array files.

The loop walks output tiles in C order with the reduction tiles innermost. While
one step computes, a background thread reads the next step's input tiles (double
buffering), so disk time hides behind the arithmetic when tiles are large. Block
kernels are NumPy (OpenBLAS), measured faster than XLA's CPU matmul on this kind of
machine (see ``benchmarks/ooc_kernel.py``); they run on the calling host thread.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from ..planning import _stages
from ..planning._budget import MemoryBudget, default_page_shape
from ..planning._chain import (
    MAX_DEPTH,
    MAX_READ_FACTOR,
    ChainFile,
    is_chain,
    read_factor,
    settle,
    too_deep,
)
from ..planning._resident import InMemoryResult, is_resident
from ..planning._tile_plan import first_tile, passes, stage_of, tile_plan
from ..planning._tile_reads import plan_steps, prefetched, take, tile_count
from ..storage._allocator import use_mmap_for_tiles
from ..storage._paged_file import PagedFile, Region
from ._executor import current_executor
from ._held_results import hold_in_memory, track

__all__ = ["Driver", "Store", "set_progress"]

_progress = [False]


def set_progress(enabled: bool) -> None:
    """Show (or hide) a tqdm progress bar for long out-of-core operations.

    Off by default in library calls; the CLI and the demo turn it on.
    """
    _progress[0] = bool(enabled)


Value = PagedFile | np.ndarray  # an array file (or resident operand), or an in-memory value


class Store:
    """The block map that writes its one input as it is: how a chain is stored
    (into a scratch file, or the file at ``path``)."""

    name = "store"
    fusable = False

    def __init__(self, path=None):
        self.path = path

    def output_shape(self, s):
        return s

    def reduction_shape(self, s):
        return ()

    def output_dtype(self, d):
        return d

    accumulator_dtype = output_dtype

    def thin_axes(self, s):
        return ()

    def index_map(self, out_r, red_r, s):
        return (out_r,)

    def forward_block(self, x):
        return x


def _page_like(inputs, shape, itemsize, budget) -> tuple[int, ...]:
    """A chain's page shape: its first same-shaped input's, else the default."""
    for v in inputs:
        page = getattr(v, "page_shape", None)
        if page and tuple(v.shape) == tuple(shape):
            return tuple(page)
    return default_page_shape(tuple(shape), itemsize, budget)


class Driver:
    """Runs block-parallel operations on array files under one memory budget.

    It is also the toolkit a `CustomOp` receives: `allocate`, `read`, `write` and
    `run` (a nested block-parallel operation).
    """

    def __init__(self, budget: MemoryBudget, name: str = "ooc", whole: MemoryBudget | None = None):
        self.budget = budget
        self.name = name
        # the caller's whole budget (``budget`` may be what is left of it for the
        # tiles): small results are held in memory within shares of it
        self.whole_budget = budget if whole is None else whole
        use_mmap_for_tiles()

    # -- toolkit -------------------------------------------------------------

    def allocate(self, shape, dtype, page_shape=None) -> PagedFile:
        """A new zero-filled scratch array file (call ``.commit()`` once written)."""
        shape = tuple(shape)
        if page_shape is None:
            page_shape = default_page_shape(shape, np.dtype(dtype).itemsize, self.budget)
        return PagedFile.create(shape, dtype, page_shape)

    @contextlib.contextmanager
    def writing(self, shape, dtype, page_shape=None) -> Iterator[PagedFile]:
        """A new scratch array file to fill inside the block: committed when the block
        ends, discarded (never left half-written) when it raises.

        ```python
        with driver.writing(shape, dtype) as out:
            for region in regions:
                out.write(region, block)
        return out
        ```
        """
        out = self.allocate(shape, dtype, page_shape)
        try:
            yield out
        except BaseException:
            out.discard()
            raise
        out.commit()

    @staticmethod
    def read(value: Value, region: Region | None) -> np.ndarray:
        """A region of an input as a NumPy array.

        **Arguments:**

        - `value`: an array file (a resident operand too) or a 0-d NumPy value
          (returned as it is).
        - `region`: a tuple of slices, or ``None`` for the whole array.

        **Returns:**

        The values in that region.
        """
        if isinstance(value, np.ndarray):
            return value
        return value.read(region)

    # -- planning --------------------------------------------------------------

    def _plan(self, op, inputs: Sequence[Value], phase: str, g=None) -> tuple[tuple, tuple, tuple]:
        """The loop's shapes and tile; chains among the inputs (and the cotangent ``g``
        of a backward pass) that the cost rule says to write are written first
        (`ChainFile.should_store`)."""
        while True:
            plan, self._bytes_for = tile_plan(op, inputs, phase, g, self.budget, self.name)
            if isinstance(op, Store):  # writing a chain: no rule to apply
                return plan
            sources = [*inputs, g] if g is not None else list(inputs)
            chains = [(i, v) for i, v in enumerate(sources) if is_chain(v)]
            if not chains:
                return plan
            reads = passes(op, inputs, plan)
            if g is not None:
                reads.append(float(tile_count(plan[1], plan[2][len(plan[0]) :])))
            to_store = [v for i, v in chains if v.should_store(reads[i])]
            if not to_store:
                for i, v in chains:
                    v.count_passes(reads[i])
                return plan
            for v in to_store:
                v.store(self)

    def _bar(self, total: int, phase: str):
        if not _progress[0] or total < 2:
            return None
        from tqdm.auto import tqdm

        return tqdm(total=total, desc=f"{self.name} {phase}", unit="tile", leave=False)

    # -- forward ----------------------------------------------------------------

    def fuse(self, op, inputs: Sequence[Value]) -> ChainFile | None:
        """``op``'s output as a chain computed on read, when ``op`` is a block map
        (``fusable``, no reduction axes) that reads no more than it makes; else None."""
        if not getattr(op, "fusable", False):
            return None
        shapes = [tuple(v.shape) for v in inputs]
        out_shape = tuple(op.output_shape(*shapes))
        if not out_shape or 0 in out_shape or op.reduction_shape(*shapes):
            return None
        if read_factor(op, shapes, out_shape) > MAX_READ_FACTOR:
            return None
        for v in inputs:
            if is_chain(v) and v.depth >= MAX_DEPTH:
                v.store(self)
        dtype = np.dtype(op.output_dtype(*[v.dtype for v in inputs]))
        page = _page_like(inputs, out_shape, dtype.itemsize, self.budget)
        _stages.fused()
        chain = ChainFile.forward(op, list(inputs), out_shape, dtype, page, self.budget.nbytes)
        self._cut([chain], inputs)
        return chain

    def pick(self, op, inputs: Sequence[Value]) -> ChainFile | None:
        """``op``'s output as rows of its input read through (`PickedRows`), when
        ``op`` offers it (``op.picked_rows``: a take along one axis by an index in
        memory that names rows in runs); else None. A cluster's passes gather into
        files (their tasks take files, not chains over other processes' arrays)."""
        pick = getattr(op, "picked_rows", None)
        if pick is None or current_executor() is not None:
            return None
        rows = pick(self, inputs)
        if rows is None:
            return None
        _stages.fused()
        return ChainFile.picking(rows, self.budget.nbytes)

    def _cut(self, chains, sources) -> None:
        """Write the chain ``sources`` of new ``chains`` that are too deep for their
        budget (`too_deep`): the new chains then read them as stored inputs."""
        if any(too_deep(c) for c in chains):
            for v in sources:
                if is_chain(v):
                    v.store(self)

    def fuse_map(self, label, sources, regions, compute, shape, dtypes) -> list[ChainFile]:
        """Chains computed on read by one block function (a fused backward pass):
        ``compute(blocks)`` gives one block per entry of ``dtypes`` for an output
        region, from the ``regions(out_region)`` of ``sources``."""
        for v in sources:
            if is_chain(v) and v.depth >= MAX_DEPTH:
                v.store(self)
        page = _page_like(sources, shape, max(np.dtype(d).itemsize for d in dtypes), self.budget)
        _stages.fused()
        chains = ChainFile.gradients(
            label, sources, regions, compute, shape, dtypes, page, self.budget.nbytes
        )
        self._cut(chains, sources)
        return chains

    def store(self, chain) -> Value:
        """``chain`` (a `ChainFile`) written to a scratch file: its stored copy."""
        return self.forward(Store(), [chain])

    def forward(self, op, inputs: Sequence[Value]) -> Value:
        """Run ``op`` forward: a chain computed on read for a block map (`fuse`), else
        a new committed scratch file, a 0-d array, or an array held in memory
        (``op.in_memory_output``)."""
        settle(inputs)  # pending results are computed before this pass, not inside it
        fused = self.fuse(op, inputs)
        if fused is not None:
            return fused
        plan = self._plan(op, inputs, "forward")
        dtype = np.dtype(op.output_dtype(*[v.dtype for v in inputs]))
        out_bytes = math.prod(plan[0]) * dtype.itemsize if plan[0] else 0
        summed = bool(plan[0]) and getattr(op, "in_memory_output", False)
        path = getattr(op, "path", None) if isinstance(op, Store) else None
        small = (  # a small scratch result, kept in an in-memory file (`_held_results`)
            bool(plan[0])
            and not summed
            and path is None
            and current_executor() is None
            and hold_in_memory(out_bytes, self.whole_budget)
        )
        write = 0 if summed or small else out_bytes
        output = (f"output {dtype.name}{list(plan[0])}",)
        with stage_of(
            op,
            "forward",
            inputs,
            plan,
            write,
            self._bytes_for,
            summed=output if summed else (),
            held=output if small else (),
        ):
            return self._forward(op, inputs, plan, dtype, path, small)

    def _forward(self, op, inputs, plan, dtype, path, small) -> Value:
        shapes = [tuple(v.shape) for v in inputs]
        out_shape, red_shape, tile = plan
        page = tile[: len(out_shape)]
        executor = current_executor()
        in_memory = getattr(op, "in_memory_output", False)
        if not out_shape:
            out = None
        elif in_memory and executor is None:
            out = InMemoryResult(out_shape, dtype)
        else:  # (a cluster's workers write into a file, read back below if in memory)
            out = PagedFile.create(out_shape, dtype, page, path=path, in_memory=small)
            if not out.on_disk:
                track(out)
        try:
            if executor is not None:
                acc = executor.forward(self, op, inputs, plan, dtype, out)
            else:
                total = tile_count(out_shape + red_shape, tile)
                acc = self.forward_steps(
                    op,
                    inputs,
                    plan_steps(op, shapes, plan),
                    out,
                    dtype,
                    total,
                )
        except BaseException:
            if out is not None:
                out.discard()
            raise
        if out is None:
            return np.asarray(acc, dtype)
        if in_memory and isinstance(out, PagedFile):
            return out.commit().read(None)
        return out.commit()

    def forward_steps(self, op, inputs, step_iter, out, dtype, total=0):
        """Run ``op`` forward over ``step_iter`` (`_tile_reads.steps`), writing each
        finished output tile into ``out`` (None: a 0-d result); returns the last
        accumulator (a 0-d result, or a partial one when the steps stop short of
        the end of the reduction)."""
        bar = self._bar(total, "forward")
        acc = None
        # Finished output tiles are written on a second thread while the next tile
        # computes; at most one write is pending, so two output tiles are alive.
        writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gradpipe-ooc-write")
        pending = None
        # With `forward_into` the op writes and accumulates into an output tile the
        # driver owns; tiles whose write has finished are reused.
        into = getattr(op, "forward_into", None) if out is not None else None
        written: list[np.ndarray] = []
        pending_tile = None
        try:
            for (out_r, first, last, _), blocks in prefetched(step_iter, inputs):
                if into is not None:
                    if first:
                        acc = take(written, tuple(s.stop - s.start for s in out_r), dtype)
                    into(acc, *blocks, accumulate=not first)
                else:
                    part = op.forward_block(*blocks)
                    if any(np.may_share_memory(part, b) for b in blocks):
                        part = part.copy()  # blocks are recycled; `combine` may update in place
                    acc = part if first else op.combine(acc, part)
                    if last and hasattr(op, "finish"):
                        acc = op.finish(acc)  # e.g. a mean's one division of the sum
                if last and out is not None:
                    if pending is not None:
                        pending.result()
                        if into is not None:
                            written.append(pending_tile)
                    pending, pending_tile = writer.submit(out.write, out_r, acc), acc
                if bar is not None:
                    bar.update()
            if pending is not None:
                pending.result()
        except BaseException:
            if pending is not None:
                pending.exception()  # let the write finish before the file goes
            raise
        finally:
            writer.shutdown()
            if bar is not None:
                bar.close()
        return acc

    # -- backward ---------------------------------------------------------------

    def backward(
        self, op, inputs: Sequence[Value], output: Value | None, g: Value, wants: Sequence[bool]
    ) -> list[Value | None]:
        """Gradients of ``op`` for every input where ``wants`` is true (else None).

        Each step's input gradients are added into the gradient files; a region
        written for the first time is written without reading it back.
        """
        settle([*inputs, g] if output is None else [*inputs, output, g])
        plan = self._plan(op, inputs, "backward", g)
        # gradient files of DiskArray inputs, each on disk or, when small, in memory
        files = [w and v.shape != () and not is_resident(v) for v, w in zip(inputs, wants)]
        small, pending = [], 0
        cluster = current_executor() is not None
        for v, f in zip(inputs, files):
            nbytes = math.prod(v.shape) * np.dtype(v.dtype).itemsize if f else 0
            small.append(f and not cluster and hold_in_memory(nbytes, self.whole_budget, pending))
            pending += nbytes if small[-1] else 0
        write = sum(
            math.prod(v.shape) * np.dtype(v.dtype).itemsize
            for v, w, s in zip(inputs, wants, small)
            if w and not is_resident(v) and not s
        )
        summed = [v for v, w in zip(inputs, wants) if w and is_resident(v)]
        held = [
            f"the gradient of an input {v.dtype}{list(v.shape)}" for v, s in zip(inputs, small) if s
        ]
        with stage_of(
            op, "backward", inputs, plan, write, self._bytes_for, g=g, summed=summed, held=held
        ):
            return self._backward(op, inputs, output, g, wants, plan, small)

    def _backward(self, op, inputs, output, g, wants, plan, small) -> list[Value | None]:
        shapes = [tuple(v.shape) for v in inputs]
        out_shape, red_shape, tile = plan
        first_regions = op.index_map(*first_tile(out_shape, red_shape, tile), *shapes)
        grads: list[Any] = []
        for v, w, r, held in zip(inputs, wants, first_regions, small):
            if not w:
                grads.append(None)
            elif v.shape == () or is_resident(v):  # summed in memory
                grads.append(np.zeros(v.shape, v.dtype))
            else:
                page = tuple(s.stop - s.start for s in r)
                grads.append(PagedFile.create(v.shape, v.dtype, page, in_memory=held))
                if held and not grads[-1].on_disk:
                    track(grads[-1])
        # sources: inputs, then g, then (optionally) the forward output
        extra = [g] + ([output] if getattr(op, "backward_uses_output", False) else [])
        try:
            executor = current_executor()
            if executor is not None:
                grads = executor.backward(self, op, inputs, extra, plan, grads)
            else:
                total = tile_count(out_shape + red_shape, tile)
                step_iter = plan_steps(op, shapes, plan)
                self.backward_steps(op, inputs, extra, step_iter, grads, total=total)
        except BaseException:
            for gr in grads:
                if isinstance(gr, PagedFile):
                    gr.discard()
            raise
        return [gr.commit() if isinstance(gr, PagedFile) else gr for gr in grads]

    def backward_steps(self, op, inputs, extra, step_iter, grads, shared=None, total=0):
        """Run ``op`` backward over ``step_iter``, adding each step's input gradients
        into ``grads`` (files; in-memory arrays for resident operands, added to in
        place; 0-d arrays, replaced by their sums); a region written
        for the first time by this call is written without reading it back.

        ``shared`` (one set of region keys per input) names regions that other
        callers write too: their gradients are summed here and returned (one dict
        per input, region key to block) instead of written. ``extra`` is the
        cotangent, then the forward output where the op's backward uses it.
        """
        n = len(inputs)
        uses_out = len(extra) > 1
        g = extra[0]
        touched: list[set] = [set() for _ in inputs]
        kept: list[dict] = [{} for _ in inputs]
        step_iter = (
            (o, f, la, (*rs, o if g.shape else None) + ((o,) if uses_out else ()))
            for o, f, la, rs in step_iter
        )
        bar = self._bar(total, "backward")
        try:
            for (_, _, _, regions), blocks in prefetched(step_iter, [*inputs, *extra]):
                args = (blocks[n], *([blocks[n + 1]] if uses_out else []), *blocks[:n])
                parts = op.backward_block(*args)
                for i, (gr, part) in enumerate(zip(grads, parts)):
                    if gr is None or part is None:
                        continue
                    r = regions[i]
                    if isinstance(gr, np.ndarray):
                        if gr.ndim:  # a resident operand's gradient, held in memory
                            view = gr[r]
                            view += part
                        else:
                            grads[i] = np.asarray(gr + np.sum(part), gr.dtype)
                        continue
                    key = tuple((s.start, s.stop) for s in r)
                    if shared is not None and key in shared[i]:
                        have = kept[i].get(key)
                        kept[i][key] = part.copy() if have is None else have + part
                    elif key in touched[i]:
                        gr.write(r, gr.read(r) + part)
                    else:
                        gr.write(r, part)
                        touched[i].add(key)
                if bar is not None:
                    bar.update()
        finally:
            if bar is not None:
                bar.close()
        return kept
