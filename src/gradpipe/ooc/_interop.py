"""DiskArrays to and from zarr arrays and `np.memmap` files, in bounded memory.

`to_zarr` streams a result into a new zarr array as it is computed; `from_zarr`
copies a zarr array into gradpipe's own format (`open_zarr`, in `_open_in_place`,
computes on it where it lies instead).
"""

from __future__ import annotations

import contextlib
import itertools
import math
import os
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from .arrays._array import DiskArray
from .arrays._array_files import _copy_into, _new_file, _written
from .execution._driver import Driver
from .planning._budget import MemoryBudget, format_bytes, get_budget
from .planning._chain import is_chain
from .planning._chain_readers import identity, settle_name
from .storage._debris import partial_name, sweep_partials
from .storage._file_ops import fsync_dir
from .storage._paged_file import Region
from .storage._zarr_file import ZarrFile, resolve_store, zarr_file, zarr_module

if TYPE_CHECKING:
    import zarr
    from zarr.storage import StoreLike

__all__ = ["from_zarr", "to_memmap", "to_zarr"]


def _rows_per_copy(shape: tuple[int, ...], itemsize: int, budget: MemoryBudget) -> int:
    row = int(np.prod(shape[1:], dtype=np.int64)) * itemsize or itemsize
    return max(1, budget.nbytes // 4 // row)


def to_memmap(
    x: DiskArray,
    path: str | os.PathLike[str],
    *,
    budget: MemoryBudget | int | str | None = None,
) -> np.memmap:
    """Write ``x`` to a raw ``np.memmap`` file at ``path`` (C order), row block by block.

    The file is written under a temporary name and renamed into place when complete
    (a raw file has no header to tell a half-written one from a whole one).
    """
    f = x._concrete_file("to_memmap")
    path = os.fspath(path)
    sweep_partials(path)
    tmp = partial_name(path)
    try:
        mm = np.memmap(tmp, dtype=x.dtype, mode="w+", shape=x.shape)
        step = _rows_per_copy(x.shape, x.dtype.itemsize, get_budget(budget))
        for start in range(0, x.shape[0] if x.shape else 1, step):
            if not x.shape:
                mm[()] = f.read(None)
                break
            stop = min(start + step, x.shape[0])
            mm[start:stop] = f.read((slice(start, stop), *(slice(0, n) for n in x.shape[1:])))
        mm.flush()
        del mm
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
        fsync_dir(path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    return np.memmap(path, dtype=x.dtype, mode="r+", shape=x.shape)


def _tile_for(
    shape: tuple[int, ...],
    unit: Sequence[int],
    bytes_per_element: float,
    budget: MemoryBudget,
    what: str,
) -> tuple[int, ...]:
    """The largest tile of whole ``unit`` blocks (grown along the last axes first) whose
    bytes fit the budget; a `MemoryError` when one unit does not."""
    tile = [min(u, max(n, 1)) for u, n in zip(unit, shape)]
    fits = lambda t: math.prod(t) * bytes_per_element <= budget.nbytes
    if not fits(tile):
        need = math.prod(tile) * bytes_per_element
        raise MemoryError(
            f"{what}: one chunk of shape {tuple(unit)} needs {format_bytes(int(need))} while "
            f"it is written, more than the {budget}. Choose smaller chunks= or raise the "
            "budget."
        )
    for ax in reversed(range(len(shape))):
        room = budget.nbytes // (math.prod(tile) * bytes_per_element / tile[ax])
        blocks = min(-(-shape[ax] // unit[ax]), max(1, int(room // unit[ax])))
        tile[ax] = min(shape[ax], blocks * unit[ax])
        if tile[ax] < shape[ax]:
            break
    return tuple(tile)


def to_zarr(
    x: DiskArray,
    store: StoreLike,
    *,
    path: str | None = None,
    chunks: tuple[int, ...] | None = None,
    mode: str = "w",
    storage_options: dict[str, Any] | None = None,
    budget: MemoryBudget | int | str | None = None,
    **create_options: Any,
) -> zarr.Array:
    """Write ``x`` to a new zarr array as it is computed, tile by tile.

    ``x`` may be a fused result (a chain computed on read): its tiles are computed
    from its stored inputs and written straight into the zarr array, with no
    intermediate file. Tiles are whole chunks (whole shards when ``shards=`` is
    given), so each chunk is encoded and written once; see
    `gradpipe.ooc.open_zarr` for what holds after an interruption (each chunk
    entirely old or new, the array possibly in part).

    ```python
    g = jax.grad(loss)(w)                  # a DiskArray
    ooc.to_zarr(g, "grad.zarr", chunks=(256, 64))
    ```

    **Arguments:**

    - `store`: a local path, an fsspec URL (``file://``, ``memory://``, ``s3://``,
      ...) or a zarr store.
    - `path`: the array's path inside the store.
    - `chunks`: the zarr chunk shape; by default the DiskArray's page shape.
    - `mode`: ``"w"`` replaces what is there, ``"w-"`` refuses if something is.
    - `storage_options`: options for the fsspec file system of a URL.
    - `budget`: bounds the tile held while writing.
    - `create_options`: passed to `zarr.create_array` (``compressors=``,
      ``zarr_format=``, ``shards=``, ``fill_value=``, ...).

    **Returns:** the `zarr.Array` written (``ooc.open_zarr(z)`` reads it in place).
    """
    zarr = zarr_module()
    src = x._concrete_file("to_zarr")
    if mode not in ("w", "w-"):
        raise ValueError(f"to_zarr: mode must be 'w' (replace) or 'w-' (new only), got {mode!r}.")
    opened, root = resolve_store(store, mode="w", storage_options=storage_options)
    b = get_budget(budget)
    src = _apart_from(x, src, ZarrFile.name_of(root, path), b)
    if chunks is None:
        chunks = tuple(src.page_shape) if x.shape else ()
    z = zarr.create_array(
        opened,
        name=path,
        shape=x.shape,
        dtype=x.dtype,
        chunks=chunks,
        overwrite=mode == "w",
        **create_options,
    )
    out = ZarrFile(z, "to_zarr")
    if is_chain(src):
        src.fit_budget(b.nbytes)
    if 0 in x.shape:
        return z
    if not x.shape:
        out.write((), np.asarray(src.read(None)))
        return z
    per_element = _read_bytes(src) + 2 * out.dtype.itemsize  # the tile, and zarr's encoding
    tile = _tile_for(x.shape, out.write_shape, per_element, b, "to_zarr")
    for region in _regions(x.shape, tile):
        out.write(region, src.read(region))
    return z


def _apart_from(x: DiskArray, src: Any, name: str, budget: MemoryBudget) -> Any:
    """``x``'s file, not reading the array about to be written at ``name``: what reads
    an array of that name lazily (``x`` itself among them) is computed first, and an
    ``x`` that is that array is copied to scratch first (else writing would change
    what is being read)."""
    settle_name(name, Driver(budget, "to_zarr"))
    if is_chain(src):
        return src
    if identity(src) == name or identity(getattr(src, "stored", None)) == name:
        return x._copy(None, "to_zarr")._concrete_file("to_zarr")
    return src


def _read_bytes(src: Any) -> float:
    """Bytes one element of ``src`` holds while read (a chain: what its read holds)."""
    return src.stats().peak if is_chain(src) else float(src.dtype.itemsize)


def _regions(shape: tuple[int, ...], tile: tuple[int, ...]) -> Iterator[Region]:
    for starts in itertools.product(*(range(0, n, t) for n, t in zip(shape, tile))):
        yield tuple(slice(s, min(s + t, n)) for s, t, n in zip(starts, tile, shape))


def from_zarr(
    source: zarr.Array | str | os.PathLike[str],
    *,
    path: str | os.PathLike[str] | None = None,
    page_shape: tuple[int, ...] | None = None,
    budget: MemoryBudget | int | str | None = None,
    storage_options: dict[str, Any] | None = None,
) -> DiskArray:
    """A DiskArray *copied* from a zarr array into gradpipe's own file format.

    Use `open_zarr` to compute on the zarr array where it lies, with no copy;
    copy when the zarr array's chunks suit the computation badly (chunks much
    larger than the budget, say), or to keep a snapshot.

    **Arguments:**

    - `source`: a `zarr.Array`, or a path or URL to one.
    - `path`: where to keep the copy; by default a scratch file.
    - `page_shape`, `budget`: as for `DiskArray.from_numpy`.
    - `storage_options`: options for the fsspec file system of a URL.
    """
    if isinstance(source, (str, os.PathLike)):
        source = zarr_file(source, storage_options=storage_options).array
    f = _new_file(source.shape, source.dtype, path, page_shape, budget)
    return DiskArray._wrap(_written(f, lambda r, out: _copy_into(out, source[r])))
