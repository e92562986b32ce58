"""Every touch of `jax.experimental.hijax`, for jax 0.10.2 up to 0.12.

`jax.experimental.hijax` renamed its primitive base class inside the supported
range (``VJPHiPrimitive`` up to 0.11.1, ``HiPrim`` from 0.11.2) and changed the
``dce`` signature; this module hides both. It defines:

- `DiskArrayType`, the JAX type of a `DiskArray`: shape and dtype only, lowered
  to one ``int32`` handle (see `_handles`). Cotangents of one array used twice are
  summed by `vspace_add`, which runs the out-of-core ``add``. (A ``custom_vjp``
  with a float marker in place of the array would add the markers instead and
  return a wrong gradient; that is why this is a hijax type.)
- `PrimBase`, `ShapedArray` and `Zero`: the primitive base class, JAX's array type
  and its symbolic zero, under this version's names, for `_primitives` (`OocPrim`,
  the primitive of one out-of-core operation, and `OocBackwardPrim`, that of its
  backward pass).

What JAX's own operators and primitives need to take a DiskArray is in `_jax_hooks`.

vmap, forward-mode differentiation, sharding and scanning over a DiskArray's rows
are refused with a `TypeError` naming the transformation (`_refusals`); so is
differentiating a backward pass (second order).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NoReturn

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import hijax as _hx
from numpy.typing import DTypeLike

from ..execution._compute_device import in_callback
from ..kernels._promotion import canonical_dtype, is_differentiable
from ..planning._budget import MemoryBudget
from ..planning._resident import resident_operand
from . import _handles, _refusals
from ._array import DiskArray, _is_concrete
from ._device import DISK
from ._forwarding import _forward, _reduction
from ._namespace import namespace

__all__ = [
    "DiskArrayType",
    "PrimBase",
    "ShapedArray",
    "Zero",
    "as_input",
    "in_type",
    "scalar_type",
    "type_of",
]

# jax >= 0.11.2 names the primitive base `HiPrim`; earlier versions `VJPHiPrimitive`.
# Both call `dce(used_outs)` (old) or `dce(used_outs, live_ins)` (new): see
# `_primitives.OocPrim.dce`.
PrimBase: Any = getattr(_hx, "HiPrim", None) or _hx.VJPHiPrimitive
ShapedArray = _hx.ShapedArray  # JAX's own array type (`_jax_hooks` teaches its operators)
Zero = _hx.Zero  # JAX's symbolic zero (cotangent)

_refuse_vmap = _refusals.refuse_mapping


# ---------------------------------------------------------------- the type


def _traced(name: str, *, reflected: bool = False) -> Callable[..., Any]:
    """An aval operator method: ``aval._add(tracer, other)`` calls ``ops.add``."""

    def method(self: DiskArrayType, x: Any, *args: Any) -> Any:
        op = getattr(namespace().ops, name)
        return op(args[0], x) if reflected else op(x, *args)

    return method


def _traced_divmod(*, reflected: bool = False) -> Callable[..., tuple[Any, Any]]:
    """``aval._divmod(tracer, other)``: ``(x // other, x % other)``, as `DiskArray`'s."""
    floor_divide = _traced("floor_divide", reflected=reflected)
    remainder = _traced("remainder", reflected=reflected)
    return lambda self, x, *args: (floor_divide(self, x, *args), remainder(self, x, *args))


# `DiskArrayType` methods: what `==`, `!=`, `bool()` and `len()` do to a traced DiskArray


def _traced_bool(aval: DiskArrayType, x: Any) -> NoReturn:
    raise TypeError(
        f"bool() of a traced DiskArray{list(aval.shape)}: its values are not known while "
        "JAX traces (inside jax.jit/grad). Use lax.cond on a 0-d result, or return the "
        "array and test it outside."
    )


def _traced_len(aval: DiskArrayType, x: Any) -> int:
    if not aval.shape:
        raise TypeError("len() of a 0-d DiskArray (it has no length).")
    return aval.shape[0]


def _settle_calls() -> None:
    """Wait until the compiled calls already dispatched have run their host
    callbacks. On an accelerator a call returns before its program has run, and a
    `DiskArray` it returns can name a file that its callbacks have yet to write (an
    `update_`'s target: its handle is the argument's own, ready at once); sweeping
    then would release the files those callbacks are about to read. A callback's
    own thread does not wait (it would wait for itself)."""
    if not in_callback():
        jax.effects_barrier()


class DiskArrayType(_hx.HiType):
    """The JAX type of a `DiskArray`: its shape and dtype (the file is not part of it)."""

    def __init__(self, shape: Sequence[int], dtype: DTypeLike):
        self.shape: tuple[int, ...] = tuple(int(n) for n in shape)
        self.dtype: np.dtype[Any] = np.dtype(dtype)

    ndim = property(lambda self: len(self.shape))

    @property
    def size(self) -> int:
        """The number of elements (JAX's ``bool(tracer)`` check reads it)."""
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def mat(self) -> Any:
        """The manual-axis type JAX 0.10 reads from scan carries: the handle's (plain)."""
        return getattr(self.lo_ty()[0], "mat", None)

    weak_type = False
    is_disk_array = True  # how `_host` tells it from a 0-d ShapedArray

    def __hash__(self) -> int:
        return hash((DiskArrayType, self.shape, self.dtype))

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, DiskArrayType)
            and self.shape == other.shape
            and self.dtype == other.dtype
        )

    def __repr__(self) -> str:
        return self.str_short()

    def str_short(self, short_dtypes: bool = False, mesh_axis_types: bool = False, **_: Any) -> str:
        return f"DiskArray{{{self.dtype.name}{list(self.shape)}}}"

    # lowering: one int32 handle
    def lo_ty(self) -> list[jax.core.AbstractValue]:
        return [_hx.ShapedArray((), jnp.int32)]

    def lower_val(self, hi_val: DiskArray, /) -> list[Any]:
        _refusals.refuse_checkpoint(self.shape)  # it would not raise its results back
        h = hi_val._handle
        if _is_concrete(h):
            _settle_calls()
            _handles.sweep()  # a new compiled call starts: drop the last one's leftovers
            return [np.int32(h)]
        return [h]

    def raise_val(self, *lo_vals: Any) -> DiskArray:
        (h,) = lo_vals
        if np.ndim(h) if not isinstance(h, jax.core.Tracer) else h.ndim:
            _refusals.refuse_stacked_handles()
        if isinstance(h, jax.Array) and not isinstance(h, jax.core.Tracer):
            _settle_calls()  # (the handle may be ready before the file's values are)
            h = int(h)
        return DiskArray._from_handle(h, self.shape, self.dtype)

    # autodiff: a float DiskArray's tangent is a DiskArray of the same type; an int or
    # bool one's is JAX's float0 (no gradient), as for in-memory ints
    def to_tangent_aval(self) -> DiskArrayType | ShapedArray:  # type: ignore[override]  # int: float0
        if is_differentiable(self.dtype):
            return self
        return _hx.ShapedArray(self.shape, jax.dtypes.float0)

    def vspace_zero(self) -> DiskArray:
        return DiskArray(None, self.shape, self.dtype, _handles.ZERO_HANDLE)

    def vspace_add(self, x: Any, y: Any) -> Any:
        for a, b in ((x, y), (y, x)):
            h = getattr(a, "_handle", None)  # None for a traced DiskArray
            if h is not None and _is_concrete(h) and int(h) == _handles.ZERO_HANDLE:
                return b
        return namespace().add_cotangents(x, y)

    # vmap / scan
    def dec_rank(self, size: int | None, spec: Any) -> NoReturn:
        _refuse_vmap(f"a DiskArray{list(self.shape)} cannot be mapped over")

    def inc_rank(self, size: int | None, spec: Any) -> NoReturn:
        _refuse_vmap(f"a DiskArray{list(self.shape)} cannot be batched")

    def leading_axis_spec(self) -> NoReturn:
        _refusals.refuse_scan_over(self.shape)

    # shard_map / pmap
    def shard(self, *args: Any, **kwargs: Any) -> NoReturn:
        """Refused: a DiskArray cannot be sharded (shard_map, pmap)."""
        _refusals.refuse_sharding(f"a DiskArray{list(self.shape)} cannot be sharded")

    unshard = nospec = shard

    @property
    def sharding(self) -> NoReturn:
        """Refused under jacfwd/jacrev/shard_map, which read it; absent elsewhere."""
        _refusals.refuse_sharding_spec(self.shape)

    # operators on traced DiskArrays: jax calls `aval._add(tracer, other)`
    _matmul = _traced("matmul")
    _rmatmul = _traced("matmul", reflected=True)
    _add = _traced("add")
    _radd = _traced("add", reflected=True)
    _sub = _traced("subtract")
    _rsub = _traced("subtract", reflected=True)
    _mul = _traced("multiply")
    _rmul = _traced("multiply", reflected=True)
    _truediv = _traced("divide")
    _rtruediv = _traced("divide", reflected=True)
    _floordiv = _traced("floor_divide")
    _rfloordiv = _traced("floor_divide", reflected=True)
    _mod = _traced("remainder")
    _rmod = _traced("remainder", reflected=True)
    _divmod = _traced_divmod()
    _rdivmod = _traced_divmod(reflected=True)
    _pow = _traced("pow")
    _rpow = _traced("pow", reflected=True)
    _and = _traced("bitwise_and")
    _rand = _traced("bitwise_and", reflected=True)
    _or = _traced("bitwise_or")
    _ror = _traced("bitwise_or", reflected=True)
    _xor = _traced("bitwise_xor")
    _rxor = _traced("bitwise_xor", reflected=True)
    _lshift = _traced("bitwise_left_shift")
    _rlshift = _traced("bitwise_left_shift", reflected=True)
    _rshift = _traced("bitwise_right_shift")
    _rrshift = _traced("bitwise_right_shift", reflected=True)
    _neg = _traced("negative")
    _pos = _traced("positive")
    _abs = _traced("abs")
    _invert = _traced("bitwise_invert")
    _eq = _traced("equal")
    _ne = _traced("not_equal")
    _lt = _traced("less")
    _le = _traced("less_equal")
    _gt = _traced("greater")
    _ge = _traced("greater_equal")
    _getitem = _traced("getitem")
    _setitem = staticmethod(_refusals.refuse_traced)

    # bool() and len() of a traced DiskArray: as for a concrete one
    _bool, _len = _traced_bool, _traced_len
    to_numpy = _hx.aval_method(lambda self, *a, **k: _refuse_read("to_numpy()"))
    save = _hx.aval_method(lambda self, *a, **k: _refuse_read("save()"))
    T = _hx.aval_property(_forward("transpose"))
    mT = _hx.aval_property(_forward("matrix_transpose"))
    __array_namespace__ = _hx.aval_method(DiskArray.__array_namespace__)
    device = _hx.aval_property(lambda self: DISK)
    to_device = _hx.aval_method(DiskArray.to_device)
    update_ = _hx.aval_method(_forward("update_"))
    persist = _hx.aval_method(_forward("persist"))
    sum = _hx.aval_method(_reduction("sum"))
    mean = _hx.aval_method(_reduction("mean"))
    max = _hx.aval_method(_reduction("max"))
    astype = _hx.aval_method(_forward("astype"))


def _refuse_read(what: str) -> NoReturn:
    raise TypeError(
        f"DiskArray.{what} needs the data, but this DiskArray is being traced by JAX "
        "(inside jax.jit/grad). Return it from the traced function and use it outside."
    )


def _type_of_value(x: DiskArray) -> DiskArrayType:
    if not is_differentiable(x.dtype):
        _refusals.refuse_int_grad_input(x)
    return DiskArrayType(x.shape, x.dtype)


_hx.register_hitype(DiskArray, _type_of_value)


def type_of(x: object) -> DiskArrayType | None:
    """The `DiskArrayType` of a DiskArray or a traced one; ``None`` for anything else."""
    if isinstance(x, DiskArray):
        return DiskArrayType(x.shape, x.dtype)
    aval = getattr(x, "aval", None)
    return aval if isinstance(aval, DiskArrayType) else None


def as_input(x: Any, dtype: np.dtype[Any], budget: MemoryBudget, what: str) -> Any:
    """``x`` as an operation input of NumPy's ``dtype``: a DiskArray (or traced one),
    a 0-d JAX value (of the dtype JAX holds: a weak value NumPy would widen stays
    32-bit while x64 is off), or an in-memory array held resident (`_resident`)."""
    if type_of(x) is not None:
        return x
    if jnp.issubdtype(dtype, jnp.inexact) and not is_differentiable(dtype):
        raise TypeError(
            f"{what}: {np.dtype(dtype).name} operands are not supported by gradpipe.ooc "
            "(its kernels compute in NumPy's floating dtypes, and the gradient would be "
            "lost); cast first, e.g. x.astype(jnp.float32)."
        )
    ndim = x.ndim if isinstance(x, jax.core.Tracer) else np.ndim(x)
    if ndim:
        held = resident_operand(x, dtype, budget, what)
        return DiskArray.from_numpy(np.asarray(x, dtype)) if held is None else held
    return jnp.asarray(x, dtype=canonical_dtype(dtype))


def in_type(x: Any) -> DiskArrayType | ShapedArray:
    """The JAX type of an operation input: a `DiskArrayType`, or a `ShapedArray`."""
    t = type_of(x)
    return t if t is not None else _hx.ShapedArray(tuple(x.shape), np.dtype(x.dtype))


def scalar_type(dtype: DTypeLike) -> ShapedArray:
    """The JAX type of a 0-d value of ``dtype``."""
    return _hx.ShapedArray((), np.dtype(dtype))
