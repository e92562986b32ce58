"""Functions of NumPy blocks for xarray: ``map_blocks``, ``apply_gufunc``, ``reduction``.

xarray hands a chunk manager arbitrary functions of NumPy arrays for what it has no
array-API form of (``apply_ufunc(..., dask="parallelized")``, some accessors,
chunked reductions with their own combine step). They run eagerly, on the host:

- **Streamed by blocks of rows** when the first axis is a loop axis (not consumed
  by the function): each block of rows of the inputs (a size-1 first axis is
  broadcast) goes through the function and its rows are written to the outputs,
  new DiskArrays. Memory: a few blocks, sized from the budget.
- **In memory within the budget** otherwise (the function needs whole axes):
  the inputs are read whole when together they fit, and refused with a
  `MemoryError` naming the function above it (`_load.check_fits`).

Neither is differentiable, and neither runs on arrays traced by JAX: they refuse
with a `TypeError` saying so. Write the computation with xarray's operations or
the `gradpipe.ooc` namespace to differentiate it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ..arrays._array import DiskArray, _is_concrete
from ..arrays._array_files import _new_file
from ..planning._budget import MemoryBudget, get_budget
from ..storage._paged_file import PagedFile
from ._load import check_fits

__all__ = ["apply_in_blocks", "in_memory"]


def _name(func: Callable[..., Any]) -> str:
    inner = getattr(func, "func", func)  # functools.partial
    return getattr(inner, "__name__", type(inner).__name__)


def _check_concrete(args: Sequence[Any], what: str) -> None:
    for a in args:
        if isinstance(a, DiskArray) and not _is_concrete(a._handle):
            raise TypeError(
                f"{what} runs a NumPy function on blocks of the data, which JAX cannot trace "
                "(inside jax.jit/grad). Write it with xarray's operations or gradpipe.ooc "
                "functions, which are traced and differentiated."
            )


def _as_outputs(result: Any, n_out: int) -> list[Any]:
    return list(result) if n_out > 1 else [result]


def in_memory(
    func: Callable[..., Any],
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
    *,
    what: str,
    n_out: int = 1,
    budget: MemoryBudget | int | str | None = None,
) -> Any:
    """``func(*args, **kwargs)`` with the DiskArrays among ``args`` read whole (within
    the budget, else refused naming ``what``); array results become DiskArrays."""
    _check_concrete(args, what)
    disk = [a for a in args if isinstance(a, DiskArray)]
    check_fits(disk, what, budget)
    loaded = [a.to_numpy(force=True) if isinstance(a, DiskArray) else a for a in args]
    outs = _as_outputs(func(*loaded, **kwargs), n_out)
    wrapped = [_to_disk(np.asarray(o), budget) for o in outs]
    return tuple(wrapped) if n_out > 1 else wrapped[0]


def _to_disk(a: np.ndarray, budget: MemoryBudget | int | str | None) -> DiskArray | np.ndarray:
    return DiskArray.from_numpy(a, budget=budget) if a.ndim and a.dtype.kind in "biufc" else a


def _rows(a: Any, lo: int, hi: int, n: int) -> Any:
    if not isinstance(a, (DiskArray, np.ndarray)) or getattr(a, "ndim", 0) == 0:
        return a
    if a.shape[0] != n:  # a broadcast (size-1) first axis
        return a.to_numpy(force=True) if isinstance(a, DiskArray) else a
    if isinstance(a, DiskArray):
        region = (slice(lo, hi), *(slice(0, s) for s in a.shape[1:]))
        return a._concrete_file("a block function").read(region)
    return a[lo:hi]


def _streamable(args: Sequence[Any]) -> int | None:
    """The length of the first axis the array arguments share (others size 1), or None."""
    arrays = [a for a in args if isinstance(a, (DiskArray, np.ndarray)) and a.ndim]
    if not arrays or not any(isinstance(a, DiskArray) for a in arrays):
        return None
    n = max(a.shape[0] for a in arrays)
    if any(a.shape[0] not in (1, n) for a in arrays) or n <= 1:
        return None
    if len({a.ndim for a in arrays}) != 1:
        return None
    return n


def apply_in_blocks(
    func: Callable[..., Any],
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
    *,
    what: str,
    n_out: int = 1,
    budget: MemoryBudget | int | str | None = None,
) -> Any:
    """``func`` applied to blocks of rows of ``args`` when the first axis is shared
    (see the module), else `in_memory`. ``func`` must treat rows independently
    (what a chunked map over a loop axis promises)."""
    _check_concrete(args, what)
    n = _streamable(args)
    if n is None:
        return in_memory(func, args, kwargs, what=what, n_out=n_out, budget=budget)
    b = get_budget(budget)
    row_bytes = sum(
        math.prod(a.shape[1:]) * a.dtype.itemsize
        for a in args
        if isinstance(a, (DiskArray, np.ndarray)) and a.ndim and a.shape[0] == n
    )
    step = max(1, b.nbytes // (4 * max(row_bytes, 1)))
    files: list[PagedFile] | None = None
    try:
        for lo in range(0, n, step):
            hi = min(n, lo + step)
            outs = [
                np.asarray(o)
                for o in _as_outputs(func(*(_rows(a, lo, hi, n) for a in args), **kwargs), n_out)
            ]
            if any(o.ndim == 0 or o.shape[0] != hi - lo for o in outs):
                for f in files or ():
                    f.discard()
                files = None
                return in_memory(func, args, kwargs, what=what, n_out=n_out, budget=budget)
            if files is None:
                files = [_new_file((n, *o.shape[1:]), o.dtype, None, None, b) for o in outs]
            for f, o in zip(files, outs):
                f.write((slice(lo, hi), *(slice(0, s) for s in o.shape[1:])), o)
    except BaseException:
        for f in files or ():
            f.discard()
        raise
    assert files is not None  # n > 1: the loop ran at least once
    results = [DiskArray._wrap(f.commit()) for f in files]
    return tuple(results) if n_out > 1 else results[0]
