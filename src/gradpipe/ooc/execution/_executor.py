"""Where a pass's tiles run: in this process (the default) or on a dask cluster.

Inside ``with ooc.executor(client):`` every block-parallel pass (forward and
backward, fused chains and their stores included) is cut into tasks of whole
output tiles and run on the workers of a ``dask.distributed`` client. The process
that calls gradpipe plans each pass as it always does (same tiles, same budget),
creates the output files, sends each task the pass (its operation, and its input
and output files by path) and commits the outputs once every task has finished;
the workers read their inputs from the shared store and write their output tiles
into the not yet visible output files. So a result appears under its name only
whole, a task re-run after a worker dies writes the same bytes again, and each
worker holds at most the pass's budget per thread.

Passes whose outputs are few tiles (a full reduction) split their reduction
range across tasks instead and add the partial results here, in task order.
Operations that run their own loop (`CustomOp`: sorting, gathers, cumulative
operations, ``update_``) run in this process; their block-parallel steps go to the
cluster. What a pass sends and what a worker runs are in `_cluster_tasks`.
"""

from __future__ import annotations

import contextlib
import pathlib
import threading
import uuid
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import numpy as np

from ..planning._budget import MemoryBudget
from ..planning._resident import InMemoryResult
from ..planning._tile_plan import Plan
from ..planning._tile_reads import regions, steps, tile_count
from ..storage._iostats import add_io
from ..storage._paged_file import PagedFile, Region
from ..storage._scratch import get_scratch_dir
from ._cluster_tasks import Key, backward_task, can_read, dumps, forward_task

if TYPE_CHECKING:
    from distributed import Client
    from tqdm.auto import tqdm

__all__ = ["DaskExecutor", "current_executor", "executor"]

_lock = threading.Lock()
_stack: list[DaskExecutor | None] = []

_T = TypeVar("_T")


class _Driver(Protocol):
    """What a pass on the cluster asks of the `Driver` that plans it."""

    budget: MemoryBudget
    name: str

    def _bar(self, total: int, phase: str) -> tqdm | None: ...


def current_executor() -> DaskExecutor | None:
    """The executor passes run on now (None: this process)."""
    with _lock:
        return _stack[-1] if _stack else None


@contextlib.contextmanager
def executor(target: Client | DaskExecutor | None) -> Iterator[DaskExecutor | None]:
    """Run the tile work of every out-of-core pass inside the block on ``target``.

    ```python
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=1) as cluster, Client(cluster) as client:
        with ooc.executor(client):
            loss, grad = jax.value_and_grad(f)(w, x)
    ```

    **Arguments:**

    - `target`: a ``distributed.Client``, a `DaskExecutor` (to set its options), or
      ``None`` for this process.

    The workers must see the files of this process: its scratch directory
    (`set_scratch_dir`, on a filesystem every worker mounts) and the arrays the
    program opens. Elementwise results, fused chains and reductions along axes that
    keep several output tiles equal a run in this process bit for bit: the same
    NumPy kernels run on the same tiles in the same order (on workers with the same
    NumPy and the same kind of CPU; NumPy picks its SIMD kernels by CPU). Products
    agree to rounding only, as does whatever is computed from them: BLAS ``gemm``
    sums in an order that depends on its thread count and CPU kernel, and dask
    starts worker processes with one BLAS thread where this process has one per
    core. They are bit for bit the same only when the BLAS threads and kernel are.
    A reduction to a few tiles is split across tasks, so its partial sums are added
    in another grouping and may differ in the last bits.
    """
    ex = target if target is None or isinstance(target, DaskExecutor) else DaskExecutor(target)
    with _lock:
        _stack.append(ex)
    try:
        yield ex
    finally:
        with _lock:
            _stack.pop()


def _split(items: list[_T], parts: int) -> list[list[_T]]:
    """``items`` cut into ``parts`` contiguous runs of nearly equal length."""
    parts = max(1, min(parts, len(items)))
    q, r = divmod(len(items), parts)
    out: list[list[_T]] = []
    start = 0
    for k in range(parts):
        end = start + q + (k < r)
        out.append(items[start:end])
        start = end
    return out


# ---------------------------------------------------------------- the executor


class DaskExecutor:
    """Runs passes on the workers of a ``dask.distributed`` client.

    **Arguments:**

    - `client`: the ``distributed.Client``.
    - `tasks_per_thread`: tasks a pass is cut into per worker thread (more
      balance the load and lose less to a dead worker; fewer pay less overhead).
    """

    def __init__(self, client: Client, *, tasks_per_thread: int = 2) -> None:
        if tasks_per_thread < 1:
            raise ValueError(f"tasks_per_thread must be at least 1, not {tasks_per_thread}.")
        self.client = client
        self.tasks_per_thread = int(tasks_per_thread)
        self._checked_dir: pathlib.Path | None = None

    def __repr__(self) -> str:
        return f"DaskExecutor({self.client!r}, tasks_per_thread={self.tasks_per_thread})"

    def _threads(self) -> int:
        threads = sum(self.client.nthreads().values())
        if threads == 0:
            raise RuntimeError(
                "gradpipe.ooc.executor: the dask cluster has no workers. Start workers "
                "(or wait for them: client.wait_for_workers(n)) before running."
            )
        return threads

    def _check_shared(self) -> None:
        """The workers must see this process's scratch files: checked once per directory."""
        scratch = get_scratch_dir()
        if self._checked_dir == scratch:
            return
        probe = scratch / f"probe-{uuid.uuid4().hex}"
        probe.touch()
        try:
            seen = self.client.run(can_read, str(probe))
        finally:
            probe.unlink()
        blind = sorted(w for w, ok in seen.items() if not ok)
        if blind:
            raise RuntimeError(
                f"gradpipe.ooc.executor: workers {blind} cannot see the scratch directory "
                f"{str(scratch)!r}. Put it on a filesystem every worker mounts: "
                "ooc.set_scratch_dir(path) or $GRADPIPE_SCRATCH."
            )
        self._checked_dir = scratch

    def _run(
        self,
        driver: _Driver,
        fn: Callable[..., Any],
        payload: bytes,
        task_args: list[tuple[Any, ...]],
        label: str,
        fold: Callable[[Any], None] | None = None,
    ) -> list[Any]:
        """Submit one task per entry of ``task_args``; their results in order (a
        progress bar counts finished tasks when progress is on). With ``fold``, each
        result is handed to ``fold`` in task order as soon as it and those before it
        have arrived, and not kept (the list holds None)."""
        from distributed import as_completed

        self._check_shared()
        tag = uuid.uuid4().hex[:8]
        futures = [
            self.client.submit(fn, payload, *args, key=f"gradpipe-{label}-{tag}-{k}", pure=False)
            for k, args in enumerate(task_args)
        ]
        index = {f.key: k for k, f in enumerate(futures)}
        results: list[Any] = [None] * len(futures)
        folded = 0  # results before this one were handed to `fold`
        bar = driver._bar(len(futures), f"{label.rsplit('-', 1)[-1]} on the cluster")
        try:
            # the first failure raises here; the other tasks are cancelled
            for fut, result in as_completed(futures, with_results=True):
                results[index[fut.key]] = result
                add_io(result[-1])
                while fold is not None and folded < len(results) and results[folded] is not None:
                    fold(results[folded])
                    results[folded] = None
                    folded += 1
                if bar is not None:
                    bar.update()
        except BaseException:
            self.client.cancel(futures)
            raise
        finally:
            if bar is not None:
                bar.close()
        return results

    # -- passes ------------------------------------------------------------------

    def forward(
        self,
        driver: _Driver,
        op: Any,
        inputs: Sequence[Any],
        plan: Plan,
        dtype: np.dtype,
        out: PagedFile | InMemoryResult | None,
    ) -> Any:
        """Run a forward pass; returns its 0-d result (``out`` None) or None."""

        shapes = [tuple(v.shape) for v in inputs]
        out_shape, red_shape, tile = plan
        n_out = len(out_shape)
        red_tile = tile[n_out:]
        outs = list(regions(out_shape, tile[:n_out]))
        n_red = tile_count(red_shape, red_tile)
        wanted = self._threads() * self.tasks_per_thread
        split_red = len(outs) < wanted and n_red > 1 and getattr(op, "forward_into", None) is None
        tasks: list[tuple[list[Region], int, int | None, bool]]
        if split_red:
            per_tile = max(1, wanted // len(outs))
            runs = _split(list(range(n_red)), per_tile)
            tasks = [([o], run[0], run[-1] + 1, True) for o in outs for run in runs]
        else:
            tasks = [(group, 0, None, False) for group in _split(outs, wanted)]
        payload = dumps(
            (
                op,
                inputs,
                out,
                dtype,
                shapes,
                red_shape,
                red_tile,
                driver.budget.nbytes,
                driver.name,
                type(driver),  # the worker runs its tiles with the caller's kind of driver
            )
        )
        results = self._run(driver, forward_task, payload, tasks, f"{op.name}-forward")
        if not split_red:
            return results[0][0] if out is None else None
        acc: dict[Key, Any] = {}
        for (group, *_), (part, _) in zip(tasks, results):
            key = tuple((s.start, s.stop) for s in group[0])
            acc[key] = part if key not in acc else op.combine(acc[key], part)
        finished = []
        for o in outs:
            a = acc[tuple((s.start, s.stop) for s in o)]
            if hasattr(op, "finish"):
                a = op.finish(a)
            if out is not None:
                out.write(o, np.asarray(a, dtype))
            finished.append(a)
        return finished[0] if out is None else None

    def backward(
        self,
        driver: _Driver,
        op: Any,
        inputs: Sequence[Any],
        extra: Sequence[Any],
        plan: Plan,
        grads: list[Any],
    ) -> list[Any]:
        """Run a backward pass into ``grads``; returns the gradients."""

        shapes = [tuple(v.shape) for v in inputs]
        out_shape, red_shape, tile = plan
        n_out = len(out_shape)
        red_tile = tile[n_out:]
        groups = _split(
            list(regions(out_shape, tile[:n_out])), self._threads() * self.tasks_per_thread
        )
        # regions of an input gradient that several tasks add to are summed here
        owners: list[dict[Key, set[int]]] = [{} for _ in inputs]
        for t, group in enumerate(groups):
            for _, _, _, rs in steps(op, shapes, group, red_shape, red_tile):
                for i, r in enumerate(rs):
                    if isinstance(grads[i], PagedFile):
                        assert r is not None  # (a gradient file's input has a shape)
                        owners[i].setdefault(tuple((s.start, s.stop) for s in r), set()).add(t)
        shared = [{k for k, ts in d.items() if len(ts) > 1} for d in owners]
        payload = dumps(
            (
                op,
                inputs,
                extra,
                grads,
                shapes,
                red_shape,
                red_tile,
                driver.budget.nbytes,
                driver.name,
                shared,
                type(driver),
            )
        )
        sums: list[dict[Key, np.ndarray]] = [{} for _ in inputs]

        def fold(result: Any) -> None:
            # in task order, so that the sums do not depend on which task finished
            # first; each task's in-memory gradients are added as they arrive, not
            # all held until the last task ends
            kept, in_memory, _ = result
            for i, g in enumerate(in_memory):
                if g is not None:
                    grads[i] = np.asarray(grads[i] + g, grads[i].dtype)
            for i, parts in enumerate(kept):
                for key, part in parts.items():
                    sums[i][key] = part if key not in sums[i] else sums[i][key] + part

        self._run(
            driver, backward_task, payload, [(g,) for g in groups], f"{op.name}-backward", fold
        )
        for i, parts in enumerate(sums):
            for key, block in parts.items():
                grads[i].write(tuple(slice(a, b) for a, b in key), block)
        return grads
