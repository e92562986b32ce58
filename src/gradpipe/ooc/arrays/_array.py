"""`DiskArray`: an array whose shape and dtype are known and whose data is on disk."""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any, ClassVar, TypeAlias

import jax
import numpy as np
from numpy.typing import DTypeLike

from ..execution._driver import Driver
from ..execution._executor import current_executor
from ..execution._store import Store
from ..planning._budget import MemoryBudget, format_bytes, get_budget
from ..storage._paged_file import PagedFile
from . import _handles
from ._array_files import _copy_into, _is_mapped, _new_file, _row_chunks, _written
from ._array_protocols import ArrayProtocols
from ._device import Device
from ._forwarding import _forward, _reduction
from ._namespace import namespace

__all__ = ["ArrayLike", "DiskArray", "Result"]

#: What gradpipe.ooc's functions take as an array: a `DiskArray` (under JAX
#: transformations, its tracer, a `jax.Array` to a type checker), a JAX or NumPy
#: array, or a Python or NumPy scalar.
ArrayLike: TypeAlias = (
    "DiskArray | jax.Array | np.ndarray | np.generic | bool | int | float | complex"
)

#: What they return: a `DiskArray`, or a JAX array (a 0-d result, an in-memory
#: operation, or a traced value).
Result: TypeAlias = "DiskArray | jax.Array"

#: A `DiskArray`'s handle (`_handles`): an int (a NumPy one, or 0-d array, from a
#: callback) for a concrete array, a traced ``int32`` under JAX transformations.
Handle: TypeAlias = "int | np.integer | np.ndarray | jax.Array"


def _is_concrete(handle: object) -> bool:
    return isinstance(handle, (int, np.integer)) or (
        isinstance(handle, np.ndarray) and handle.shape == ()
    )


class DiskArray(ArrayProtocols):
    """An array on disk that `gradpipe.ooc` operations read and write tile by tile.

    A `DiskArray` passes through `jax.jit` and `jax.grad` as a typed value (shape
    and dtype, never the data): arrays of equal shape and dtype share one
    compilation, and the gradient of a loss with respect to a `DiskArray` is a
    `DiskArray`. Data moves only inside out-of-core operations, which run on the
    host in tiles that fit the `MemoryBudget`.

    Create one with `DiskArray.from_numpy`, `from_memmap`, `open`, `zeros` or
    `full`; read it back with `to_numpy`.

    ```python
    a = DiskArray.from_numpy(np.ones((4096, 4096), np.float32))
    loss = jax.jit(lambda w: ooc.sum(ooc.square(a @ w)))
    ```
    """

    def __init__(self, _file: Any, shape: Sequence[int], dtype: DTypeLike, _handle: Handle):
        # the array file (a `PagedFile`, a `ConstantFile`, a file read in place, a fused
        # chain's or a pending result's: they read alike), None when traced or all-zero
        self._file = _file
        self.shape: tuple[int, ...] = tuple(int(n) for n in shape)
        self.dtype: np.dtype[Any] = np.dtype(dtype)
        self._handle = _handle

    # -- construction ----------------------------------------------------------

    @classmethod
    def _wrap(cls, f: Any) -> DiskArray:
        return cls(f, f.shape, f.dtype, _handles.register(f))

    @classmethod
    def _from_handle(cls, handle: Handle, shape: Sequence[int], dtype: DTypeLike) -> DiskArray:
        """The value for a lowered handle: a claimed file, or a traced handle."""
        if not _is_concrete(handle):
            return cls(None, shape, dtype, handle)
        return cls(_handles.claim(int(handle)), shape, dtype, int(handle))

    @classmethod
    def zeros(
        cls,
        shape: int | Sequence[int],
        dtype: DTypeLike = np.float32,
        *,
        path: str | os.PathLike[str] | None = None,
        budget: MemoryBudget | int | str | None = None,
    ) -> DiskArray:
        """An all-zero array on disk (a fresh file, sparse where the file system allows)."""
        return cls.full(shape, 0, dtype, path=path, budget=budget)

    @classmethod
    def full(
        cls,
        shape: int | Sequence[int],
        fill_value: bool | int | float | complex | np.generic,
        dtype: DTypeLike = np.float32,
        *,
        path: str | os.PathLike[str] | None = None,
        budget: MemoryBudget | int | str | None = None,
    ) -> DiskArray:
        """An array on disk with every element equal to ``fill_value``."""
        shape = (shape,) if isinstance(shape, int) else tuple(shape)
        f = _new_file(shape, dtype, path, None, budget)
        try:
            if fill_value != 0:  # (a new file reads as zeros)
                # a value broadcast, written a bounded slab at a time (`PagedFile.write`):
                # a page row of a wide array may be larger than memory
                for r in _row_chunks(f):
                    f.write(r, np.asarray(fill_value, f.dtype))
        except BaseException:
            f.discard()
            raise
        return cls._wrap(f.commit())

    @classmethod
    def from_numpy(
        cls,
        array: np.ndarray,
        *,
        path: str | os.PathLike[str] | None = None,
        page_shape: tuple[int, ...] | None = None,
        budget: MemoryBudget | int | str | None = None,
    ) -> DiskArray:
        """Copy ``array`` (a NumPy array or `np.memmap`) to a new array file.

        **Arguments:**

        - `array`: the data; a memmap is copied page row by page row, so it never
          needs to fit in memory.
        - `path`: where to keep the file; by default a scratch file, removed when
          the `DiskArray` is collected. A named file appears only once complete.
        - `page_shape`: the storage page; by default about budget/16 bytes.
        - `budget`: the budget the default page shape is derived from.
        """
        if not isinstance(array, np.ndarray):
            array = np.asarray(array)
        f = _new_file(array.shape, array.dtype, path, page_shape, budget)
        # an array in memory is written from itself, a memory map's rows copied into
        # one buffer first (`_written`)
        if _is_mapped(array):
            return cls._wrap(_written(f, lambda r, out: _copy_into(out, array[r])))
        return cls._wrap(_written(f, lambda r, out: array[r]))

    from_memmap = from_numpy

    @classmethod
    def from_row_blocks(
        cls,
        shape: Sequence[int],
        dtype: DTypeLike,
        make_rows: Callable[[int, int], Any],
        *,
        path: str | os.PathLike[str] | None = None,
        page_shape: tuple[int, ...] | None = None,
        budget: MemoryBudget | int | str | None = None,
    ) -> DiskArray:
        """An array built block of rows by block of rows, never whole in memory.

        ``make_rows(start, stop)`` returns rows ``start:stop`` (shape
        ``(stop - start, *shape[1:])``); blocks are one page row high, each copied
        into one buffer kept for the whole write before it is written (so two page
        rows are in memory at once: `_array_files._written` says why).

        ```python
        X = DiskArray.from_row_blocks(
            (10**6, 64), np.float32,
            lambda a, b: np.random.default_rng(a).standard_normal((b - a, 64)),
        )
        ```
        """
        f = _new_file(tuple(shape), dtype, path, page_shape, budget)
        return cls._wrap(
            _written(
                f,
                lambda r, out: _copy_into(out, make_rows(r[0].start, r[0].stop)),
            )
        )

    @classmethod
    def open(cls, path: str | os.PathLike[str], *, writable: bool = False) -> DiskArray:
        """Open an array file written by `from_numpy(..., path=...)` or `save`."""
        return cls._wrap(PagedFile.open(path, writable=writable))

    # -- reading ---------------------------------------------------------------

    @property
    def ndim(self) -> int:
        """The number of axes, ``len(shape)``."""
        return len(self.shape)

    @property
    def size(self) -> int:
        """The number of elements, the product of `shape`."""
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        """The size of the data in bytes, ``size * dtype.itemsize`` (the file adds page padding)."""
        return self.size * self.dtype.itemsize

    @property
    def chunks(self) -> tuple[tuple[int, ...], ...]:
        """The blocks the data is stored in, per axis, as xarray and dask give them
        (``((100, 100, 50), (64,))``): pages of a gradpipe file (or of a fused
        result's), chunks of a zarr or HDF5 array read in place; one block per axis
        for an array traced by JAX. Informative only: operations plan their tiles from
        the budget. xarray takes an array with ``chunks`` for a chunked one (see
        `gradpipe.ooc.xarray`)."""
        f = self._file if _is_concrete(self._handle) else None
        page = tuple(getattr(f, "page_shape", None) or self.shape)
        return tuple(
            tuple(min(p, n - s) for s in range(0, n, p)) if n and p else (n,)
            for n, p in zip(self.shape, page)
        )

    @property
    def path(self) -> str | None:
        """The file holding the data (``None`` for the symbolic all-zero array)."""
        return getattr(self._concrete_file("path"), "path", None)

    def _concrete_file(self, what: str) -> Any:
        if not _is_concrete(self._handle):
            raise TypeError(
                f"DiskArray.{what} needs the data, but this DiskArray is being traced by JAX "
                "(inside jax.jit/grad). Return it from the traced function and use it outside."
            )
        if self._file is None:
            return _handles.ZeroFile(self.shape, self.dtype)
        return self._file

    def to_numpy(
        self, *, force: bool = False, budget: MemoryBudget | int | str | None = None
    ) -> np.ndarray:
        """The whole array in memory.

        Refuses with a `MemoryError` (giving the size) when the array is larger than
        the memory budget, unless ``force=True``.
        """
        f = self._concrete_file("to_numpy()")
        b = get_budget(budget)
        if self.nbytes > b.nbytes and not force:
            raise MemoryError(
                f"DiskArray.to_numpy(): the array is {format_bytes(self.nbytes)}, more than "
                f"the {b}. Read tiles with ooc.slice_rows/ooc.slice_tile, raise the budget, "
                "or pass force=True."
            )
        return f.read(None)

    def save(self, path: str | os.PathLike[str]) -> DiskArray:
        """Copy to a named file (written under a temporary name, then renamed)."""
        return self._copy(path, "save()")

    def _copy(self, path: str | os.PathLike[str] | None, what: str) -> DiskArray:
        src = self._concrete_file(what)
        if path is not None and self.shape and current_executor() is not None:
            # tiles written by the cluster's workers, the file renamed into place here
            return DiskArray._wrap(Driver(get_budget()).forward(Store(path), [src]))
        f = PagedFile.create(self.shape, self.dtype, src.page_shape, path=path)
        return DiskArray._wrap(_written(f, src.read))  # (each page row read into the buffer)

    def __copy__(self) -> DiskArray:
        """Another `DiskArray` on the same file (a view, as `update_` shows)."""
        return DiskArray(self._file, self.shape, self.dtype, self._handle)

    def __deepcopy__(self, memo: dict[int, Any]) -> DiskArray:
        """An independent copy in a new scratch file (as NumPy's deepcopy copies data);
        a read-only constant (an all-zero or constant gradient) is returned as is."""
        f = self._file
        constant = not isinstance(f, PagedFile) and not getattr(f, "writable", False)
        if _is_concrete(self._handle) and constant:
            return self
        return self._copy(None, "deepcopy()")

    def __reduce__(self) -> tuple[Callable[..., DiskArray], tuple[Any, ...]]:
        """Pickled as its path, reopened on load; a scratch file has no lasting path.
        An array read where it lies (`open_zarr`, `open_hdf5`) is pickled as its store."""
        f = self._concrete_file("pickling")
        if getattr(f, "pickles_by_location", False):
            return (DiskArray._wrap, (f,))
        if not isinstance(f, PagedFile) or f.is_scratch or f.path is None:
            raise TypeError(
                f"cannot pickle a scratch DiskArray{list(self.shape)}: its file is deleted "
                "when it is collected or the process ends. Save it first (x.save(path)) "
                "and pickle that: it is reopened from its path when loaded."
            )
        return (_reopen, (f.path, f.writable))

    def __repr__(self) -> str:
        where = self.path if _is_concrete(self._handle) else "traced"
        return f"DiskArray(shape={self.shape}, dtype={self.dtype}, file={where!r})"

    # -- the array API's array object ------------------------------------------

    def __array_namespace__(self, *, api_version: str | None = None) -> ModuleType:
        """`gradpipe.ooc`, the array API namespace of DiskArrays."""
        if api_version not in (None, "2021.12", "2022.12", "2023.12", "2024.12"):
            raise ValueError(f"gradpipe.ooc implements array API 2024.12, not {api_version!r}.")
        return namespace().package

    @property
    def device(self) -> Device:
        """The disk: where every DiskArray's data lives (`gradpipe.ooc.Device`)."""
        from ._device import DISK

        return DISK

    def to_device(self, device: Device | str | None, /, *, stream: object = None) -> DiskArray:
        """``self`` (there is one device); another device is refused."""
        from ._device import check_device

        check_device(device)
        return self

    def block_until_ready(self) -> DiskArray:
        """``self``: an eager out-of-core operation has finished when it returns (a fused
        result is computed when read: `gradpipe.ooc.persist` writes it now)."""
        return self

    # -- NumPy's methods (thin forwards to gradpipe.ooc.ops) --------------------

    @property
    def T(self) -> Result:
        """See `gradpipe.ooc.transpose`."""
        return namespace().ops.transpose(self)

    @property
    def mT(self) -> Result:
        """See `gradpipe.ooc.matrix_transpose`."""
        return namespace().ops.matrix_transpose(self)

    @property
    def real(self) -> Result:
        """See `gradpipe.ooc.real`."""
        return namespace().ops.real(self)

    @property
    def imag(self) -> Result:
        """See `gradpipe.ooc.imag`."""
        return namespace().ops.imag(self)

    conj: ClassVar[Callable[[DiskArray], Result]] = _forward("conj")
    conjugate: ClassVar[Callable[[DiskArray], Result]] = _forward("conj")
    sum: ClassVar[Callable[..., Result]] = _reduction("sum")
    mean: ClassVar[Callable[..., Result]] = _reduction("mean")
    max: ClassVar[Callable[..., Result]] = _reduction("max")
    astype: ClassVar[Callable[..., Result]] = _forward("astype")

    def argsort(
        self,
        axis: int = -1,
        kind: str | None = None,
        order: object = None,
        *,
        stable: bool | None = None,
        budget: MemoryBudget | int | str | None = None,
    ) -> Result:
        """NumPy's ``a.argsort()``: see `gradpipe.ooc.argsort` (``kind="stable"``
        or ``stable=True`` for a stable order; ``order`` is for structured arrays)."""
        ops = namespace().ops

        if order is not None:
            raise TypeError("DiskArray.argsort(): order= is for structured arrays.")
        stable = kind in ("stable", "mergesort") if stable is None else stable
        return ops.argsort(self, axis=axis, stable=bool(stable), budget=budget)

    def searchsorted(
        self,
        v: ArrayLike,
        side: str = "left",
        sorter: ArrayLike | None = None,
        *,
        budget: MemoryBudget | int | str | None = None,
    ) -> Result:
        """NumPy's ``a.searchsorted(v)``: see `gradpipe.ooc.searchsorted`."""
        ops = namespace().ops

        return ops.searchsorted(self, v, side=side, sorter=sorter, budget=budget)

    update_: ClassVar[Callable[..., Result]] = _forward("update_")
    persist: ClassVar[Callable[..., Result]] = _forward("persist")


def _reopen(path: str, writable: bool) -> DiskArray:
    return DiskArray.open(path, writable=writable)
