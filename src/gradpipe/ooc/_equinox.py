"""Equinox's array filters count a `DiskArray` (concrete or traced) as an array.

`eqx.filter_grad`, `eqx.filter_value_and_grad`, `eqx.filter_jit` and
`eqx.partition(..., eqx.is_array)` decide what is an array with
`eqx.is_array`/`eqx.is_inexact_array`, which know only NumPy and JAX arrays. A
`DiskArray` is neither (`jax.Array` cannot register virtual subclasses, and a
`DiskArray` passed off as one would reach `jax.numpy` functions that cannot read
it), so equinox would treat DiskArray weights as static: `eqx.filter_grad` would
return `None` for them and a training loop would train nothing, without a word.

`install()` adds one class to the tuples of array types those filters check. Its
`isinstance` is true exactly for a `DiskArray` and a JAX tracer of one, which both
have NumPy-style ``shape`` and ``dtype``, so the filters' dtype tests
(``np.issubdtype(x.dtype, np.inexact)``) give the right answer: a float or complex
`DiskArray` is differentiated, an int or bool one is not, as for JAX arrays.

If a future equinox checks arrays some other way, `install` raises an
`ImportError` saying so rather than letting `eqx.filter_grad` drop DiskArrays.
"""

from __future__ import annotations

from typing import Any

__all__ = ["DiskArrayLike", "install"]


class _DiskArrayLikeMeta(type):
    def __instancecheck__(cls, x: Any) -> bool:
        from .arrays._hijax import type_of

        return type_of(x) is not None


class DiskArrayLike(metaclass=_DiskArrayLikeMeta):
    """``isinstance(x, DiskArrayLike)``: ``x`` is a `DiskArray` or a traced one."""


# equinox._filters globals read by is_array / is_array_like / is_inexact_array(_like)
_TUPLES = ("_NDARRAY_TYPES", "_ARRAY_TYPES", "_ARRAY_LIKE_TYPES")


def install() -> None:
    """Make equinox's array filters count DiskArrays (idempotent; a no-op without equinox)."""
    try:
        from equinox import _filters
    except ImportError:  # equinox not installed: nothing to teach
        return
    missing = [name for name in _TUPLES if not isinstance(getattr(_filters, name, None), tuple)]
    if missing:
        raise ImportError(
            "gradpipe.ooc cannot teach this equinox version "
            f"({getattr(__import__('equinox'), '__version__', '?')}) that a DiskArray is an "
            f"array (equinox._filters has no {', '.join(missing)}), so eqx.filter_grad "
            "would silently give None for DiskArray weights. Install equinox 0.13.x "
            "(pip install 'equinox>=0.13,<0.14')."
        )
    for name in _TUPLES:
        types = getattr(_filters, name)
        if DiskArrayLike not in types:
            setattr(_filters, name, (*types, DiskArrayLike))
