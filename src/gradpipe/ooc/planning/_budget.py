"""`MemoryBudget`: how many bytes of tiles an out-of-core operation may hold at once.

The budget is resolved when an operation is called (or traced, under `jax.jit`):
the per-call ``budget=`` argument wins, then the innermost ``with MemoryBudget(...)``
block, then the process default (`set_default_budget`, initially 1 GiB). Tile
shapes are derived from it per operation, number of inputs and phase by `plan_tiles`.

Peak resident memory of a process running out-of-core operations stays within the
budget plus `RSS_OVERHEAD_BYTES` on top of what the process held before (the
interpreter, NumPy, JAX and their buffers are that "before"); the test suite
checks this in a subprocess on arrays several times the budget.
"""

from __future__ import annotations

import contextvars
import dataclasses
import math
from collections.abc import Callable, Collection, Sequence

from gradpipe.core import parse_size

__all__ = ["RSS_OVERHEAD_BYTES", "MemoryBudget", "get_budget", "set_default_budget"]

#: Resident memory beyond the budget that an operation may use: BLAS workspace,
#: thread stacks, page-run buffers of reads that straddle pages, allocator slack.
RSS_OVERHEAD_BYTES = 64 * 2**20


def format_bytes(n: int) -> str:
    """``n`` bytes for people: ``"512.0 MiB"``, ``"8.0 KiB"``, ``"17 B"``."""
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


def _parse_bytes(value: int | str) -> int:
    return parse_size(value, name="MemoryBudget(nbytes)")


@dataclasses.dataclass(frozen=True)
class MemoryBudget:
    """The most bytes of tiles one out-of-core operation holds in memory at a time.

    **Arguments:**

    - `nbytes`: an int, or a string such as ``"512MiB"`` (2^20 bytes each) or
      ``"2GB"`` (10^9 bytes each); see `gradpipe.parse_size`.
    - `device`: where a loss's pass computes its tiles (the pass of a training
      step: `ooc.explain` says which): ``None`` (the default) JAX's default device
      when it is an accelerator, else the host; ``"host"`` always the host; a
      platform name (``"tpu"``, ``"gpu"``, ``"cpu"``) or a `jax.Device` that device,
      as `jax.numpy` computes there. Tiles are read on the host and sent to it.
    - `device_nbytes`: the most bytes of tiles in flight on that device (default:
      half the memory the device has free when the pass starts).

    Use it as a context manager to set the budget of every operation called inside,
    or pass it as ``budget=`` to one operation:

    ```python
    with MemoryBudget("256MiB"):
        y = ooc.matmul(a, b)
    y = ooc.matmul(a, b, budget=MemoryBudget("1GiB"))
    ```
    """

    nbytes: int
    device: object = None
    device_nbytes: int | None = None

    def __init__(
        self,
        nbytes: int | str,
        *,
        device: object = None,
        device_nbytes: int | str | None = None,
    ) -> None:
        n = _parse_bytes(nbytes)
        if n < 4096:
            raise ValueError(f"MemoryBudget(nbytes={nbytes!r}) is below the 4096-byte minimum.")
        if not (device is None or isinstance(device, str) or hasattr(device, "platform")):
            raise TypeError(
                f"MemoryBudget(device={device!r}): pass None (JAX's default device when it "
                "is an accelerator), 'host', a platform name such as 'tpu', or a jax.Device."
            )
        object.__setattr__(self, "nbytes", n)
        object.__setattr__(self, "device", device)
        object.__setattr__(
            self,
            "device_nbytes",
            None
            if device_nbytes is None
            else parse_size(device_nbytes, name="MemoryBudget(device_nbytes)"),
        )

    def __enter__(self) -> MemoryBudget:
        tokens = self.__dict__.setdefault("_tokens", [])
        tokens.append(_current.set(self))
        return self

    def __exit__(self, *exc: object) -> None:
        _current.reset(self.__dict__["_tokens"].pop())

    def __repr__(self) -> str:
        extra = "" if self.device is None else f", device={self.device!r}"
        if self.device_nbytes is not None:
            extra += f", device_nbytes={format_bytes(self.device_nbytes)}"
        return f"MemoryBudget({format_bytes(self.nbytes)}{extra})"

    def __hash__(self) -> int:
        return hash((self.nbytes, str(self.device), self.device_nbytes))

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, MemoryBudget)
            and other.nbytes == self.nbytes
            and other.device == self.device
            and other.device_nbytes == self.device_nbytes
        )


_default = [MemoryBudget(2**30)]
_current: contextvars.ContextVar[MemoryBudget | None] = contextvars.ContextVar(
    "gradpipe_ooc_budget", default=None
)


def set_default_budget(budget: MemoryBudget | int | str) -> None:
    """Set the process-wide default budget (used outside any ``with MemoryBudget``)."""
    _default[0] = budget if isinstance(budget, MemoryBudget) else MemoryBudget(budget)


def get_budget(budget: MemoryBudget | int | str | None = None) -> MemoryBudget:
    """The budget in force: ``budget`` if given, else the context's, else the default."""
    if budget is not None:
        return budget if isinstance(budget, MemoryBudget) else MemoryBudget(budget)
    return _current.get() or _default[0]


# ---------------------------------------------------------------- tile planning


def default_page_shape(
    shape: tuple[int, ...], itemsize: int, budget: MemoryBudget
) -> tuple[int, ...]:
    """Page shape for a new array: about budget/16 bytes (at most 16 MiB), square-ish,
    each side a power of two or the whole axis, so the tiles `plan_tiles` picks
    (also powers of two) line up with pages."""
    target = max(4096, min(budget.nbytes // 16, 16 * 2**20)) // itemsize
    return _shrink_to(shape, target)


def _shrink_to(shape: tuple[int, ...], max_elements: int) -> tuple[int, ...]:
    sides = list(shape)
    while math.prod(sides) > max(max_elements, 1):
        ax = max(range(len(sides)), key=lambda a: sides[a])
        sides[ax] = _halve(sides[ax])
    return tuple(max(s, 1) for s in sides)


def _halve(n: int) -> int:
    """The largest power of two strictly below ``n`` (and at least 1)."""
    return max(1, 1 << ((n - 1).bit_length() - 1)) if n > 1 else 1


def _cut(n: int, grain: int) -> int:
    """The next smaller tile side below ``n`` on an axis whose tiles should be whole
    multiples of ``grain`` (an input's chunk side): a power of two chunks while the
    side is above one chunk, then half a chunk, a quarter, ... (each tile within
    one chunk). ``grain`` 1 is `_halve`."""
    if grain <= 1:
        return _halve(n)
    if n > grain:
        return grain * _halve(-(-n // grain))
    return max(1, -(-n // 2))


#: Tiles are not cut thinner than this along any axis unless nothing else fits.
MIN_SIDE = 256


def plan_tiles(
    loop_shape: tuple[int, ...],
    bytes_for: Callable[[tuple[int, ...]], int],
    budget: MemoryBudget,
    *,
    what: str,
    cost_for: Callable[[tuple[int, ...]], float] | None = None,
    thin_ok: Collection[int] = (),
    grain: Sequence[int] | None = None,
) -> tuple[int, ...]:
    """The tile (one size per loop axis) whose working set fits ``budget``.

    ``bytes_for(tile)`` is the bytes one step of the operation holds with that tile
    (inputs double buffered, accumulators, kernel temporaries). Starting from the
    whole loop, one axis is halved at a time until the working set fits: the axis
    whose halving gives the lowest ``cost_for`` (the I/O of the whole loop, say),
    ties going to the biggest saving of bytes. Sides are kept at least `MIN_SIDE`
    while another axis can be cut, except the axes in ``thin_ok`` (a stack's batch
    axes, whose size the kernel does not care about). Raises `MemoryError` naming the
    operation when even a tile of one element per axis does not fit.

    ``grain`` (one int per loop axis, default all 1) makes the sides on an axis
    whole multiples of that many elements while they are larger than it (`_cut`),
    and no side is cut below its grain while another is still above its own: an
    input stored in chunks that decode whole (a compressed zarr array) is then read
    in whole chunks, each decoded once per pass, whenever one chunk fits.
    """
    tile = list(loop_shape)
    cost = cost_for or (lambda t: 0.0)
    grain = tuple(grain) if grain is not None else (1,) * len(tile)
    if len(grain) != len(tile):
        raise ValueError(f"plan_tiles: grain {grain} needs one entry per loop axis {loop_shape}.")
    while bytes_for(tuple(tile)) > budget.nbytes:
        best, best_key = None, None
        for ax, t in enumerate(tile):
            if t <= 1:
                continue
            cut = _cut(t, grain[ax])
            trial = (*tile[:ax], cut, *tile[ax + 1 :])
            # a side below its grain decodes chunks more than once: only when no side
            # above its grain is left; sides below MIN_SIDE make kernels inefficient:
            # only when nothing else is left
            split = cut < grain[ax]
            thin = ax not in thin_ok and cut < min(MIN_SIDE, loop_shape[ax])
            key = (split, thin, cost(trial), bytes_for(trial), -t)
            if best_key is None or key < best_key:
                best, best_key = ax, key
        if best is None:
            raise MemoryError(
                f"{what}: a single-element tile needs {bytes_for(tuple(tile))} bytes, more "
                f"than the {budget}. Raise the budget."
            )
        tile[best] = _cut(tile[best], grain[best])
    return tuple(tile)
