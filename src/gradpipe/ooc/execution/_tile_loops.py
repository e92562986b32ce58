"""The tile loops of one pass: a `BlockParallelOp` run forward or backward over its steps.

`forward_steps` computes each step's block, accumulates it over the reduction and
writes each finished output tile on a second thread while the next one computes.
`backward_steps` adds each step's input gradients into the gradient files. Both
read their input blocks ahead of the step (`_tile_reads.prefetched`); the `Driver`
plans the steps and owns the files.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import numpy as np

from ..planning._tile_reads import Step, prefetched, take

if TYPE_CHECKING:
    from tqdm.auto import tqdm

__all__ = ["backward_steps", "forward_steps"]


def forward_steps(
    op: Any,
    inputs: Sequence[Any],
    step_iter: Iterable[Step],
    out: Any,
    dtype: np.dtype,
    bar: tqdm | None = None,
) -> Any:
    """Run ``op`` forward over ``step_iter`` (`_tile_reads.steps`), writing each
    finished output tile into ``out`` (None: a 0-d result); returns the last
    accumulator (a 0-d result, or a partial one when the steps stop short of
    the end of the reduction). ``bar`` (a progress bar, or None) counts the steps
    and is closed at the end."""
    acc: Any = None
    # Finished output tiles are written on a second thread while the next tile
    # computes; at most one write is pending, so two output tiles are alive.
    writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gradpipe-ooc-write")
    pending: Future[None] | None = None
    # With `forward_into` the op writes and accumulates into an output tile the
    # driver owns; tiles whose write has finished are reused.
    into = getattr(op, "forward_into", None) if out is not None else None
    written: list[np.ndarray] = []
    pending_tile: Any = None
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


def backward_steps(
    op: Any,
    inputs: Sequence[Any],
    extra: Sequence[Any],
    step_iter: Iterable[Step],
    grads: list[Any],
    shared: Sequence[set[tuple[tuple[int, int], ...]]] | None = None,
    bar: tqdm | None = None,
) -> list[dict[tuple[tuple[int, int], ...], np.ndarray]]:
    """Run ``op`` backward over ``step_iter``, adding each step's input gradients
    into ``grads`` (files; in-memory arrays for resident operands, added to in
    place; 0-d arrays, replaced by their sums); a region written
    for the first time by this call is written without reading it back.

    ``shared`` (one set of region keys per input) names regions that other
    callers write too: their gradients are summed here and returned (one dict
    per input, region key to block) instead of written. ``extra`` is the
    cotangent, then the forward output where the op's backward uses it. ``bar``
    (a progress bar, or None) counts the steps and is closed at the end.
    """
    n = len(inputs)
    uses_out = len(extra) > 1
    g = extra[0]
    touched: list[set[tuple[tuple[int, int], ...]]] = [set() for _ in inputs]
    kept: list[dict[tuple[tuple[int, int], ...], np.ndarray]] = [{} for _ in inputs]
    with_g = (
        (o, f, la, (*rs, o if g.shape else None) + ((o,) if uses_out else ()))
        for o, f, la, rs in step_iter
    )
    try:
        for (_, _, _, regions), blocks in prefetched(with_g, [*inputs, *extra]):
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
                assert r is not None  # (a gradient file's input has a shape)
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
