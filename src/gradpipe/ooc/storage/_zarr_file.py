"""Zarr arrays read and written where they lie: the file behind `open_zarr`.

A `ZarrFile` gives the tile driver a zarr array (format 2 or 3, any codecs, any
regular chunking, on any store zarr opens) as it gives it a paged file: its
``page_shape`` is the chunk shape, so tiles are planned in whole chunks
(`_grain`), and a read of a region decodes only the chunks that region touches.
Nothing is copied into gradpipe's own format.

I/O accounting. ``io_stats().bytes_read`` counts the *decoded* bytes of every
chunk a read touches (the part of each chunk inside the array), which is what
the read decompresses and holds; a read aligned with chunks counts exactly its own
bytes, a misaligned one counts the whole chunks it had to decode. Writes count the
decoded bytes of the chunks (or shards) they encode. Stored (compressed) sizes are
not counted: knowing them would cost the store a request per chunk.

Atomicity: one chunk at a time, never the whole array. Every write of a chunk
replaces it whole: zarr's `LocalStore` writes a chunk under a temporary name and
renames it over the old one (so local paths and ``file://`` URLs, which
`open_zarr` opens through `LocalStore` rather than fsspec's local file system,
which writes in place, leave each chunk entirely old or entirely new after a
kill); an object store's PUT replaces an object whole; ``memory://`` assigns it.
Inside `ZarrFile.rewriting` (what `update_` uses) a write that covers only part
of a chunk is held in memory until the rest of that chunk arrives, so each chunk
is encoded and written once, with its final values. A process killed part-way
through `update_` leaves some chunks old and some new: zarr has no rename that
replaces a whole array.
"""

from __future__ import annotations

import contextlib
import math
import os
import threading
from collections.abc import Iterator
from types import ModuleType
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import ArrayLike

from ._in_place import InPlaceFile, Region, extent, touched_bytes
from ._iostats import record_read, record_write

__all__ = ["ZarrFile", "zarr_file", "resolve_store", "zarr_module"]

if TYPE_CHECKING:
    from zarr import Array as ZarrArray
#: A partly written chunk inside `ZarrFile.rewriting`: [buffer, elements filled, parts].
_Staged = list[Any]

_MODES = ("r", "r+")


def zarr_module() -> ModuleType:
    """The `zarr` module (version 3 or later), or an `ImportError` naming the extra."""
    try:
        import zarr
    except ImportError:
        raise ImportError(
            "gradpipe.ooc's zarr support needs zarr 3: pip install 'gradpipe[zarr]'."
        ) from None
    if int(zarr.__version__.split(".")[0]) < 3:
        raise ImportError(
            f"gradpipe.ooc reads zarr arrays in place with zarr 3 or later; zarr "
            f"{zarr.__version__} is installed. pip install 'gradpipe[zarr]'."
        )
    return zarr


class ZarrFile(InPlaceFile):
    """A zarr array as the tile driver reads and writes it (see the module).

    Made by `open_zarr`; reads are thread safe (the driver reads ahead on worker
    threads). Writable when opened with ``mode="r+"``.
    """

    whole_chunks = True  # decoding is per chunk: tiles follow chunks (`_grain`)
    #: written in place, one whole chunk at a time inside `rewriting` (no shadow copy
    #: of the whole array can be renamed over it)
    writes_in_place = True

    def __init__(self, array: ZarrArray, location: str) -> None:
        dtype = np.dtype(array.dtype)
        if dtype.kind not in "biufc":
            raise TypeError(
                f"the zarr array at {location!r} holds {dtype} values; gradpipe.ooc works "
                "on booleans and numbers (bool, int, uint, float, complex dtypes)."
            )
        self._array = array
        self.path = location
        self.shape = tuple(int(n) for n in array.shape)
        self.dtype = dtype.newbyteorder("=")  # values are held in native byte order
        self.page_shape = tuple(int(c) for c in array.chunks)
        shards = getattr(array, "shards", None)
        self.write_shape = tuple(int(c) for c in (shards or array.chunks))
        self.writable = not array.read_only
        self._staged: dict[tuple[int, ...], _Staged] | None = None
        self._lock = threading.Lock()

    @property
    def array(self) -> ZarrArray:
        """The zarr array behind this file."""
        return self._array

    # -- reading ---------------------------------------------------------------

    def read(self, region: Region | None = None, out: np.ndarray | None = None) -> np.ndarray:
        """The values in ``region``, decoded from the chunks it touches; in ``out``
        when given (an array of the region's shape)."""
        region = self.normalize(region)
        shape = extent(region)
        if out is not None and tuple(out.shape) != shape:
            raise ValueError(f"read: out must have the region's shape {shape}, got {out.shape}.")
        if 0 in shape:
            return np.empty(shape, self.dtype) if out is None else out
        block = np.asarray(self._array[region])
        if out is None:
            out = np.ascontiguousarray(block, dtype=self.dtype)
        else:
            out[...] = block
        record_read(touched_bytes(region, self.page_shape, self.shape, self.dtype.itemsize))
        return out

    # -- writing ---------------------------------------------------------------

    def _check_writable(self) -> None:
        if not self.writable:
            raise TypeError(
                f"the zarr array at {self.path!r} was opened read-only; open it with "
                "ooc.open_zarr(..., mode='r+') to write into it."
            )

    def write(self, region: Region | None, data: ArrayLike) -> None:
        """Write ``data`` (broadcast to the region) into ``region``.

        Chunks the region covers whole are encoded from ``data`` alone; a chunk it
        covers in part is read, merged and rewritten (outside `rewriting`) or held
        until the rest of it is written (inside).
        """
        self._check_writable()
        region = self.normalize(region)
        shape = extent(region)
        data = np.broadcast_to(np.asarray(data, self.dtype), shape)
        if 0 in shape:
            return
        if self._staged is not None:
            self._write_staged(region, data)
            return
        self._put(region, data)

    def _put(self, region: Region, data: np.ndarray) -> None:
        self._array[region] = data
        record_write(touched_bytes(region, self.write_shape, self.shape, self.dtype.itemsize))

    def _write_staged(self, region: Region, data: np.ndarray) -> None:
        """Write the chunks ``region`` covers whole now; stage the others' parts."""
        whole = []  # per axis: the range of units covered whole
        for s, c, n in zip(region, self.write_shape, self.shape):
            lo = -(-s.start // c)
            hi = -(-n // c) if s.stop == n else s.stop // c
            whole.append((lo, max(lo, hi)))
        inner = tuple(
            slice(min(lo * c, n), min(hi * c, n))
            for (lo, hi), c, n in zip(whole, self.write_shape, self.shape)
        )
        if all(s.stop > s.start for s in inner):
            local = tuple(slice(i.start - r.start, i.stop - r.start) for i, r in zip(inner, region))
            self._put(inner, data[local])
        touched = [range(s.start // c, -(-s.stop // c)) for s, c in zip(region, self.write_shape)]
        for unit in np.ndindex(*[len(t) for t in touched]):
            index = tuple(t[i] for t, i in zip(touched, unit))
            if all(lo <= i < hi for i, (lo, hi) in zip(index, whole)):
                continue  # written above
            self._stage(index, region, data)

    def _unit_box(self, index: tuple[int, ...]) -> Region:
        return tuple(
            slice(i * c, min((i + 1) * c, n))
            for i, c, n in zip(index, self.write_shape, self.shape)
        )

    def _stage(self, index: tuple[int, ...], region: Region, data: np.ndarray) -> None:
        box = self._unit_box(index)
        part = tuple(slice(max(b.start, r.start), min(b.stop, r.stop)) for b, r in zip(box, region))
        in_unit = tuple(slice(p.start - b.start, p.stop - b.start) for p, b in zip(part, box))
        in_data = tuple(slice(p.start - r.start, p.stop - r.start) for p, r in zip(part, region))
        with self._lock:
            assert self._staged is not None  # staging: inside `rewriting`
            entry = self._staged.setdefault(index, [np.empty(extent(box), self.dtype), 0, []])
            entry[0][in_unit] = data[in_data]
            entry[1] += math.prod(extent(part))
            entry[2].append(in_unit)
            done = entry[1] >= math.prod(extent(box))
            if done:
                del self._staged[index]
        if done:
            self._put(box, entry[0])

    @property
    def identity(self) -> str:
        """What names this array for every handle of it (`planning._chain_readers`)."""
        return self.path if _is_url(self.path) else os.path.realpath(self.path)

    @staticmethod
    def name_of(root: str, path: str | None) -> str:
        """The `identity` of the array at ``path`` in the store at ``root``."""
        where = _join(root, path)
        return where if _is_url(where) else os.path.realpath(where)

    @contextlib.contextmanager
    def rewriting(self) -> Iterator[ZarrFile]:
        """Overwrite the array inside the block, each chunk written once, whole.

        Parts of chunks are held in memory until their chunk is complete; chunks
        the block left incomplete are merged with their stored values at the end.
        An exception discards what is held (those chunks keep their old values).
        """
        self._check_writable()
        self._staged = {}
        try:
            yield self
        except BaseException:
            self._staged = None
            raise
        left, self._staged = self._staged, None
        for index, (buffer, _, parts) in left.items():
            box = self._unit_box(index)
            merged = self.read(box)
            for p in parts:
                merged[p] = buffer[p]
            self._put(box, merged)

    # -- identity --------------------------------------------------------------

    def __reduce__(self) -> tuple[type[ZarrFile], tuple[ZarrArray, str]]:
        return (ZarrFile, (self._array, self.path))

    def __repr__(self) -> str:
        return (
            f"ZarrFile({self.path!r}, shape={self.shape}, dtype={self.dtype}, "
            f"chunks={self.page_shape})"
        )


# ---------------------------------------------------------------- opening


def _is_url(s: str) -> bool:
    return "://" in s


def resolve_store(
    store: Any, *, mode: str, storage_options: dict[str, Any] | None
) -> tuple[Any, str]:
    """A zarr store for ``store`` (a local path, an fsspec URL or a zarr store) and
    the location that names it.

    Local paths and ``file://`` URLs become zarr's `LocalStore` (which writes each
    chunk by an atomic rename); other URLs an fsspec store with ``storage_options``.
    """
    zarr = zarr_module()
    read_only = mode == "r"
    if isinstance(store, (str, os.PathLike)):
        text = os.fspath(store)
        scheme = text.split("://", 1)[0].lower() if _is_url(text) else "file"
        if scheme in ("file", "local"):
            if storage_options:
                raise ValueError(
                    f"storage_options apply to object storage URLs, not to the local path "
                    f"{text!r}; drop them."
                )
            local = os.path.abspath(text.split("://", 1)[1] if _is_url(text) else text)
            if mode in _MODES and not os.path.exists(local):
                raise FileNotFoundError(f"No zarr array at {local!r}.")
            return zarr.storage.LocalStore(local, read_only=read_only), local
        try:
            import fsspec  # noqa: F401
        except ImportError:
            raise ImportError(
                f"opening {text!r} needs fsspec: pip install 'gradpipe[zarr]' (and s3fs for "
                "s3:// URLs)."
            ) from None
        opened = zarr.storage.FsspecStore.from_url(
            text, storage_options=dict(storage_options or {}), read_only=read_only
        )
        return opened, text.rstrip("/")
    if storage_options:
        raise ValueError(
            "storage_options apply when the store is given as a URL; this store is already "
            "open. Drop them, or pass the URL."
        )
    if isinstance(store, zarr.abc.store.Store):
        return store, str(store)
    raise TypeError(
        f"a zarr store must be a path, a URL (file://, memory://, s3://, ...), a zarr store "
        f"or a zarr.Array; got {type(store).__name__}."
    )


def _local_twin(array: ZarrArray) -> ZarrArray:
    """``array`` reopened through `LocalStore` when its store is fsspec's local file
    system (which writes chunks in place, not by rename); else ``array`` itself."""
    zarr = zarr_module()
    store = array.store
    fs = getattr(store, "fs", None)
    if not isinstance(store, zarr.storage.FsspecStore) or fs is None:
        return array
    inner = getattr(fs, "sync_fs", fs)  # zarr wraps synchronous file systems
    if "file" not in np.atleast_1d(getattr(inner, "protocol", ())).tolist():
        return array
    local = zarr.storage.LocalStore(store.path, read_only=array.read_only)
    return zarr.open_array(local, path=array.path, mode="r" if array.read_only else "r+")


def _store_root(store: Any) -> str:
    """Where ``store`` is: a local directory, a URL, or the store's own name."""
    root = getattr(store, "root", None)
    if root is not None:
        return os.fspath(root)
    fs, path = getattr(store, "fs", None), getattr(store, "path", None)
    if fs is not None and path is not None:
        return getattr(fs, "sync_fs", fs).unstrip_protocol(path)
    return str(store)


def zarr_file(
    store: Any,
    *,
    path: str | None = None,
    mode: str = "r",
    storage_options: dict[str, Any] | None = None,
) -> ZarrFile:
    """The `ZarrFile` `open_zarr` wraps (see there for the arguments)."""
    zarr = zarr_module()
    if mode not in _MODES:
        raise ValueError(f"open_zarr: mode must be 'r' or 'r+', got {mode!r}.")
    if isinstance(store, zarr.Array):
        if storage_options or path is not None:
            raise ValueError(
                "open_zarr: path and storage_options apply when the store is given by "
                "location; this zarr.Array is already open."
            )
        if mode == "r+" and store.read_only:
            raise ValueError(
                "open_zarr(array, mode='r+'): this zarr.Array was opened read-only; open it "
                "with zarr.open_array(..., mode='r+') first."
            )
        array = _local_twin(store)
        return ZarrFile(array, _join(_store_root(array.store), array.path))
    opened, root = resolve_store(store, mode=mode, storage_options=storage_options)
    try:
        array = zarr.open_array(opened, path=path or "", mode=mode)
    except FileNotFoundError:
        raise FileNotFoundError(f"No zarr array at {_join(root, path)!r}.") from None
    except zarr.errors.BaseZarrError as e:
        if "group" not in str(e):
            raise
        raise ValueError(
            f"{_join(root, path)!r} is a zarr group, not an array: pass path= the array's "
            f"name in it ({_array_names(zarr, opened, path)})."
        ) from None
    return ZarrFile(array, _join(root, path))


def _join(root: str, path: str | None) -> str:
    return f"{root.rstrip('/')}/{path.strip('/')}" if path else root


def _array_names(zarr: ModuleType, store: Any, path: str | None) -> str:
    try:
        names = sorted(zarr.open_group(store, path=path or "", mode="r").array_keys())
    except Exception:  # a listing is a courtesy: never hide the real error
        return "its arrays could not be listed"
    return "arrays: " + ", ".join(repr(n) for n in names) if names else "it holds no arrays"
