"""`explain`: run a function on DiskArrays and show the passes over the data it made."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax

from .arrays._array import DiskArray
from .planning import _stages
from .planning._budget import format_bytes
from .planning._chain import is_chain
from .planning._chain_graph import describe
from .storage._iostats import IOStats

__all__ = ["Plan", "explain"]


@dataclasses.dataclass(frozen=True)
class Plan:
    """The passes over the data one call made, in order (`explain` returns it).

    **Attributes:**

    - `stages`: one `Stage` per tiled pass: its operation and phase (``forward``,
      ``backward``, or ``forward`` of ``store`` for a chain written to disk), the
      inputs it read, with fused chains as formulas over stored arrays ``x0``,
      ``x1``, ... and in-memory operands (JAX parameters) ``m0``, ``m1``, ...
      (`Stage.in_memory`; the gradients it sums in memory,
      `Stage.summed_in_memory`); its tile and number of tiles; the projected peak memory of one
      step and the projected bytes to read and write (from the tile plan, before it
      ran); and `io`, the `IOStats` it measured.
    - `fused`: how many operations were fused into chains (computed on read,
      never written on their own).
    - `result`: what the function returned.
    """

    stages: tuple
    fused: int
    result: object

    @property
    def io(self) -> IOStats:
        """The I/O of every stage together."""
        total = IOStats()
        for s in self.stages:
            total = IOStats(
                *(a + b for a, b in zip(dataclasses.astuple(total), dataclasses.astuple(s.io)))
            )
        return total

    def __str__(self) -> str:
        head = (
            f"{'#':>2}  {'stage':<20} {'tile':<18} {'tiles':>5}  {'peak':>10}  "
            f"{'read (plan)':>22}  {'written (plan)':>22}  {'time':>7}"
        )
        lines = [head]
        for k, s in enumerate(self.stages, 1):
            name = f"{s.name} {s.phase}" if s.phase != "forward" else s.name
            read = f"{format_bytes(s.io.bytes_read)} ({format_bytes(s.projected_read_bytes)})"
            wrote = f"{format_bytes(s.io.bytes_written)} ({format_bytes(s.projected_write_bytes)})"
            lines.append(
                f"{k:>2}  {name:<20} {list(s.tile)!s:<18} {s.tiles:>5}  "
                f"{format_bytes(s.projected_peak_bytes):>10}  {read:>22}  {wrote:>22}  "
                f"{s.seconds:>6.2f}s"
            )
            for r in s.reads:
                lines.append(f"    reads {r}")
            for m in s.in_memory:
                lines.append(f"    in memory {m}")
            for m in s.summed_in_memory:
                lines.append(f"    sums {m} in memory over its tiles")
            for m in s.held_in_memory:
                lines.append(f"    holds {m} in memory (a small result)")
            if s.runs_on != "host":
                lines.append(
                    f"    computes on {s.runs_on}: sent {format_bytes(s.to_device)} there, "
                    f"{format_bytes(s.from_device)} back"
                )
            for m in s.notes:
                lines.append(f"    note: {m}")
        io = self.io
        lines.append(
            f"{len(self.stages)} passes, {self.fused} operations fused; read "
            f"{format_bytes(io.bytes_read)}, wrote {format_bytes(io.bytes_written)}"
        )
        return "\n".join(lines)


def explain(fn: Callable[..., Any], *args: Any, store_results: bool = True, **kwargs: Any) -> Plan:
    """Run ``fn(*args, **kwargs)`` and return the `Plan` of the passes it made.

    Elementwise and layout steps are fused: they are not passes of their own but
    are computed inside the pass that reads them (a reduction, a product, a save),
    shown there as a formula. ``print(explain(...))`` gives a table: per pass the
    tile, the projected peak memory of one step, and the bytes read and written,
    measured beside (in brackets) those projected from the plan.

    ```python
    x = ooc.DiskArray.from_numpy(np.random.rand(4096, 4096).astype(np.float32))
    print(ooc.explain(jax.value_and_grad(lambda x: ooc.mean(ooc.exp(x) * x)), x))
    ```

    **Arguments:**

    - `fn`: any function of DiskArrays (jitted or not, differentiated or not).
    - `*args`, `**kwargs`: its arguments.
    - `store_results`: write results that are still fused chains (a gradient, say),
      as reading them would, so that their pass shows in the plan (default True).

    **Returns:**

    A `Plan`; its `result` is what ``fn`` returned.
    """
    from .ops import persist

    with _stages.recording() as rec:
        result = jax.block_until_ready(fn(*args, **kwargs))
        if store_results:
            leaves = jax.tree_util.tree_leaves(result)
            for leaf in leaves:
                f = getattr(leaf, "_file", None)
                if f is not None and is_chain(f):
                    persist(leaf)
    return Plan(tuple(rec.stages), rec.fused, result)


def formula(x: DiskArray) -> str:
    """The chain behind a DiskArray as a formula (its stored file as ``x0``)."""
    return describe(x._concrete_file("formula"))
