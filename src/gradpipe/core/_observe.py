"""Observation operators: `Tap`, `Sink`, `Snapshot`, `Profile` and `ShapeTrace`.

Each passes its input through unchanged and records something on the side. Under
``jax.jit`` an operator's Python runs once, at trace time, on tracers, so a side
effect there would happen once per compilation rather than once per call, and a
stored tracer would raise when touched later. `Tap`, `Sink`, `Snapshot` and
`Profile` therefore refuse traced inputs. `ShapeTrace` records only shapes and
dtypes, which a tracer knows, and is meant to run at trace time.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from ._config import ConfigError
from ._describe import describe
from ._leaves import iter_leaves
from ._operator import Operator
from ._tracing import refuse_tracer

__all__ = ["Profile", "ShapeTrace", "Sink", "Snapshot", "Tap"]


def _single(name: str, args: tuple, kwargs: dict) -> Any:
    if kwargs or len(args) != 1:
        raise TypeError(f"{name} passes through exactly one positional argument.")
    return args[0]


class Tap(Operator):
    """Calls ``fn(x)`` for its side effect and returns ``x``.

    Under ``jax.jit``/``vmap``/``grad`` it raises `TypeError`: use
    ``gradpipe.jax.DebugTap``, which runs on every call of the compiled function.
    """

    def __init__(self, fn: Callable[[Any], Any]) -> None:
        if not callable(fn):
            raise TypeError(f"Tap needs a callable, got {type(fn).__name__}.")
        self.fn = fn

    def _apply(self, *args: Any, **kwargs: Any) -> Any:
        x = _single("Tap", args, kwargs)
        refuse_tracer(
            "Tap",
            "cannot observe a traced value: under jax.jit its function would run once at "
            "trace time on a tracer, not on every call",
            "Use gradpipe.jax.DebugTap, which runs on every call with concrete values.",
            x,
        )
        self.fn(x)
        return x


class Sink(Operator):
    """Collects every value that passes through in ``items`` (thread-safe).

    Under ``jax.jit``/``vmap``/``grad`` it raises `TypeError`: collect the outputs of
    the jitted function outside it, or use ``gradpipe.jax.DebugTap``.
    """

    def __init__(self) -> None:
        self.items: list[Any] = []
        self._lock = threading.Lock()

    def _apply(self, *args: Any, **kwargs: Any) -> Any:
        x = _single("Sink", args, kwargs)
        refuse_tracer(
            "Sink",
            "cannot store a traced value: it would keep a tracer that raises when used "
            "after tracing ends",
            "Return the value from the jitted function and collect it outside, or use "
            "gradpipe.jax.DebugTap(items.append).",
            x,
        )
        with self._lock:
            self.items.append(x)
        return x

    def clear(self) -> None:
        """Forget the collected items."""
        with self._lock:
            self.items.clear()


class Snapshot:
    """Named capture points: ``snap.at("z")`` is an operator storing its input as
    ``snap.captures["z"]`` (the latest value) and returning it.

    ```python
    snap = Snapshot()
    pipeline = invert | snap.at("z") | combine
    pipeline(y)
    snap["z"]        # the inverted bands
    ```

    Under ``jax.jit``/``vmap``/``grad`` a capture point raises `TypeError`: return
    the intermediate from the jitted function instead, or use ``DebugTap``.
    """

    def __init__(self) -> None:
        self.captures: dict[str, Any] = {}
        self._lock = threading.Lock()

    def at(self, name: str) -> SnapshotPoint:
        """An operator that records its input under ``name``."""
        if not isinstance(name, str) or not name:
            raise ValueError(f"A snapshot name is a non-empty str, got {name!r}.")
        return SnapshotPoint(self, name)

    def __getitem__(self, name: str) -> Any:
        try:
            return self.captures[name]
        except KeyError:
            raise KeyError(
                f"Snapshot has no capture {name!r}; it has {sorted(self.captures)}. Run the "
                f"pipeline first."
            ) from None

    def clear(self) -> None:
        """Forget every capture."""
        with self._lock:
            self.captures.clear()

    def _record(self, name: str, value: Any) -> None:
        with self._lock:
            self.captures[name] = value


class SnapshotPoint(Operator):
    """The operator returned by `Snapshot.at`. Not saveable: it refers to a live
    `Snapshot`."""

    def __init__(self, snapshot: Snapshot, name: str) -> None:
        self.snapshot = snapshot
        self.capture_name = name

    @property
    def name(self) -> str:
        return f"Snapshot.at({self.capture_name!r})"

    def get_config(self) -> dict[str, Any]:
        raise ConfigError(
            f"{self.name} cannot be saved: it writes into a live Snapshot object. Remove "
            f"capture points before saving a pipeline."
        )

    def _apply(self, *args: Any, **kwargs: Any) -> Any:
        x = _single("Snapshot", args, kwargs)
        refuse_tracer(
            "Snapshot",
            "cannot store a traced value: the stored tracer would raise when read after "
            "tracing ends",
            "Return the intermediate value from the jitted function instead, or use "
            "gradpipe.jax.DebugTap.",
            x,
        )
        self.snapshot._record(self.capture_name, x)
        return x

    def __repr__(self) -> str:
        return self.name


class Profile:
    """Wall-clock timing of operators: ``prof.wrap(op)`` times every call of ``op``.

    ```python
    prof = Profile()
    pipeline = prof.wrap(invert) | prof.wrap(combine)
    pipeline(y)
    print(prof.report())
    ```

    JAX dispatches asynchronously; a timed step that returns JAX arrays is waited
    for (``block_until_ready``) so the time covers the computation. Under
    ``jax.jit``/``vmap``/``grad`` a profiled step raises `TypeError`: it would time
    the tracing. Time the compiled function from outside, or use ``jax.profiler``.
    """

    def __init__(self) -> None:
        self.stats: dict[str, dict[str, float]] = {}
        self._lock = threading.Lock()

    def wrap(self, op: Operator, name: str | None = None) -> Profiled:
        """An operator that runs ``op`` and records its time under ``name``."""
        if not isinstance(op, Operator):
            raise TypeError(f"Profile.wrap takes an Operator, got {type(op).__name__}.")
        return Profiled(op, self, name or op.name)

    def _record(self, name: str, seconds: float) -> None:
        with self._lock:
            entry = self.stats.setdefault(name, {"calls": 0, "total": 0.0, "max": 0.0})
            entry["calls"] += 1
            entry["total"] += seconds
            entry["max"] = max(entry["max"], seconds)

    def report(self) -> str:
        """A table of calls, total, mean and max time per step."""
        rows = [("step", "calls", "total ms", "mean ms", "max ms")]
        for name, s in self.stats.items():
            mean = s["total"] / s["calls"]
            rows.append(
                (
                    name,
                    str(int(s["calls"])),
                    f"{1e3 * s['total']:.3f}",
                    f"{1e3 * mean:.3f}",
                    f"{1e3 * s['max']:.3f}",
                )
            )
        widths = [max(len(r[c]) for r in rows) for c in range(5)]
        return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)

    def clear(self) -> None:
        """Forget every timing."""
        with self._lock:
            self.stats.clear()


def _block_until_ready(value: Any) -> None:
    """Wait for every JAX array in ``value``, also inside registered PyTrees."""
    jax = sys.modules.get("jax")
    if jax is not None and hasattr(jax, "block_until_ready"):
        jax.block_until_ready(value)
        return
    for leaf in iter_leaves(value):
        waiter = getattr(leaf, "block_until_ready", None)
        if callable(waiter):
            waiter()


class Profiled(Operator):
    """The operator returned by `Profile.wrap`. Not saveable: it refers to a live
    `Profile`."""

    def __init__(self, op: Operator, profile: Profile, label: str) -> None:
        self.op = op
        self.profile = profile
        self.label = label

    @property
    def name(self) -> str:
        return f"Profile.wrap({self.op.name})"

    def get_config(self) -> dict[str, Any]:
        raise ConfigError(
            f"{self.name} cannot be saved: it reports to a live Profile object. Save the "
            f"unwrapped operator."
        )

    def _apply(self, *args: Any, **kwargs: Any) -> Any:
        refuse_tracer(
            "Profile",
            "cannot time a traced call: under jax.jit it would time the tracing once, not "
            "the computation",
            "Time the jitted function from outside, or use jax.profiler.",
            *args,
            **kwargs,
        )
        start = time.perf_counter()
        out = self.op(*args, **kwargs)
        _block_until_ready(out)
        self.profile._record(self.label, time.perf_counter() - start)
        return out

    def __repr__(self) -> str:
        return self.name


class ShapeTrace(Operator):
    """Records the shape and dtype of every value passing through, in ``records``.

    It is allowed under ``jax.jit``: a tracer knows its shape and dtype. There it
    runs once per trace (per compilation), not once per call, which is what makes it
    useful for checking the shapes a compiled pipeline was built for.
    """

    def __init__(self, label: str = "") -> None:
        self.label = label
        self.records: list[str] = []

    def _apply(self, *args: Any, **kwargs: Any) -> Any:
        x = _single("ShapeTrace", args, kwargs)
        self.records.append(describe(x))
        return x
