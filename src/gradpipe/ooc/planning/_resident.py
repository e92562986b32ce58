"""Resident operands: in-memory arrays (JAX parameters, traced or not) as inputs of
out-of-core operations.

A JAX user keeps parameters as JAX arrays and only data on disk. Such an array
enters an out-of-core operation as an input of its primitive, like a 0-d value: its
values reach the host code when the operation runs (under ``jax.jit`` too, so a
program compiles once per shape, whatever the values), wrapped in a
`ResidentFile` that reads like an array file. Every tile of a pass reads its
region of it; nothing is written to disk.

Its gradient is summed over the pass's tiles in memory, in an array of its shape
and dtype (`Driver.backward`), and returned to JAX as a JAX array. An operation
whose backward pass writes gradients to files (a `CustomOp`) has that file read
back into memory; it is the size of the operand.

Memory: the resident operands of one call, and their gradients in a backward pass,
are held beside the tiles, so they count against the memory budget: their total
may take at most half of it (`RESIDENT_SHARE`), and the tiles are planned in what
is left (`tile_budget`). A traced operand above that is refused, naming its size; a
concrete one (a NumPy array, known while tracing) is written to a scratch file
instead and read tile by tile like any DiskArray.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any, NoReturn

import jax
import jax.numpy as jnp
import numpy as np
from numpy.typing import DTypeLike

from ..kernels._promotion import canonical_dtype, is_differentiable
from ..storage._paged_file import Region
from ._budget import MemoryBudget, format_bytes

__all__ = [
    "RESIDENT_SHARE",
    "InMemoryResult",
    "ResidentFile",
    "check_fits",
    "is_resident",
    "resident_operand",
    "tile_budget",
    "to_memory",
]

#: The largest share of a memory budget the resident operands of one call may take.
RESIDENT_SHARE = 0.5


class ResidentFile:
    """An in-memory array read like an array file (``shape``, ``dtype``, ``read``).

    Reads return views of the array (read-only: a kernel cannot change a parameter);
    they cost no I/O, so the plan counts none (``on_disk = False``).
    """

    writable = False
    on_disk = False
    resident = True

    def __init__(self, array: np.ndarray | jax.Array) -> None:
        #: the JAX array it was made from, where it was one: a pass on its device
        #: takes it as it is (`on_device`), and the host reads it only if it must
        self.device_array = array if isinstance(array, jax.Array) else None
        self._array = None if isinstance(array, jax.Array) else _read_only(array)
        self.shape = tuple(array.shape)
        self.dtype = np.dtype(array.dtype)
        self.page_shape = self.shape

    @property
    def array(self) -> np.ndarray:
        """Its values on the host (a JAX array's brought from its device once)."""
        if self._array is None:
            self._array = _read_only(np.asarray(self.device_array))
        return self._array

    def on_device(self, device: Any) -> jax.Array | None:
        """The JAX array it was made from, where that is on ``device``, else None."""
        a = self.device_array
        return a if a is not None and a.devices() == {device} else None

    def buffer_key(self) -> tuple[int, tuple[int, ...], str]:
        """What names its values for as long as it lives: its buffer's address."""
        a = self.device_array
        try:
            where = a.unsafe_buffer_pointer() if a is not None else _address(self.array)
        except (RuntimeError, ValueError):  # (an array over several devices)
            where = id(a)
        return (where, self.shape, self.dtype.str)

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.dtype.itemsize

    def read(self, region: Region | None = None, out: np.ndarray | None = None) -> np.ndarray:
        block = self.array if region is None else self.array[tuple(region)]
        if out is None:
            return block
        out[...] = block
        return out

    def __repr__(self) -> str:
        return f"ResidentFile({self.dtype.name}{list(self.shape)})"


def _read_only(array: Any) -> np.ndarray:
    array = np.ascontiguousarray(array)
    if array.flags.writeable:
        array = array.view()
        array.flags.writeable = False
    return array


def _address(array: np.ndarray) -> int:
    return int(array.__array_interface__["data"][0])


class InMemoryResult:
    """The output of a pass held in memory (``op.in_memory_output``): written tile by
    tile like a scratch file, committed as the array itself."""

    def __init__(self, shape: Sequence[int], dtype: DTypeLike) -> None:
        self.array: np.ndarray | None = np.zeros(shape, dtype)
        self.shape, self.dtype = tuple(shape), np.dtype(dtype)

    def write(self, region: Region, data: np.ndarray) -> None:
        assert self.array is not None  # (never written after `discard`)
        self.array[tuple(region)] = data

    def commit(self) -> np.ndarray:
        assert self.array is not None  # (never committed after `discard`)
        return self.array

    def discard(self) -> None:
        self.array = None


def is_resident(value: Any) -> bool:
    """Whether ``value`` (an operation's host input) is a resident operand."""
    return getattr(value, "resident", False)


def _nbytes(shape: Sequence[int], dtype: DTypeLike) -> int:
    return math.prod(shape) * np.dtype(dtype).itemsize


def resident_operand(x: Any, dtype: DTypeLike, budget: MemoryBudget, what: str) -> jax.Array | None:
    """A non-0-d in-memory operand ``x`` as an operation input: a JAX array of
    ``dtype`` held in memory, or None for a concrete array JAX cannot hold in
    ``dtype`` (a float64 NumPy array while x64 is off) or one too large to hold: the
    caller writes it once to scratch.

    **Raises:** `ValueError` for a traced operand larger than its share of the
    budget (its values are not known while JAX traces, so it cannot go to disk).
    """
    traced = isinstance(x, jax.core.Tracer)
    shape = tuple(np.shape(x))
    held = canonical_dtype(dtype)  # a traced array's own; 32 bits for 64 while x64 is off
    nbytes = _nbytes(shape, held)
    limit = int(budget.nbytes * RESIDENT_SHARE)
    if not traced and (held != np.dtype(dtype) or nbytes > limit):
        return None
    if nbytes > limit:
        _refuse_size(what, [shape], nbytes, budget)
    if _held_as(x, held):  # (already so: no conversion for JAX to trace, each call)
        return x
    return jnp.asarray(x, dtype=held)


def _held_as(x: Any, dtype: np.dtype) -> bool:
    """Whether ``x`` is a JAX array or tracer of ``dtype``, not weakly typed."""
    aval = getattr(x, "aval", None)
    return (
        isinstance(x, (jax.Array, jax.core.Tracer))
        and aval is not None
        and getattr(aval, "dtype", None) == dtype
        and not getattr(aval, "weak_type", True)
    )


def check_fits(
    in_types: Iterable[Any],
    budget: MemoryBudget,
    what: str,
    *,
    backward: bool | Sequence[bool] = False,
) -> None:
    """Refuse resident operands of one call whose total (with their gradients, for a
    backward pass) exceeds their share of the budget. ``backward``: whether each
    input's gradient is computed (True: every floating one's; a constant operand,
    not differentiated, holds no gradient)."""
    types = list(in_types)
    wanted = [backward] * len(types) if isinstance(backward, bool) else list(backward)
    held = [(t, w) for t, w in zip(types, wanted) if _is_resident_type(t)]
    total = sum(_nbytes(t.shape, t.dtype) * (1 + _has_gradient(t, w)) for t, w in held)
    if total > budget.nbytes * RESIDENT_SHARE:
        extra = " with their gradients" if any(_has_gradient(t, w) for t, w in held) else ""
        _refuse_size(what, [t.shape for t, _ in held], total, budget, extra)


def _is_resident_type(t: Any) -> bool:
    return not getattr(t, "is_disk_array", False) and len(t.shape) > 0


def _has_gradient(t: Any, backward: bool) -> bool:
    return backward and is_differentiable(t.dtype)


def _refuse_size(
    what: str,
    shapes: Iterable[Sequence[int]],
    nbytes: int,
    budget: MemoryBudget,
    extra: str = "",
) -> NoReturn:
    listed = ", ".join(str(tuple(s)) for s in shapes)
    size, limit = format_bytes(nbytes), format_bytes(budget.nbytes)
    raise ValueError(
        f"{what}: in-memory operands of shape {listed} take {size}{extra}, more than "
        f"{int(RESIDENT_SHARE * 100)}% of the memory budget ({limit}), which "
        "they must share with the tiles. Raise the budget (ooc.MemoryBudget), or keep the "
        "array on disk: DiskArray.from_numpy outside the traced function, updated with "
        "update_ (see the out-of-core guide, 'Parameters too large for memory')."
    )


def tile_budget(
    budget: MemoryBudget, values: Sequence[Any], *, backward: bool = False, out: int = 0
) -> MemoryBudget:
    """The budget left for the tiles of a pass beside what it holds in memory: the
    resident operands among ``values`` and the chains they are (with the gradients
    of the floating ones in a backward pass), and ``out`` bytes of output held in
    memory (`InMemoryResult`)."""
    from ._chain_graph import resident_leaves

    found = {id(f): f for v in values for f in resident_leaves(v)}
    held = out + sum(f.nbytes * (1 + _has_gradient(f, backward)) for f in found.values())
    if not held:
        return budget
    return MemoryBudget(
        max(4096, budget.nbytes - held), device=budget.device, device_nbytes=budget.device_nbytes
    )


def to_memory(value: Any, shape: Sequence[int], dtype: DTypeLike) -> np.ndarray | jax.Array:
    """A host result that JAX holds in memory (the gradient of a resident operand):
    an array file (a `CustomOp`'s gradient, a chain) is read whole."""
    if value is None:
        return np.zeros(shape, dtype)
    same = isinstance(value, jax.Array) and np.dtype(value.dtype) == np.dtype(dtype)
    if same and value.shape == tuple(shape):
        return value  # (left on its device: JAX takes it there)
    if not isinstance(value, np.ndarray):
        value = value.read(tuple(slice(0, n) for n in shape))
    value = np.asarray(value, dtype)
    if value.shape != tuple(shape):
        raise TypeError(
            f"an out-of-core operation made a gradient of shape {value.shape} for an "
            f"in-memory operand of shape {tuple(shape)}; its backward must give one of the "
            "operand's shape."
        )
    return value
