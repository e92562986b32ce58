"""One piece of a loss's pass as one JAX program (`_one_pass`): the steps of the
chain over the piece, its share of the loss and the VJP of that share with respect
to the piece's in-memory operands (`_Tile` gathers them, `Program` describes them,
hashable, so equal pieces share one compilation), run by XLA on the host's CPU or
on the device a budget names (`_compute_device`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
import threading
from collections.abc import Callable, Iterator
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.extend.core import ClosedJaxpr

from ..kernels._promotion import is_differentiable
from ..planning._chain import ChainFile, is_chain
from ..planning._chain_read import Evaluation, region_key
from ..planning._resident import is_resident
from ..storage._file_map import is_view, populate, release
from ..storage._page_layout import is_whole
from ..storage._paged_file import Region
from ._compute_device import wide
from ._row_products import evaluate

__all__ = ["Launched", "Program", "Sender", "Tile", "in_memory", "launch", "reads_elsewhere", "run"]

_trace_lock = threading.Lock()


#: One step of a tile's program: the node's JAX form, its dtype, where its inputs
#: come from and the shape of its block.
_Step = tuple[Callable[..., Any], str, tuple[tuple[str, int], ...], tuple[int, ...]]


@dataclasses.dataclass(frozen=True)
class Program:
    """One tile's graph as a hashable description (equal tiles share a program):
    the arguments' shapes and dtypes, the steps (a node's JAX form, its dtype and
    where its inputs come from: ``("a", i)`` an argument, ``("s", j)`` a step), the
    arguments differentiated (in-memory operands) and the reduction; ``x64``
    whether it is traced with 64-bit types (on the host always, as gradpipe's
    kernels compute; on a device where its types are); ``precision`` the matrix
    products' (`jax.default_matmul_precision` where the pass was called)."""

    args: tuple[tuple[tuple[int, ...], str], ...]
    steps: tuple[_Step, ...]
    wrt: tuple[int, ...]
    kind: str
    acc: str
    x64: bool = True
    precision: str | None = None


@functools.lru_cache(maxsize=256)
def _jaxpr(program: Program) -> ClosedJaxpr:
    specs = [jax.ShapeDtypeStruct(shape, np.dtype(dtype)) for shape, dtype in program.args]

    def tile(*given: jax.Array) -> tuple[jax.Array, ...]:
        # a sum's last argument is the cotangent its share of the loss gets (a
        # mean's 1/count): the gradients come out scaled, as the loss's are
        args = given[:-1] if program.kind == "sum" else given

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
            return (part, *pull(given[-1].astype(part.dtype)))
        # an extremum: the tile's, how many elements tie for it, and the gradient of
        # their sum (JAX shares an extremum's gradient equally among its ties)
        values, pull = jax.vjp(block, *wrt)
        best = jnp.max(values) if program.kind == "max" else jnp.min(values)
        ties = values == best
        return (best, jnp.sum(ties, dtype=np.dtype(program.acc)), *pull(ties.astype(values.dtype)))

    with _trace_lock, _types_of(program):
        return jax.make_jaxpr(tile)(*specs)


@contextlib.contextmanager
def _types_of(program: Program) -> Iterator[None]:
    """This thread's JAX settings as ``program`` is traced and run with: its 64-bit
    types, and the matrix products' precision where it names one."""
    with jax.enable_x64(program.x64):
        if program.precision is None:
            yield
        else:
            with jax.default_matmul_precision(program.precision):
                yield


def _shaped(block: jax.Array, shape: tuple[int, ...]) -> jax.Array:
    """``block`` as the output block of its step: a step that only drops or adds axes
    of size 1 (a reshape, a basic index) gives its values, a broadcast its input's
    (`Node.jax`)."""
    if block.shape == shape:
        return block
    if block.size == math.prod(shape):
        return jnp.reshape(block, shape)
    return jnp.broadcast_to(block, shape)


def run(program: Program, args: list[Any]) -> list[np.ndarray]:
    """One piece's share of the loss and its gradients, by the program compiled by
    XLA for the host's CPU (measured twice as fast here as evaluating it with NumPy,
    0.54 s against 1.05 s for 256 MiB of a five-step chain), with the types the
    program was traced with, for this thread, and the call's matrix precision."""
    with _types_of(program), jax.default_device(_cpu()):
        return [np.asarray(o) for o in _compiled(program, BATCHED_ROWS)(*args)]


#: Whether a host program's products of a vector with a matrix's rows are batched
#: (`_row_products`).
BATCHED_ROWS = True


class Launched:
    """A piece's program started on a device (`launch`): `result` waits for it and
    brings its outputs back in one transfer."""

    def __init__(
        self, outs: Any = None, error: BaseException | None = None, x64: bool = False
    ) -> None:
        self._outs = outs
        self._error = error
        self._x64 = x64

    def queued(self) -> tuple[Any, BaseException | None, bool]:
        """Its outputs on the device, not waited for (None where it failed), its
        error, and whether its program computes with 64-bit types."""
        return self._outs, self._error, self._x64

    def result(self) -> list[np.ndarray]:
        if self._error is not None:
            raise self._error
        return [np.asarray(o) for o in jax.device_get(self._outs)]

    def settle(self) -> None:
        """Wait until the program has run (its inputs are read), whatever its end."""
        with contextlib.suppress(Exception):
            jax.block_until_ready(self._outs)


def launch(program: Program, args: list[Any], sender: Sender, keys: list[Any]) -> Launched:
    """Start one piece's program on ``sender``'s device, the piece sent there first
    (``keys``: `Tile.keys`), without waiting: JAX queues the transfer and the
    program, as a loop a user writes by hand does, and the caller reads the next
    tile meanwhile. A step JAX cannot differentiate fails at `Launched.result`."""
    try:
        with _types_of(program):
            return Launched(_compiled(program)(*sender(args, keys)), x64=program.x64)
    except NotImplementedError as e:
        return Launched(error=e)


class Sender:
    """Sends a pass's pieces to its device: the data's blocks each piece (mapped
    ones populated first, their pages mapped at once rather than fault by fault),
    the in-memory operands (parameters, the seed) once a pass."""

    def __init__(self, device: Any) -> None:
        self.device = device
        self._sent: dict[Any, Any] = {}

    def __call__(self, args: list[Any], keys: list[Any] | None = None) -> list[Any]:
        keys = keys if keys is not None else [None] * len(args)
        out: list[Any] = [self._sent.get(k) if k is not None else None for k in keys]
        fresh = [i for i, o in enumerate(out) if o is None]
        if POPULATE_VIEWS:
            for i in fresh:
                if is_view(args[i]):
                    populate(args[i])
        for i, moved in zip(fresh, jax.device_put([args[i] for i in fresh], self.device)):
            out[i] = moved
            if keys[i] is not None:
                self._sent[keys[i]] = moved
        return out


#: The smallest block a piece releases itself (`Tile.release_views`); a smaller one
#: (a target beside the rows) is released with its tile: a drop is a system call, and
#: on a sandboxed TPU host a piece's two drops took 3.0 ms per 64 MiB of rows where a
#: whole tile's took 2.6 ms.
PIECE_RELEASE_BYTES = 2**20

#: Whether a piece's mapped blocks are populated before they are sent to a device.
POPULATE_VIEWS = True


@functools.lru_cache(maxsize=1)
def _cpu() -> Any:
    return jax.devices("cpu")[0]


@functools.lru_cache(maxsize=64)
def _compiled(program: Program, batched_rows: bool = False) -> Callable[..., Any]:
    """``program`` compiled (on the host, its products of a vector with a matrix's
    rows batched where ``batched_rows``)."""
    closed = _jaxpr(program)
    if batched_rows:
        return jax.jit(lambda *a: evaluate(closed, a))
    return jax.jit(lambda *a: jax.core.eval_jaxpr(closed.jaxpr, closed.consts, *a))


class Tile:
    """One tile's arguments and steps, gathered from the graph over its region."""

    def __init__(
        self,
        top: ChainFile,
        region: Region,
        ev: Evaluation,
        data: dict[int, Any] | None = None,
        device: Any = None,
    ) -> None:
        self.args: list[Any] = []
        #: per argument, what names an in-memory operand's block for the whole pass
        #: (a device is sent it once: `Sender`); None for the data's blocks
        self.keys: list[Any] = []
        self.arg_keys: dict[tuple[int, Any], int] = {}
        self.steps: list[_Step] = []
        self.step_keys: dict[tuple[int, Any], int] = {}
        self.wrt: list[int] = []
        self.uses: list[tuple[ChainFile, int, Region | None]] = []
        self.ev = ev
        self.region = region
        #: the stored arrays differentiated (``data``, by id), each one argument read
        #: over the tile's own region, their gradients the program's last outputs
        self.data: list[Any] = []
        self._data_args: list[int] = []
        self._wanted = data or {}
        self.irregular = False  # one of them is read over another region
        self._device = device  # the pass's device (None: the host)
        self._walk(top, region)

    def _walk(self, c: ChainFile, region: Region) -> tuple[str, int]:
        key = (id(c), region_key(region))
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
                self.keys.append((id(s), region_key(r)))
                self.args.append(self._operand(s, r))
            else:
                refs.append(("a", self._leaf(s, r)))
        shape = tuple(s.stop - s.start for s in region)
        self.steps.append((_step_fn(node.jax), c.dtype.str, tuple(refs), shape))
        self.step_keys[key] = len(self.steps) - 1
        return ("s", len(self.steps) - 1)

    def _operand(self, s: Any, r: Region | None) -> Any:
        """An in-memory operand's block: on the pass's device, a JAX array there read
        whole is taken as it is (not brought to the host to be sent back)."""
        if isinstance(s, np.ndarray):
            return s
        whole = is_whole(r, s.shape)
        there = s.on_device(self._device) if whole and self._device is not None else None
        return there if there is not None else s.read(r)

    def _leaf(self, s: Any, r: Region | None) -> int:
        key = (id(s), region_key(r))
        if id(s) in self._wanted and key not in self.arg_keys:
            if region_key(r) != region_key(self.region) or any(
                self.data[i] is s for i in range(len(self.data))
            ):
                self.irregular = True
            self.data.append(s)
            self._data_args.append(len(self.args))
        if key not in self.arg_keys:
            self.arg_keys[key] = len(self.args)
            self.keys.append(key if isinstance(s, np.ndarray) or is_resident(s) else None)
            if isinstance(s, np.ndarray):
                self.args.append(s)
            elif is_resident(s):
                self.args.append(s.read(r))
            else:
                assert r is not None or not s.shape
                self.args.append(self.ev.block(s, r) if r is not None else s.read(None))
        return self.arg_keys[key]

    def release_views(self) -> None:
        """Drop the mapped pages of the data's blocks this piece read (its program
        has run), before the rest of its tile's: a device's pieces, sent one after
        another, then hold only the pages of those not yet run. Blocks under
        `PIECE_RELEASE_BYTES` (a target beside the rows) wait for their tile's."""
        for a, key in zip(self.args, self.keys):
            big = key is None and is_view(a) and a.nbytes >= PIECE_RELEASE_BYTES
            if big and a.flags.c_contiguous:
                release(a)

    def program(self, kind: str, acc: np.dtype, host: bool = True) -> Program:
        """The tile's program; a sum's takes the cotangent of its share after
        ``args`` (`run`'s ``seed``). On a device (not ``host``) its types are
        64-bit only where its arguments', steps' or ``acc`` are."""
        seed = (((), acc.str),) if kind == "sum" else ()
        args = (*((tuple(np.shape(a)), _dtype(a).str) for a in self.args), *seed)
        return Program(
            args,
            tuple(self.steps),
            (*self.wrt, *self._data_args),
            kind,
            acc.str,
            host or bool(wide([acc, *(d for _, d in args), *(st[1] for st in self.steps)])),
            jax.config.jax_default_matmul_precision,  # type: ignore[attr-defined]
        )


def _dtype(a: Any) -> np.dtype:
    """An argument's dtype (a JAX array on the pass's device: not brought back)."""
    return np.dtype(a.dtype) if isinstance(a, (np.ndarray, jax.Array)) else np.asarray(a).dtype


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


def reads_elsewhere(top: ChainFile, region: Region, data: dict[int, Any]) -> bool:
    """Whether the graph of ``top`` over ``region`` reads a stored array of ``data``
    over another region, or over two (a flip, a broadcast, a shifted slice): then
    its gradient cannot be written tile by tile. Reads nothing (`Tile.irregular`
    is the same rule, found while reading)."""
    seen: set[tuple[int, Any]] = set()

    def walk(c: ChainFile, r: Region) -> bool:
        key = (id(c), region_key(r))
        if key in seen:
            return False
        seen.add(key)
        node = c.node
        assert node is not None
        for s, sr in zip(node.sources, node.regions(r)):
            if is_chain(s):
                assert sr is not None
                if walk(s, sr):
                    return True
            elif id(s) in data and region_key(sr) != region_key(region):
                return True
        return False

    return walk(top, region)


def in_memory(s: Any) -> bool:
    """Whether ``s`` is an in-memory operand (a JAX parameter, or a 0-d value)."""
    return is_resident(s) or (isinstance(s, np.ndarray) and s.shape == ())
