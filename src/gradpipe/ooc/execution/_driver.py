"""The `Driver`: runs a `BlockParallelOp` forward or backward on array files.

A pass walks output tiles in C order with the reduction tiles innermost. While
one step computes, a background thread reads the next step's input tiles (double
buffering), so disk time hides behind the arithmetic when tiles are large. Block
kernels are NumPy (OpenBLAS), measured faster than XLA's CPU matmul on this kind of
machine (see ``benchmarks/ooc_kernel.py``); they run on the calling host thread.

The driver plans each pass and owns its files; the loops over the steps are in
`_tile_loops`, the choice of a chain over a file in `_fusion`.
"""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, cast

import numpy as np
from numpy.typing import DTypeLike

from ..planning._array_file import ArrayFile
from ..planning._budget import MemoryBudget, default_page_shape
from ..planning._chain import ChainFile, is_chain
from ..planning._chain_readers import settle
from ..planning._resident import InMemoryResult, is_resident
from ..planning._tile_plan import Plan, first_tile, passes, stage_of, tile_plan
from ..planning._tile_reads import Step, plan_steps, tile_count
from ..storage._allocator import use_mmap_for_tiles
from ..storage._paged_file import PagedFile, Region
from ._executor import current_executor
from ._fusion import fuse, fuse_map, pick
from ._held_results import hold_in_memory, result_file
from ._running_tails import settle_all
from ._store import Store
from ._tile_loops import backward_steps, forward_steps

if TYPE_CHECKING:
    from tqdm.auto import tqdm

__all__ = ["Driver", "Value", "set_progress"]

_progress = [False]


def set_progress(enabled: bool) -> None:
    """Show (or hide) a tqdm progress bar for long out-of-core operations.

    Off by default in library calls; the CLI and the demo turn it on.
    """
    _progress[0] = bool(enabled)


#: An input or output of a pass: an array file (a resident operand, a chain, ...) or
#: an in-memory value (a 0-d result, an array held in memory).
Value = ArrayFile | np.ndarray


class Driver:
    """Runs block-parallel operations on array files under one memory budget.

    It is also the toolkit a `CustomOp` receives: `allocate`, `read`, `write` and
    `run` (a nested block-parallel operation).
    """

    _bytes_for: Callable[[tuple[int, ...]], int]  # the last plan's bytes per step

    def __init__(
        self, budget: MemoryBudget, name: str = "ooc", whole: MemoryBudget | None = None
    ) -> None:
        self.budget = budget
        self.name = name
        # the caller's whole budget (``budget`` may be what is left of it for the
        # tiles): small results are held in memory within shares of it
        self.whole_budget = budget if whole is None else whole
        # which inputs of the operation JAX differentiates, where it does (a fused
        # chain's step keeps it: a loss's pass computes the gradient of a stored one)
        self.differentiated: tuple[bool, ...] | None = None
        use_mmap_for_tiles()

    # -- toolkit -------------------------------------------------------------

    def allocate(
        self, shape: Sequence[int], dtype: DTypeLike, page_shape: Sequence[int] | None = None
    ) -> PagedFile:
        """A new zero-filled scratch array file (call ``.commit()`` once written)."""
        shape = tuple(shape)
        if page_shape is None:
            page_shape = default_page_shape(shape, np.dtype(dtype).itemsize, self.budget)
        return PagedFile.create(shape, dtype, page_shape)

    @contextlib.contextmanager
    def writing(
        self, shape: Sequence[int], dtype: DTypeLike, page_shape: Sequence[int] | None = None
    ) -> Iterator[PagedFile]:
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

    def _plan(self, op: Any, inputs: Sequence[Value], phase: str, g: Value | None = None) -> Plan:
        """The loop's shapes and tile; chains among the inputs (and the cotangent ``g``
        of a backward pass) that the cost rule says to write are written first
        (`ChainFile.should_store`). An earlier pass's tiles still running on a
        device are settled first (`_running_tails`)."""
        settle_all()
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

    def _bar(self, total: int, phase: str) -> tqdm | None:
        if not _progress[0] or total < 2:
            return None
        from tqdm.auto import tqdm

        return tqdm(total=total, desc=f"{self.name} {phase}", unit="tile", leave=False)

    # -- forward ----------------------------------------------------------------

    def fuse(self, op: Any, inputs: Sequence[Value]) -> ChainFile | None:
        """``op``'s output as a chain computed on read, or None (`_fusion.fuse`)."""
        return fuse(self, op, inputs)

    def pick(self, op: Any, inputs: Sequence[Value]) -> ChainFile | None:
        """``op``'s output as rows of its input read through, or None (`_fusion.pick`)."""
        return pick(self, op, inputs)

    def fuse_map(
        self,
        label: str,
        sources: Sequence[Value],
        regions: Callable[[Region], Sequence[Region | None]],
        compute: Callable[[list[Any]], Sequence[np.ndarray]],
        shape: tuple[int, ...],
        dtypes: Sequence[DTypeLike],
    ) -> list[ChainFile]:
        """Chains computed on read by one block function (`_fusion.fuse_map`)."""
        return fuse_map(self, label, sources, regions, compute, shape, dtypes)

    def store(self, chain: ChainFile) -> Value:
        """``chain`` (a `ChainFile`) written to a scratch file: its stored copy."""
        return self.forward(Store(), [chain])

    def forward(self, op: Any, inputs: Sequence[Value]) -> Value:
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

    def _forward(
        self,
        op: Any,
        inputs: Sequence[Value],
        plan: Plan,
        dtype: np.dtype,
        path: str | os.PathLike[str] | None,
        small: bool,
    ) -> Value:
        shapes = [tuple(v.shape) for v in inputs]
        out_shape, red_shape, tile = plan
        page = tile[: len(out_shape)]
        executor = current_executor()
        in_memory = getattr(op, "in_memory_output", False)
        out: PagedFile | InMemoryResult | None
        if not out_shape:
            out = None
        elif in_memory and executor is None:
            out = InMemoryResult(out_shape, dtype)
        else:  # (a cluster's workers write into a file, read back below if in memory)
            out = result_file(out_shape, dtype, page, small, path)
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

    def forward_steps(
        self,
        op: Any,
        inputs: Sequence[Value],
        step_iter: Iterable[Step],
        out: Any,
        dtype: np.dtype,
        total: int = 0,
    ) -> Any:
        """Run ``op`` forward over ``step_iter`` (`_tile_loops.forward_steps`), with a
        progress bar over ``total`` steps."""
        bar = self._bar(total, "forward")
        return forward_steps(op, inputs, step_iter, out, dtype, bar)

    # -- backward ---------------------------------------------------------------

    def backward(
        self,
        op: Any,
        inputs: Sequence[Value],
        output: Value | None,
        g: Value,
        wants: Sequence[bool],
    ) -> list[Value | None]:
        """Gradients of ``op`` for every input where ``wants`` is true (else None).

        Each step's input gradients are added into the gradient files; a region
        written for the first time is written without reading it back.
        """
        settle([*inputs, g] if output is None else [*inputs, output, g])
        plan = self._plan(op, inputs, "backward", g)
        # gradient files of DiskArray inputs, each on disk or, when small, in memory
        files = [w and v.shape != () and not is_resident(v) for v, w in zip(inputs, wants)]
        small: list[bool] = []
        pending = 0
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

    def _backward(
        self,
        op: Any,
        inputs: Sequence[Value],
        output: Value | None,
        g: Value,
        wants: Sequence[bool],
        plan: Plan,
        small: Sequence[bool],
    ) -> list[Value | None]:
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
                grads.append(result_file(v.shape, v.dtype, page, held))
        # sources: inputs, then g, then (optionally) the forward output
        # (an op whose backward uses its output is always given it)
        extra = [g] + ([cast(Value, output)] if getattr(op, "backward_uses_output", False) else [])
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

    def backward_steps(
        self,
        op: Any,
        inputs: Sequence[Value],
        extra: Sequence[Value],
        step_iter: Iterable[Step],
        grads: list[Any],
        shared: Sequence[set[tuple[tuple[int, int], ...]]] | None = None,
        total: int = 0,
    ) -> list[dict[tuple[tuple[int, int], ...], np.ndarray]]:
        """Run ``op`` backward over ``step_iter`` (`_tile_loops.backward_steps`), with
        a progress bar over ``total`` steps."""
        bar = self._bar(total, "backward")
        return backward_steps(op, inputs, extra, step_iter, grads, shared, bar)
