"""Writing DiskArrays into xarray's targets tile by tile: ``to_zarr`` and ``to_netcdf``.

xarray writes a chunked variable by handing its chunk manager the array and a
target that takes NumPy-style assignment (a zarr array, a NetCDF variable), and
an optional region of the target (``to_zarr(region=...)``, appends). `store` reads
the source in tiles of whole target chunks (whole shards for a sharded zarr array)
that fit the `MemoryBudget`, and assigns each to the target: no variable is ever
whole in memory, and each chunk of the target is encoded once. A fused result (a
chain of operations computed on read) is computed tile by tile as it is written,
with no intermediate file.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

import numpy as np

from .._interop import _read_bytes, _regions, _tile_for
from ..arrays._array import DiskArray
from ..planning._budget import MemoryBudget, get_budget
from ..planning._chain import is_chain

__all__ = ["store"]


def _unit(target: Any, shape: tuple[int, ...]) -> tuple[int, ...] | None:
    """The target's chunk (or shard) shape when it says, for whole-chunk tiles."""
    candidates = [getattr(target, "shards", None), getattr(target, "chunks", None)]
    with contextlib.suppress(Exception):  # a NetCDF variable wrapper: its variable knows
        candidates.append(target.get_array().chunks)
    for c in candidates:
        if (
            isinstance(c, tuple)
            and len(c) == len(shape)
            and all(isinstance(n, (int, np.integer)) and n > 0 for n in c)
        ):
            return tuple(int(n) for n in c)
    return None


def _shifted(region: tuple[slice, ...], offset: tuple[slice, ...] | None) -> tuple[slice, ...]:
    if offset is None:
        return region
    return tuple(
        slice((o.start or 0) + r.start, (o.start or 0) + r.stop) for r, o in zip(region, offset)
    )


def stream(
    x: DiskArray,
    target: Any,
    region: Sequence[slice] | None = None,
    *,
    lock: Any = None,
    budget: MemoryBudget | int | str | None = None,
) -> None:
    """Write ``x`` into ``target[region]`` (the whole target when None), tile by tile."""
    f = x._concrete_file("writing with xarray (to_zarr/to_netcdf)")
    b = get_budget(budget)
    if is_chain(f):
        f.fit_budget(b.nbytes)
    guard = lock if lock not in (None, False, True) else contextlib.nullcontext()
    if region is not None and not isinstance(region, tuple):
        region = tuple(region)
    if 0 in x.shape:
        return
    if not x.shape:
        with guard:
            target[region if region else ()] = np.asarray(f.read(None))
        return
    unit = _unit(target, x.shape) or tuple(f.page_shape)
    per_element = _read_bytes(f) + 2 * x.dtype.itemsize  # the tile, and the target's encoding
    try:
        tile = _tile_for(x.shape, unit, per_element, b, "writing with xarray")
    except MemoryError:  # a whole chunk does not fit: parts of chunks (each merged on write)
        tile = _tile_for(x.shape, (1,) * x.ndim, per_element, b, "writing with xarray")
    for r in _regions(x.shape, tile):
        block = f.read(r)
        with guard:
            target[_shifted(r, region)] = block


def store(
    sources: DiskArray | Sequence[DiskArray],
    targets: Any,
    *,
    regions: Any = None,
    lock: Any = None,
    compute: bool = True,
    budget: MemoryBudget | int | str | None = None,
    **_: Any,
) -> None:
    """xarray's ``store`` (see the module): each source DiskArray streamed into its
    target. Writing happens now: ``compute=False`` (a delayed write) is refused."""
    if not compute:
        raise NotImplementedError(
            "gradpipe's chunk manager writes when asked: to_zarr/to_netcdf(compute=False) "
            "has no delayed form. Call it without compute=False."
        )
    if isinstance(sources, DiskArray):
        sources, targets, regions = [sources], [targets], [regions]
    if (
        regions is None
        or not isinstance(regions, (list, tuple))
        or (regions and isinstance(regions[0], slice))
    ):
        regions = [regions] * len(sources)
    for x, target, region in zip(sources, targets, regions, strict=True):
        stream(x, target, region, lock=lock, budget=budget)
