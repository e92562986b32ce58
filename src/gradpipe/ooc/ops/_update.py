"""In-place update: write new values into an existing DiskArray's file."""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Any, NoReturn, Protocol, cast

import numpy as np

from ..arrays._array import ArrayLike, Result
from ..arrays._hijax import type_of
from ..arrays._op import CustomOp, apply, frozen
from ..execution._driver import Driver, Value
from ..kernels._promotion import operand_dtypes
from ..planning._array_file import ArrayFile
from ..planning._chain import is_chain
from ..planning._chain_readers import settle_readers
from ..storage._paged_file import Region
from ._arg_types import BudgetLike

__all__ = ["update_"]


class _Writable(ArrayFile, Protocol):
    """A file ``update_`` writes into (a `PagedFile`, a zarr or HDF5 dataset, ...)."""

    def write(self, region: Region | None, data: np.ndarray) -> None: ...

    def rewriting(self) -> AbstractContextManager[Any]: ...


@frozen
class Update(CustomOp):
    """Copy ``value`` (same shape, or a scalar) into ``target``'s file; returns ``target``."""

    has_side_effect = True
    reads_through = True  # the value is read once, region by region

    @property
    def name(self) -> str:
        return "update_"

    def output_shape(self, st: tuple[int, ...], sv: tuple[int, ...]) -> tuple[int, ...]:
        return st

    def output_dtype(self, dt: np.dtype, dv: np.dtype) -> np.dtype:
        return dt

    def forward(self, driver: Driver, target: Value, value: Value) -> Value:
        if is_chain(target):  # a fused result: written first, then overwritten
            target.store(driver)
        settle_readers(target, driver)
        if not hasattr(target, "write") or not getattr(target, "writable", True):
            raise TypeError(
                "update_: the target DiskArray is read-only (opened without writable=True, "
                "or a constant with no file, such as the gradient of a full sum). Open it "
                "with DiskArray.open(path, writable=True), or copy it with DiskArray.save."
            )
        if value is target:
            return target
        file = cast(_Writable, target)  # it writes (above)
        with file.rewriting():  # a named file: entirely old or new after a kill
            rows = max(1, driver.budget.nbytes // 4 // max(1, _row_bytes(target)))
            for start in range(0, max(target.shape[0], 1) if target.shape else 1, rows):
                if not target.shape:
                    file.write(None, driver.read(value, None))
                    break
                r = (
                    slice(start, min(start + rows, target.shape[0])),
                    *(slice(0, n) for n in target.shape[1:]),
                )
                block = driver.read(value, r if getattr(value, "shape", ()) else None)
                file.write(r, np.asarray(block, target.dtype))
        return target

    def backward(
        self,
        driver: Driver,
        inputs: Sequence[Value],
        output: Value,
        g: Value,
        wants: Sequence[bool],
    ) -> NoReturn:
        raise TypeError(
            "update_ is not differentiable; apply it outside the differentiated function."
        )


def _row_bytes(f: Value) -> int:
    return int(np.prod(f.shape[1:], dtype=np.int64)) * f.dtype.itemsize


def update_(target: ArrayLike, value: ArrayLike, *, budget: BudgetLike = None) -> Result:
    """Write ``value`` into ``target``'s file and return the updated array.

    Under `jax.jit` this is how a training step writes new weights to disk and
    reuses one compiled executable: ``w = step(w)`` with ``step`` returning
    ``update_(w, w - lr * g)``. Use the returned array afterwards; it shares the
    file with ``target``. Not differentiable.

    **Arguments:**

    - `target`: a writable `DiskArray`.
    - `value`: a `DiskArray` of the same shape, or a scalar, whose dtype casts to the
      target's under NumPy's ``same_kind`` rule (as ``np.copyto``): float64 into
      float32 is written, float into int is refused with a `TypeError`.
    """
    tt, tv = type_of(target), type_of(value)
    if tt is None:
        raise TypeError(
            f"update_(target, value): target must be a DiskArray, got {type(target).__name__}."
        )
    if tv is not None and (tv.shape != tt.shape):
        raise ValueError(f"update_: value has shape {tv.shape}, target has shape {tt.shape}.")
    # NumPy's np.copyto rule: a cast within a kind (float64 into float32) is made, one
    # across kinds (float into int, complex into float) would lose values silently
    _, dv = operand_dtypes((target, value), type_of, "update_")
    if not np.can_cast(dv, tt.dtype, casting="same_kind"):
        raise TypeError(
            f"update_: cannot write {dv.name} values into a {tt.dtype.name} DiskArray "
            "(NumPy's 'same_kind' rule, as np.copyto); convert explicitly first, e.g. "
            f"ooc.astype(value, '{tt.dtype.name}')."
        )
    return apply(Update(), target, value, budget=budget)
