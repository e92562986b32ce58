"""`GradpipeChunkManager`: gradpipe.ooc as one of xarray's chunked array types.

Registered as xarray's ``xarray.chunkmanagers`` entry point ``gradpipe`` (see
`gradpipe.ooc.xarray`). xarray asks its chunk manager to make chunked arrays
(`from_array`, `rechunk`), to read them into memory (`compute`), to write them
(`store`) and to run NumPy functions of blocks (`map_blocks`, `apply_gufunc`,
`reduction`, `blockwise`). Everything else (arithmetic, reductions over named
dimensions, ``where``, selection, ``xr.dot``, concatenation) xarray does through the
DiskArray's own array namespace, `gradpipe.ooc`, out of core and differentiable.
Loading this module adjusts two steps of xarray's groupby and resample for
DiskArrays (`_groupby`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np
from xarray.namedarray.parallelcompat import ChunkManagerEntrypoint

from ..arrays._array import DiskArray, Result
from . import _blocks, _chunks, _from_array, _groupby, _load, _store

__all__ = ["GradpipeChunkManager"]


class GradpipeChunkManager(ChunkManagerEntrypoint):
    """xarray's chunk manager for `gradpipe.ooc.DiskArray` (name: ``"gradpipe"``)."""

    available = True

    def __init__(self) -> None:
        self.array_cls = DiskArray

    # -- chunks ------------------------------------------------------------------

    def chunks(self, data: DiskArray) -> tuple[tuple[int, ...], ...]:
        """The blocks ``data`` is stored in (pages, or the chunks of its file)."""
        return data.chunks

    def normalize_chunks(
        self,
        chunks: Any,
        shape: tuple[int, ...] | None = None,
        limit: int | None = None,
        dtype: np.dtype | None = None,
        previous_chunks: tuple[tuple[int, ...], ...] | None = None,
    ) -> tuple[tuple[int, ...], ...]:
        """``chunks`` as block sizes per axis; ``"auto"`` follows the file's chunks
        (``previous_chunks``) or the default page shape under the budget."""
        if shape is None:  # xarray always passes it
            raise TypeError("normalize_chunks needs the array's shape.")
        return _chunks.normalize_chunks(
            chunks, shape, dtype=dtype, previous_chunks=previous_chunks, limit=limit
        )

    def from_array(self, data: Any, chunks: Any, **kwargs: Any) -> Result | np.ndarray:
        """A DiskArray reading ``data`` in place where possible, else a copy (see
        `gradpipe.ooc.xarray._from_array` for which sources are read in place)."""
        return _from_array.from_array(data, chunks, **kwargs)

    def rechunk(self, data: DiskArray, chunks: Any, **kwargs: Any) -> DiskArray:
        """``data`` in pages of the new chunks: itself when they are its chunks, else
        a copy (pages are a property of the file)."""
        wanted = _chunks.normalize_chunks(
            chunks, data.shape, dtype=data.dtype, previous_chunks=data.chunks
        )
        if wanted == data.chunks:
            return data
        pages = _chunks.page_shape(wanted)
        f = data._concrete_file("rechunk")
        return (
            DiskArray.from_row_blocks(
                data.shape,
                data.dtype,
                lambda a, b: f.read((slice(a, b), *(slice(0, n) for n in data.shape[1:]))),
                page_shape=pages,
                budget=kwargs.get("budget"),
            )
            if data.shape
            else data
        )

    def get_auto_chunk_size(self) -> int:
        """The bytes of a default page: a sixteenth of the budget, at most 16 MiB."""
        from ..planning._budget import get_budget

        return max(4096, min(get_budget().nbytes // 16, 16 * 2**20))

    # -- in memory, persisted, written ---------------------------------------------

    def compute(self, *data: Any, **kwargs: Any) -> tuple[Any, ...]:
        """The DiskArrays among ``data`` read into NumPy arrays, refused above the
        budget (``budget=`` may be given) naming the sizes."""
        return _load.load(*data, budget=kwargs.get("budget"))

    def persist(self, *data: Any, **kwargs: Any) -> tuple[Any, ...]:
        """``data`` with fused results written to scratch files (DiskArrays stay on disk)."""
        from ..ops import persist

        return tuple(persist(x) if isinstance(x, DiskArray) else x for x in data)

    def store(self, sources: DiskArray | Sequence[DiskArray], targets: Any, **kwargs: Any) -> None:
        """Stream ``sources`` into ``targets`` tile by tile (`_store.store`)."""
        return _store.store(sources, targets, **kwargs)

    @property
    def array_api(self) -> Any:
        """`gradpipe.ooc`, the DiskArray's array API namespace (its creation
        functions also take dask's ``chunks=``, as xarray passes it)."""
        from ._namespace import namespace

        return namespace

    # -- NumPy functions of blocks -------------------------------------------------

    def map_blocks(
        self,
        func: Callable[..., Any],
        *args: Any,
        dtype: np.dtype | None = None,
        chunks: tuple[int, ...] | None = None,
        drop_axis: int | Sequence[int] | None = None,
        new_axis: int | Sequence[int] | None = None,
        **kwargs: Any,
    ) -> Any:
        """``func`` on blocks of rows (`_blocks.apply_in_blocks`) when it keeps the
        axes, else on whole arrays within the budget."""
        what = f"map_blocks({_blocks._name(func)})"
        for k in ("name", "token", "meta"):
            kwargs.pop(k, None)
        if chunks is not None or drop_axis or new_axis:
            return _blocks.in_memory(func, args, kwargs, what=what)
        return _blocks.apply_in_blocks(func, args, kwargs, what=what)

    def blockwise(
        self,
        func: Callable[..., Any],
        out_ind: Iterable[Any],
        *args: Any,
        dtype: np.dtype | None = None,
        adjust_chunks: dict[Any, Callable[..., Any]] | None = None,
        new_axes: dict[Any, int] | None = None,
        align_arrays: bool = True,
        **kwargs: Any,
    ) -> Any:
        """``func`` on whole arrays within the budget (``args`` alternate arrays and
        their index strings, as in dask)."""
        for k in ("name", "token", "meta", "concatenate"):
            kwargs.pop(k, None)
        arrays = list(args[0::2])
        return _blocks.in_memory(func, arrays, kwargs, what=f"blockwise({_blocks._name(func)})")

    def apply_gufunc(
        self,
        func: Callable[..., Any],
        signature: str,
        *args: Any,
        axes: Sequence[tuple[int, ...]] | None = None,
        axis: int | None = None,
        keepdims: bool = False,
        output_dtypes: Sequence[np.dtype] | None = None,
        output_sizes: dict[str, int] | None = None,
        vectorize: bool | None = None,
        allow_rechunk: bool = False,
        meta: Any = None,
        **kwargs: Any,
    ) -> Any:
        """xarray's ``apply_ufunc(..., dask="parallelized")``: ``func`` on blocks of rows
        over a leading loop axis, else on whole arrays within the budget."""
        if axes is not None or axis is not None or keepdims:
            raise NotImplementedError(
                "gradpipe's apply_gufunc takes no axes=, axis= or keepdims= (xarray moves "
                "core dimensions last itself)."
            )
        inputs, _, outputs = signature.replace(" ", "").partition("->")
        n_out = outputs.count("(") if outputs.startswith("(") and "),(" in outputs else 1
        f = np.vectorize(func, signature=signature, otypes=output_dtypes) if vectorize else func
        what = f"apply_ufunc({_blocks._name(func)})"
        core = [s for s in inputs.split("),(")]
        has_core = any(part.strip("()") for part in core)
        arrays = [a for a in args if getattr(a, "ndim", 0)]
        loop_first = (
            all(
                a.ndim > len([c for c in part.strip("()").split(",") if c])
                for a, part in zip(args, core)
                if getattr(a, "ndim", 0)
            )
            if arrays
            else False
        )
        if has_core and not loop_first:
            return _blocks.in_memory(f, args, kwargs, what=what, n_out=n_out)
        return _blocks.apply_in_blocks(f, args, kwargs, what=what, n_out=n_out)

    def reduction(
        self,
        arr: DiskArray,
        func: Callable[..., Any],
        combine_func: Callable[..., Any] | None = None,
        aggregate_func: Callable[..., Any] | None = None,
        axis: int | Sequence[int] | None = None,
        dtype: np.dtype | None = None,
        keepdims: bool = False,
    ) -> Any:
        """A reduction in chunk/combine/aggregate form, on the whole array within the budget."""

        def whole(x: np.ndarray) -> Any:
            part = func(x, axis=axis, keepdims=True)
            return aggregate_func(part, axis=axis, keepdims=keepdims) if aggregate_func else part

        return _blocks.in_memory(whole, [arr], {}, what=f"reduction({_blocks._name(func)})")

    def scan(
        self,
        func: Callable[..., Any],
        binop: Callable[..., Any],
        ident: float,
        arr: DiskArray,
        axis: int | None = None,
        dtype: np.dtype | None = None,
        **kwargs: Any,
    ) -> Any:
        """A cumulative reduction (``ffill``/``bfill``), on the whole array within the budget."""
        return _blocks.in_memory(
            lambda x: func(x, axis=axis, dtype=dtype),
            [arr],
            {},
            what=f"scan({_blocks._name(func)})",
        )

    def unify_chunks(self, *args: Any, **kwargs: Any) -> tuple[dict[Any, Any], list[Any]]:
        """DiskArrays need no common chunks (operations tile them from the budget):
        ``args`` (arrays and their index strings) are returned as they are."""
        arrays = list(args[0::2])
        chunkss: dict[Any, tuple[int, ...]] = {}
        for a, ind in zip(args[0::2], args[1::2]):
            if ind is None or not hasattr(a, "chunks"):
                continue
            for i, c in zip(ind, a.chunks):
                chunkss.setdefault(i, c)
        return chunkss, arrays


_groupby.install()  # xarray loads this module before it first meets a DiskArray
