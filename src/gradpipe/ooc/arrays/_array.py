"""`DiskArray`: an array whose shape and dtype are known and whose data is on disk."""

from __future__ import annotations

import math
import mmap
import os
from typing import Any, TypeAlias

import jax
import numpy as np

from ..execution._driver import Driver, Store
from ..execution._executor import current_executor
from ..planning._budget import MemoryBudget, default_page_shape, format_bytes, get_budget
from ..storage._paged_file import PagedFile
from . import _handles
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


def _is_concrete(handle: Any) -> bool:
    return isinstance(handle, (int, np.integer)) or (
        isinstance(handle, np.ndarray) and handle.shape == ()
    )


def _is_operand(x) -> bool:
    """Whether ``x`` can be the other operand of an operator (else NotImplemented)."""
    return isinstance(x, (bool, int, float, complex, np.generic, np.ndarray)) or hasattr(x, "dtype")


def _forward(name: str, *, reflected: bool = False):
    """A method that calls ``gradpipe.ooc.ops.<name>`` (operands swapped if ``reflected``)."""

    def method(self, *args, **kwargs):
        ops = namespace().ops

        if name not in _NOT_BINARY and args and not _is_operand(args[0]):
            return NotImplemented
        op = getattr(ops, name)
        if reflected:
            return op(args[0], self, *args[1:], **kwargs)
        return op(self, *args, **kwargs)

    method.__name__ = name
    method.__doc__ = f"See `gradpipe.ooc.{name}`."
    return method


def _divmod(*, reflected: bool = False):
    """``divmod(x, other)``: ``(x // other, x % other)``, as NumPy's and JAX's arrays give."""
    floor_divide = _forward("floor_divide", reflected=reflected)
    remainder = _forward("remainder", reflected=reflected)

    def method(self, other):
        quotient = floor_divide(self, other)
        if quotient is NotImplemented:
            return NotImplemented
        return quotient, remainder(self, other)

    method.__name__ = "__rdivmod__" if reflected else "__divmod__"
    method.__doc__ = "``(x // other, x % other)``: see `gradpipe.ooc.floor_divide`, `remainder`."
    return method


_NOT_BINARY = frozenset(
    {
        "getitem",
        "astype",
        "update_",
        "persist",
        "transpose",
        "matrix_transpose",
        "matmul",
        "real",
        "imag",
        "conj",
    }
)


def _reduction(name: str):
    """``x.sum(...)`` & co., with the arguments `np.sum(x)` & co. pass (``dtype``, ``out``)."""

    def method(self, axis=None, dtype=None, out=None, keepdims=False, *, budget=None, **other):
        ops = namespace().ops

        if out is not None or other:
            given = ["out"] * (out is not None) + sorted(other)
            raise TypeError(
                f"DiskArray.{name}() does not take {', '.join(given)} (results are new "
                f"arrays, over whole axes). Call ooc.{name}(x, axis=..., keepdims=...)."
            )
        if dtype is not None:  # NumPy's `dtype=`: accumulate in that dtype
            self = ops.astype(self, dtype, budget=budget)
        return getattr(ops, name)(self, axis=axis, keepdims=keepdims, budget=budget)

    method.__name__ = name
    method.__doc__ = f"See `gradpipe.ooc.{name}` (``dtype=`` converts first, as NumPy's)."
    return method


class DiskArray:
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

    __array_priority__ = 100  # so `np_scalar * disk_array` defers to us

    def __init__(self, _file, shape, dtype, _handle):
        self._file = _file
        self.shape = tuple(int(n) for n in shape)
        self.dtype = np.dtype(dtype)
        self._handle = _handle

    # -- construction ----------------------------------------------------------

    @classmethod
    def _wrap(cls, f: PagedFile) -> DiskArray:
        return cls(f, f.shape, f.dtype, _handles.register(f))

    @classmethod
    def _from_handle(cls, handle, shape, dtype) -> DiskArray:
        """The value for a lowered handle: a claimed file, or a traced handle."""
        if not _is_concrete(handle):
            return cls(None, shape, dtype, handle)
        return cls(_handles.claim(int(handle)), shape, dtype, int(handle))

    @classmethod
    def zeros(cls, shape, dtype=np.float32, *, path=None, budget=None) -> DiskArray:
        """An all-zero array on disk (a fresh file, sparse where the file system allows)."""
        return cls.full(shape, 0, dtype, path=path, budget=budget)

    @classmethod
    def full(cls, shape, fill_value, dtype=np.float32, *, path=None, budget=None) -> DiskArray:
        """An array on disk with every element equal to ``fill_value``."""
        shape = (shape,) if isinstance(shape, int) else tuple(shape)
        f = _new_file(shape, dtype, path, None, budget)
        try:
            if fill_value != 0:
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
        path: str | os.PathLike | None = None,
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
        # A memory map's rows are copied into memory before each write: written
        # straight from the map, the copy into the page cache faults part-way and the
        # kernel caches the new file in small pages, which every later mapped read
        # of it pays for (measured: 0.1 s per GiB to map, against 0.008 s).
        mapped = _is_mapped(array)
        try:
            for r in _row_chunks(f):
                f.write(r, np.array(array[r]) if mapped else array[r])
        except BaseException:
            f.discard()
            raise
        return cls._wrap(f.commit())

    from_memmap = from_numpy

    @classmethod
    def from_row_blocks(
        cls, shape, dtype, make_rows, *, path=None, page_shape=None, budget=None
    ) -> DiskArray:
        """An array built block of rows by block of rows, never whole in memory.

        ``make_rows(start, stop)`` returns rows ``start:stop`` (shape
        ``(stop - start, *shape[1:])``); blocks are one page row high.

        ```python
        X = DiskArray.from_row_blocks(
            (10**6, 64), np.float32,
            lambda a, b: np.random.default_rng(a).standard_normal((b - a, 64)),
        )
        ```
        """
        f = _new_file(tuple(shape), dtype, path, page_shape, budget)
        try:
            for r in _row_chunks(f):
                f.write(r, np.asarray(make_rows(r[0].start, r[0].stop), f.dtype))
        except BaseException:
            f.discard()
            raise
        return cls._wrap(f.commit())

    @classmethod
    def open(cls, path: str | os.PathLike, *, writable: bool = False) -> DiskArray:
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

    def _concrete_file(self, what: str):
        if not _is_concrete(self._handle):
            raise TypeError(
                f"DiskArray.{what} needs the data, but this DiskArray is being traced by JAX "
                "(inside jax.jit/grad). Return it from the traced function and use it outside."
            )
        if self._file is None:
            return _handles.ZeroFile(self.shape, self.dtype)
        return self._file

    def to_numpy(self, *, force: bool = False, budget: MemoryBudget | int | str | None = None):
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

    def __array__(self, dtype=None, copy=None):
        """The data as a NumPy array (``np.asarray(x)``): a copy read from disk, refused
        with a `MemoryError` giving the size when it exceeds the memory budget."""
        if copy is False:
            raise ValueError(
                "np.asarray(x, copy=False): a DiskArray's data is on disk, so NumPy can only "
                "have a copy of it; pass copy=None or copy=True."
            )
        out = self.to_numpy()
        return out if dtype is None else out.astype(dtype)

    def save(self, path: str | os.PathLike) -> DiskArray:
        """Copy to a named file (written under a temporary name, then renamed)."""
        return self._copy(path, "save()")

    def _copy(self, path, what: str) -> DiskArray:
        src = self._concrete_file(what)
        if path is not None and self.shape and current_executor() is not None:
            # tiles written by the cluster's workers, the file renamed into place here
            return DiskArray._wrap(Driver(get_budget()).forward(Store(path), [src]))
        f = PagedFile.create(self.shape, self.dtype, src.page_shape, path=path)
        try:
            for r in _row_chunks(f):
                f.write(r, src.read(r))
        except BaseException:
            f.discard()
            raise
        return DiskArray._wrap(f.commit())

    def __copy__(self) -> DiskArray:
        """Another `DiskArray` on the same file (a view, as `update_` shows)."""
        return DiskArray(self._file, self.shape, self.dtype, self._handle)

    def __deepcopy__(self, memo) -> DiskArray:
        """An independent copy in a new scratch file (as NumPy's deepcopy copies data);
        a read-only constant (an all-zero or constant gradient) is returned as is."""
        f = self._file
        constant = not isinstance(f, PagedFile) and not getattr(f, "writable", False)
        if _is_concrete(self._handle) and constant:
            return self
        return self._copy(None, "deepcopy()")

    def __reduce__(self):
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

    # -- Python protocols: NumPy's answers, or a refusal (never identity by accident)

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d DiskArray (it has no length).")
        return self.shape[0]

    def __iter__(self):
        """Rows, one `DiskArray` each (as NumPy iterates over the first axis)."""
        n = len(self)  # a 0-d array refuses, as NumPy's does
        return (self[i] for i in range(n))

    def __contains__(self, value):
        raise TypeError(
            "`value in DiskArray` is not supported (Python would compare rows by identity). "
            "Use ooc.any(x == value) for whether any element equals value."
        )

    def _scalar(self, kind):
        if self.size != 1:
            if kind is bool:
                raise ValueError(
                    f"The truth value of a DiskArray of shape {self.shape} is ambiguous "
                    "(as for a NumPy array). Reduce it first: ooc.any(x) or ooc.all(x)."
                )
            raise TypeError(
                f"only size-1 DiskArrays can be converted to Python scalars, got shape "
                f"{self.shape}."
            )
        return kind(self._concrete_file(f"{kind.__name__}()").read(None).reshape(()).item())

    def __bool__(self) -> bool:
        return self._scalar(bool)

    def __float__(self) -> float:
        return self._scalar(float)

    def __int__(self) -> int:
        return self._scalar(int)

    def __complex__(self) -> complex:
        return self._scalar(complex)

    def __index__(self) -> int:
        if self.dtype.kind not in "iu":
            raise TypeError(f"only integer DiskArrays can be used as an index, not {self.dtype}.")
        return self._scalar(int)

    __hash__ = object.__hash__  # by identity (``==`` is elementwise, as in NumPy)

    # -- the array API's array object ------------------------------------------

    def __array_namespace__(self, *, api_version: str | None = None):
        """`gradpipe.ooc`, the array API namespace of DiskArrays."""
        if api_version not in (None, "2021.12", "2022.12", "2023.12", "2024.12"):
            raise ValueError(f"gradpipe.ooc implements array API 2024.12, not {api_version!r}.")
        return namespace().package

    @property
    def device(self):
        """The disk: where every DiskArray's data lives (`gradpipe.ooc.Device`)."""
        from ._device import DISK

        return DISK

    def to_device(self, device, /, *, stream=None) -> DiskArray:
        """``self`` (there is one device); another device is refused."""
        from ._device import check_device

        check_device(device)
        return self

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        """NumPy's ufuncs run out of core: ``np.exp(x)`` is ``ooc.exp(x)``, a DiskArray.

        A ufunc with no out-of-core twin, a method such as ``np.add.reduce``, or an
        ``out=`` argument is refused with a `TypeError` rather than loading the array.
        """
        ops = namespace().ops

        if ufunc is np.divmod and method == "__call__" and not kwargs:  # `divmod(np_scalar, x)`
            return ops.floor_divide(*inputs), ops.remainder(*inputs)
        name = _UFUNC_NAMES.get(ufunc.__name__, ufunc.__name__)
        fn = getattr(ops, name, None) if name in ops.__all__ else None
        if method != "__call__" or fn is None or kwargs:
            what = f"np.{ufunc.__name__}" + ("" if method == "__call__" else f".{method}")
            extra = f" with {sorted(kwargs)}" if kwargs and fn is not None else ""
            raise TypeError(
                f"{what}{extra} has no out-of-core form for DiskArrays. Use the gradpipe.ooc "
                "function of the same name, or read the data with x.to_numpy() first."
            )
        return fn(*inputs)

    def __dlpack__(self, /, *, stream=None, max_version=None, dl_device=None, copy=None):
        """A DLPack capsule of a copy of the data read into host memory (refused with
        a `MemoryError` above the budget, as `to_numpy`; ``copy=False`` is a
        `BufferError`: the data on disk cannot be shared)."""
        if copy is False:
            raise BufferError(
                "a DiskArray's data is on disk: DLPack can only carry a copy of it in memory "
                "(pass copy=None or copy=True)."
            )
        kwargs = {} if max_version is None else {"max_version": max_version}
        return self.to_numpy().__dlpack__(stream=stream, **kwargs)

    def __dlpack_device__(self):
        """The host CPU, where the copy `__dlpack__` exports lives."""
        return (1, 0)  # DLPack's kDLCPU, device 0

    def block_until_ready(self) -> DiskArray:
        """``self``: an eager out-of-core operation has finished when it returns (a fused
        result is computed when read: `gradpipe.ooc.persist` writes it now)."""
        return self

    # -- operations (thin forwards to gradpipe.ooc.ops) --------------------------

    __matmul__ = _forward("matmul")
    __rmatmul__ = _forward("matmul", reflected=True)
    __add__ = _forward("add")
    __radd__ = _forward("add", reflected=True)
    __sub__ = _forward("subtract")
    __rsub__ = _forward("subtract", reflected=True)
    __mul__ = _forward("multiply")
    __rmul__ = _forward("multiply", reflected=True)
    __truediv__ = _forward("divide")
    __rtruediv__ = _forward("divide", reflected=True)
    __floordiv__ = _forward("floor_divide")
    __rfloordiv__ = _forward("floor_divide", reflected=True)
    __mod__ = _forward("remainder")
    __rmod__ = _forward("remainder", reflected=True)
    __divmod__ = _divmod()
    __rdivmod__ = _divmod(reflected=True)
    __pow__ = _forward("pow")
    __rpow__ = _forward("pow", reflected=True)
    __and__ = _forward("bitwise_and")
    __rand__ = _forward("bitwise_and", reflected=True)
    __or__ = _forward("bitwise_or")
    __ror__ = _forward("bitwise_or", reflected=True)
    __xor__ = _forward("bitwise_xor")
    __rxor__ = _forward("bitwise_xor", reflected=True)
    __lshift__ = _forward("bitwise_left_shift")
    __rlshift__ = _forward("bitwise_left_shift", reflected=True)
    __rshift__ = _forward("bitwise_right_shift")
    __rrshift__ = _forward("bitwise_right_shift", reflected=True)
    __neg__ = _forward("negative")
    __pos__ = _forward("positive")
    __abs__ = _forward("abs")
    __invert__ = _forward("bitwise_invert")
    __eq__ = _forward("equal")  # type: ignore[assignment]
    __ne__ = _forward("not_equal")  # type: ignore[assignment]
    __lt__ = _forward("less")
    __le__ = _forward("less_equal")
    __gt__ = _forward("greater")
    __ge__ = _forward("greater_equal")
    __getitem__ = _forward("getitem")

    def __setitem__(self, key, value) -> None:
        """Write ``value`` into the selected elements, in place (eagerly only; see
        `gradpipe.ooc.ops._setitem`). Under `jax.jit` it is refused: use `ooc.where`."""
        namespace().set_item(self, key, value)

    T = property(_forward("transpose"))
    mT = property(_forward("matrix_transpose"))
    real = property(_forward("real"))
    imag = property(_forward("imag"))
    conj = _forward("conj")
    conjugate = _forward("conj")
    sum = _reduction("sum")
    mean = _reduction("mean")
    max = _reduction("max")
    astype = _forward("astype")

    def argsort(self, axis=-1, kind=None, order=None, *, stable=None, budget=None) -> DiskArray:
        """NumPy's ``a.argsort()``: see `gradpipe.ooc.argsort` (``kind="stable"``
        or ``stable=True`` for a stable order; ``order`` is for structured arrays)."""
        ops = namespace().ops

        if order is not None:
            raise TypeError("DiskArray.argsort(): order= is for structured arrays.")
        stable = kind in ("stable", "mergesort") if stable is None else stable
        return ops.argsort(self, axis=axis, stable=bool(stable), budget=budget)

    def searchsorted(self, v, side="left", sorter=None, *, budget=None):
        """NumPy's ``a.searchsorted(v)``: see `gradpipe.ooc.searchsorted`."""
        ops = namespace().ops

        return ops.searchsorted(self, v, side=side, sorter=sorter, budget=budget)

    update_ = _forward("update_")
    persist = _forward("persist")


# NumPy's ufunc names that the array API spells otherwise
_UFUNC_NAMES = {
    "absolute": "abs",
    "arccos": "acos",
    "arccosh": "acosh",
    "arcsin": "asin",
    "arcsinh": "asinh",
    "arctan": "atan",
    "arctan2": "atan2",
    "arctanh": "atanh",
    "conjugate": "conj",
    "invert": "bitwise_invert",
    "left_shift": "bitwise_left_shift",
    "right_shift": "bitwise_right_shift",
    "power": "pow",
    "true_divide": "divide",
}


# ---------------------------------------------------------------- helpers


def _is_mapped(array: np.ndarray) -> bool:
    """Whether ``array``'s memory is a memory map (a `np.memmap`, or a view of one)."""
    base = array
    while isinstance(base, np.ndarray):
        if isinstance(base, np.memmap):
            return True
        base = base.base
    return isinstance(base, mmap.mmap)


def _reopen(path: str, writable: bool) -> DiskArray:
    return DiskArray.open(path, writable=writable)


def _new_file(shape, dtype, path, page_shape, budget) -> PagedFile:
    shape = tuple(int(n) for n in shape)
    # stored in native byte order, as JAX holds values: a big-endian ``>f4`` array is
    # float32 (one compilation, and gradients in the dtype other float32 arrays get)
    dtype = np.dtype(dtype).newbyteorder("=")
    if page_shape is None:
        page_shape = default_page_shape(shape, dtype.itemsize, get_budget(budget))
    return PagedFile.create(shape, dtype, page_shape, path=path)


def _row_chunks(f: PagedFile):
    """Regions of whole page rows, one page-row high: bounded-memory copies."""
    if not f.shape:
        yield ()
        return
    step = f.page_shape[0]
    for start in range(0, f.shape[0], step):
        yield (slice(start, min(start + step, f.shape[0])), *(slice(0, n) for n in f.shape[1:]))


# `DiskArrayType` methods: what `==`, `!=`, `bool()` and `len()` do to a traced DiskArray


def _traced_bool(aval, x):
    raise TypeError(
        f"bool() of a traced DiskArray{list(aval.shape)}: its values are not known while "
        "JAX traces (inside jax.jit/grad). Use lax.cond on a 0-d result, or return the "
        "array and test it outside."
    )


def _traced_len(aval, x):
    if not aval.shape:
        raise TypeError("len() of a 0-d DiskArray (it has no length).")
    return aval.shape[0]
