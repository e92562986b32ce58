"""The array namespace xarray's chunk-manager code calls: `gradpipe.ooc`, with the
creation functions also taking dask's ``chunks=`` (``xr.full_like(x)``,
``zeros_like``, ``ones_like`` of chunked data call ``full(shape, value, dtype=,
chunks=)``). A DiskArray's pages are planned from the budget, so ``chunks`` is
accepted and not needed."""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any

__all__ = ["namespace"]


def _without_chunks(name: str) -> Callable[..., Any]:
    def fn(*args: Any, chunks: object = None, **kwargs: Any) -> Any:
        from gradpipe import ooc

        return getattr(ooc, name)(*args, **kwargs)

    fn.__name__ = name
    fn.__doc__ = f"`gradpipe.ooc.{name}`; ``chunks`` (dask's) is accepted and not needed."
    return fn


class _Namespace(types.ModuleType):
    def __getattr__(self, name: str) -> Any:
        from gradpipe import ooc

        return getattr(ooc, name)


namespace = _Namespace("gradpipe.ooc", "gradpipe.ooc for xarray's chunk manager")
for _name in ("full", "zeros", "ones", "empty", "arange"):
    setattr(namespace, _name, _without_chunks(_name))
