"""Where a loss's pass computes its tiles: the host's CPU, or an accelerator.

A tile is read on the host either way. On the host, its program runs on JAX's CPU
device with 64-bit types, as gradpipe's own kernels compute (`_tile_program.run`).
On a device (`MemoryBudget(device=...)`: by default JAX's default device when it is
an accelerator), the tile is sent there, its program compiled for that device in
the types `jax.numpy` would use there, and only the loss's share, the parameters'
gradients and a stored array's gradient come back.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Iterator
from typing import Any

import jax
import numpy as np

from ..planning._stages import note_next

__all__ = [
    "DeviceRefusal",
    "device_for",
    "compute_device",
    "device_budget",
    "called_back",
    "explicit",
    "in_callback",
    "runs_64_bit",
    "wide",
]

#: Platforms whose programs cannot hold 64-bit types (JAX aborts the process there).
_NO_64_BIT = frozenset({"tpu"})


class DeviceRefusal(TypeError):
    """A program that the chosen device cannot run (64-bit types on a TPU)."""


def compute_device(budget: Any) -> jax.Device | None:
    """The device ``budget`` names for a loss's pass; None for the host."""
    choice = getattr(budget, "device", None)
    if choice is None:
        return _default_accelerator()
    if isinstance(choice, str):
        if choice == "host":
            return None
        return _named(choice)
    return choice


@functools.lru_cache(maxsize=1)
def _default_accelerator() -> jax.Device | None:
    device = jax.devices()[0]
    return None if device.platform == "cpu" else device


@functools.lru_cache(maxsize=8)
def _named(platform: str) -> jax.Device:
    try:
        return jax.devices(platform)[0]
    except RuntimeError:
        have = sorted({d.platform for d in jax.devices()} | {"cpu"})
        raise ValueError(
            f"MemoryBudget(device={platform!r}): JAX has no {platform!r} device here (it "
            f"has {', '.join(have)}). Pass device=None for JAX's default device, 'host' "
            "for the host, or one of those platforms."
        ) from None


_callback = threading.local()


@contextlib.contextmanager
def called_back() -> Iterator[None]:
    """Mark this thread as running a host callback of a compiled program (under
    `jax.jit`): the device that runs that program waits for it to return."""
    before = getattr(_callback, "on", False)
    _callback.on = True
    try:
        yield
    finally:
        _callback.on = before


def in_callback() -> bool:
    """Whether this thread runs a compiled program's host callback (`called_back`)."""
    return bool(getattr(_callback, "on", False))


def explicit(budget: Any) -> bool:
    """Whether ``budget`` names its device (then a program it cannot run is refused;
    otherwise such a program runs on the host)."""
    return getattr(budget, "device", None) not in (None, "host")


def runs_64_bit(device: jax.Device) -> bool:
    """Whether ``device`` runs programs with 64-bit types."""
    return device.platform not in _NO_64_BIT


def wide(dtypes: Any) -> list[str]:
    """The 64-bit types among ``dtypes`` (complex128 counted), by name."""
    return sorted(
        {t.name for t in map(np.dtype, dtypes) if t.itemsize == 8 * (1 + (t.kind == "c"))}
    )


def device_budget(budget: Any, device: jax.Device) -> int:
    """Bytes of tiles that may be in flight on ``device``: the budget's
    ``device_nbytes``, else half of what the device has free, else (a device that
    does not say, as the CPU) the host budget's."""
    given = getattr(budget, "device_nbytes", None)
    if given is not None:
        return int(given)
    try:
        stats = device.memory_stats()
    except Exception:  # (not every backend keeps them)
        stats = None
    if stats and "bytes_limit" in stats:
        return max(2**20, (int(stats["bytes_limit"]) - int(stats.get("bytes_in_use", 0))) // 2)
    return int(budget.nbytes)


def device_for(budget: Any, dtypes: Any) -> jax.Device | None:
    """The device a loss's pass over ``dtypes`` computes on (None: the host). A device
    that cannot run 64-bit types is refused where the budget names it, and left for
    the host where it was only JAX's default; under `jax.jit` an accelerator runs
    the program whose callback runs the pass, and no other: the host computes it."""
    device = compute_device(budget)
    if device is not None and device.platform != "cpu" and in_callback():
        note_next(
            f"computed on the host, not {device}: under jax.jit the pass runs in a host "
            "callback of a program the device is running, and the device runs no other "
            "program meanwhile (call the step without jax.jit to compute it there)"
        )
        return None
    if device is None or runs_64_bit(device):
        return device
    names = wide(dtypes)
    if not names:
        return device
    if explicit(budget):
        raise DeviceRefusal(
            f"gradpipe.ooc: this loss's program holds {', '.join(names)}, which "
            f"{device.platform.upper()} cannot run. Cast the data and parameters to 32-bit "
            "types (x.astype(jnp.float32)), or compute it on the host: "
            "MemoryBudget(..., device='host')."
        )
    return None
