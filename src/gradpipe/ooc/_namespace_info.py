"""``gradpipe.ooc.__array_namespace_info__()``: what the namespace supports."""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import DTypeLike

from .arrays._device import DISK, Device, check_device
from .kernels._data_types import isdtype
from .kernels._x64 import default_dtypes
from .storage._constants import DTYPES

__all__ = ["NamespaceInfo", "__array_namespace_info__"]


class NamespaceInfo:
    """The array API's inspection object for `gradpipe.ooc`: one device (the disk),
    ``jax.numpy``'s default dtypes, and no data-dependent shapes or boolean indexing (their
    result size is unknown until the data is read, which JAX's tracing cannot wait
    for)."""

    __module__ = "gradpipe.ooc"

    def capabilities(self) -> dict[str, bool | int]:
        """The optional features: none of boolean indexing or data-dependent shapes."""
        return {"boolean indexing": False, "data-dependent shapes": False, "max dimensions": 64}

    def default_device(self) -> Device:
        """The disk."""
        return DISK

    def devices(self) -> list[Device]:
        """``[the disk]``."""
        return [DISK]

    def default_dtypes(self, *, device: Device | str | None = None) -> dict[str, np.dtype[Any]]:
        """``jax.numpy``'s defaults: float32, complex64, int32 and int32 for indexing
        while ``jax_enable_x64`` is off (JAX's default); float64, complex128, int64
        and int64 while it is on."""
        check_device(device)
        return default_dtypes()

    def dtypes(
        self,
        *,
        device: Device | str | None = None,
        kind: DTypeLike | str | tuple[DTypeLike | str, ...] | None = None,
    ) -> dict[str, np.dtype[Any]]:
        """The supported dtypes by name, those of ``kind`` only when given."""
        check_device(device)
        if kind is None:
            return dict(DTYPES)
        return {name: d for name, d in DTYPES.items() if isdtype(d, kind)}


def __array_namespace_info__() -> NamespaceInfo:
    """The namespace's inspection object (see `NamespaceInfo`)."""
    return NamespaceInfo()
