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
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.extend.core import ClosedJaxpr

from ..kernels._promotion import is_differentiable
from ..planning._chain import ChainFile, is_chain
from ..planning._chain_graph import is_chain_file
from ..planning._chain_read import Evaluation, pieces_of
from ..planning._chain_readers import settle
from ..planning._resident import is_resident
from ..planning._tile_plan import stage_of
from ..planning._tile_reads import plan_steps, tile_count
from ..storage._paged_file import Region
from ._executor import current_executor
from ._loss_record import LOSS, Fold, Record, keep_record

__all__ = ["forward", "in_memory", "one_pass_reduction"]

_trace_lock = threading.Lock()


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
    if why is None:
        live: set[int] = set()
        stack = [top]
        while stack:
            c = stack.pop()
            if id(c) in live or c.node.stops_gradient:
                continue
            live.add(id(c))
            for pos, s in enumerate(c.node.sources):
                if _unstored(s):
                    consumers.setdefault(id(s), set()).add((id(c), pos))
                    stack.append(s)
    return _Graph(chains, consumers, why)


def _unstored(s: Any) -> bool:
    return is_chain_file(s) and s.stored is None


# ---------------------------------------------------------------- one tile


#: One step of a tile's program: the node's JAX form, its dtype, where its inputs
#: come from and the shape of its block.
_Step = tuple[Callable[..., Any], str, tuple[tuple[str, int], ...], tuple[int, ...]]


@dataclasses.dataclass(frozen=True)
class _Program:
    """One tile's graph as a hashable description (equal tiles share a program):
    the arguments' shapes and dtypes, the steps (a node's JAX form, its dtype and
    where its inputs come from: ``("a", i)`` an argument, ``("s", j)`` a step), the
    arguments differentiated (in-memory operands) and the reduction."""

    args: tuple[tuple[tuple[int, ...], str], ...]
    steps: tuple[_Step, ...]
    wrt: tuple[int, ...]
    kind: str
    acc: str


@functools.lru_cache(maxsize=256)
def _jaxpr(program: _Program) -> ClosedJaxpr:
    specs = [jax.ShapeDtypeStruct(shape, np.dtype(dtype)) for shape, dtype in program.args]

    def tile(*args: jax.Array) -> tuple[jax.Array, ...]:
        def block(*wrt: jax.Array) -> jax.Array:
            vals = list(args)
            for i, v in zip(program.wrt, wrt):
                vals[i] = v
            steps: list[jax.Array] = []
            for fn, dtype, refs, shape in program.steps:
                ins = [vals[k] if kind == "a" else steps[k] for kind, k in refs]
                steps.append(_shaped(jnp.asarray(fn(jnp, *ins)).astype(dtype), shape))
            return steps[-1]

        wrt = [args[i] for i in program.wrt]
        if program.kind == "sum":
            part, pull = jax.vjp(lambda *w: jnp.sum(block(*w), dtype=np.dtype(program.acc)), *wrt)
            return (part, *pull(jnp.ones_like(part)))
        # an extremum: the tile's, how many elements tie for it, and the gradient of
        # their sum (JAX shares an extremum's gradient equally among its ties)
        values, pull = jax.vjp(block, *wrt)
        best = jnp.max(values) if program.kind == "max" else jnp.min(values)
        ties = values == best
        return (best, jnp.sum(ties, dtype=np.dtype(program.acc)), *pull(ties.astype(values.dtype)))

    with _trace_lock, jax.enable_x64(True):
        return jax.make_jaxpr(tile)(*specs)


def _shaped(block: jax.Array, shape: tuple[int, ...]) -> jax.Array:
    """``block`` as the output block of its step: a step that only drops or adds axes
    of size 1 (a reshape, a basic index) gives its values, a broadcast its input's
    (`Node.jax`)."""
    if block.shape == shape:
        return block
    if block.size == math.prod(shape):
        return jnp.reshape(block, shape)
    return jnp.broadcast_to(block, shape)


def _run(program: _Program, args: list[Any]) -> list[np.ndarray]:
    """One piece's share of the loss and its gradients: the program compiled by XLA
    on the host's CPU (measured twice as fast here as evaluating it with NumPy, 0.54 s
    against 1.05 s for 256 MiB of a five-step chain), with 64-bit types for this
    thread, as the program was traced."""
    with jax.enable_x64(True), jax.default_device(_cpu()):
        return [np.asarray(o) for o in _compiled(program)(*args)]


@functools.lru_cache(maxsize=1)
def _cpu() -> Any:
    return jax.devices("cpu")[0]


@functools.lru_cache(maxsize=64)
def _compiled(program: _Program) -> Callable[..., Any]:
    closed = _jaxpr(program)
    return jax.jit(lambda *a: jax.core.eval_jaxpr(closed.jaxpr, closed.consts, *a))


#: Pieces of a tile whose programs run at once: XLA leaves a core idle in much of
#: a program (its elementwise loops), and the next piece fills it (a two-layer MLP
#: on 256 MiB, 2 cores: 0.28 s a step one at a time, 0.24-0.26 s two at once).
PIECES_IN_FLIGHT = 2


def _piece_elements(steps: int, dtype: np.dtype, budget: int) -> int:
    """Elements of the pieces a tile is computed in: the program holds about one
    block per step and two per in-memory operand (its gradient) at once, beside
    the tile's inputs; the pieces in flight within a quarter of the budget."""
    per_piece = budget // 4 // PIECES_IN_FLIGHT
    return max(1024, per_piece // (max(8, dtype.itemsize) * (3 * steps + 4)))


def _piece_limit(region: Region, limit: int) -> int:
    """At most ``limit`` elements a piece, and the tile in as many pieces as run at
    once, at least."""
    n = math.prod(s.stop - s.start for s in region)
    return max(1024, min(limit, -(-n // PIECES_IN_FLIGHT)))


@functools.lru_cache(maxsize=1)
def _pool() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(PIECES_IN_FLIGHT, thread_name_prefix="gradpipe-one-pass")


class _Tile:
    """One tile's arguments and steps, gathered from the graph over its region."""

    def __init__(self, top: ChainFile, region: Region, ev: Evaluation) -> None:
        self.args: list[Any] = []
        self.arg_keys: dict[tuple[int, Any], int] = {}
        self.steps: list[_Step] = []
        self.step_keys: dict[tuple[int, Any], int] = {}
        self.wrt: list[int] = []
        self.uses: list[tuple[ChainFile, int, Region | None]] = []
        self.ev = ev
        self._walk(top, region)

    def _walk(self, c: ChainFile, region: Region) -> tuple[str, int]:
        key = (id(c), _key(region))
        if key in self.step_keys:
            return ("s", self.step_keys[key])
        node = c.node
        assert node is not None and node.jax is not None
        refs = []
        for pos, (s, r) in enumerate(zip(node.sources, node.regions(region))):
            if is_chain(s):
                assert r is not None  # (a chain has a shape: it is read over a region)
                refs.append(self._walk(s, r))
            elif in_memory(s) and is_differentiable(s.dtype):
                refs.append(("a", len(self.args)))  # one argument per use: its own gradient
                self.wrt.append(len(self.args))
                self.uses.append((c, pos, r))
                self.args.append(s if isinstance(s, np.ndarray) else s.read(r))
            else:
                refs.append(("a", self._leaf(s, r)))
        shape = tuple(s.stop - s.start for s in region)
        self.steps.append((_step_fn(node.jax), c.dtype.str, tuple(refs), shape))
        self.step_keys[key] = len(self.steps) - 1
        return ("s", len(self.steps) - 1)

    def _leaf(self, s: Any, r: Region | None) -> int:
        key = (id(s), _key(r))
        if key not in self.arg_keys:
            self.arg_keys[key] = len(self.args)
            if isinstance(s, np.ndarray):
                self.args.append(s)
            elif is_resident(s):
                self.args.append(s.read(r))
            else:
                assert r is not None or not s.shape
                self.args.append(self.ev.block(s, r) if r is not None else s.read(None))
        return self.arg_keys[key]

    def program(self, kind: str, acc: np.dtype) -> _Program:
        return _Program(
            tuple((tuple(np.shape(a)), np.asarray(a).dtype.str) for a in self.args),
            tuple(self.steps),
            tuple(self.wrt),
            kind,
            acc.str,
        )


@dataclasses.dataclass(frozen=True)
class _Method:
    """A step's JAX form ``owner.method``, equal to another of an equal owner (a
    bound method equals only one of the same object, and each call of a program
    makes its operations anew: the tile's program would compile again each time)."""

    owner: Any
    method: Callable[..., Any]

    def __call__(self, *args: Any) -> Any:
        return self.method(self.owner, *args)


def _step_fn(fn: Callable[..., Any]) -> Callable[..., Any]:
    owner = getattr(fn, "__self__", None)
    if owner is None:
        return fn
    try:
        hash(owner)
    except TypeError:
        return fn
    return _Method(owner, fn.__func__)  # type: ignore[attr-defined]


def in_memory(s: Any) -> bool:
    """Whether ``s`` is an in-memory operand (a JAX parameter, or a 0-d value)."""
    return is_resident(s) or (isinstance(s, np.ndarray) and s.shape == ())


def _key(region: Region | None) -> Any:
    return None if region is None else tuple((s.start, s.stop) for s in region)


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
    if not any(
        in_memory(s) and is_differentiable(s.dtype)
        for c in graph.chains
        for s in c.node.sources  # type: ignore[union-attr]
    ):  # nothing in memory to differentiate: the ordinary passes lose nothing
        return None
    record = Record(top, graph.chains, graph.consumers)
    shapes = [tuple(top.shape)]
    fold = Fold(kind, acc, record)
    residents = [s for c in graph.chains for s in c.node.sources if is_resident(s)]  # type: ignore[union-attr]
    out_dtype = np.dtype(op.output_dtype(top.dtype))
    with stage_of(
        op,
        "value and gradient",
        [top],
        plan,
        0,
        driver._bytes_for,
        summed=tuple(s for s in residents if is_differentiable(s.dtype)),
    ):
        bar = driver._bar(tile_count(plan[1], plan[2]), "value and gradient")
        limit = _piece_elements(len(graph.chains), top.dtype, driver.budget.nbytes)
        for step in plan_steps(op, shapes, plan):
            region = step[3][0]
            assert region is not None
            ev = Evaluation(top, region)
            running: list[tuple[Any, Future[list[np.ndarray]]]] = []
            try:
                for piece in pieces_of(region, _piece_limit(region, limit)):
                    tile = _Tile(top, piece, ev)
                    work = _pool().submit(_run, tile.program(kind, acc), tile.args)
                    running.append((tile.uses, work))
                for uses, work in running:
                    fold.add(uses, work.result())
            finally:
                wait([work for _, work in running])  # (they read the tile's views)
                ev.release()
            if bar is not None:
                bar.update(1)
        if bar is not None:
            bar.close()
    value = fold.finish(getattr(op, "finish", None))
    keep_record(token, record)
    return np.asarray(value, out_dtype)
