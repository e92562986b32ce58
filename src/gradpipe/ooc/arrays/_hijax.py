"""Every touch of `jax.experimental.hijax`, for jax 0.10.2 up to 0.12.

`jax.experimental.hijax` renamed its primitive base class inside the supported
range (``VJPHiPrimitive`` up to 0.11.1, ``HiPrim`` from 0.11.2) and changed the
``dce`` signature; this module hides both. It defines:

- `DiskArrayType`, the JAX type of a `DiskArray`: shape and dtype only, lowered
  to one ``int32`` handle (see `_handles`). Cotangents of one array used twice are
  summed by `vspace_add`, which runs the out-of-core ``add``. (A ``custom_vjp``
  with a float marker in place of the array would add the markers instead and
  return a wrong gradient; that is why this is a hijax type.)
- `OocPrim`, the primitive of one out-of-core operation, and `OocBackwardPrim`,
  the primitive of its backward pass. Both expand to host code (`_host`): an
  ordered `io_callback` under tracing, a direct call in eager mode. A 0-d result
  is a JAX value of the dtype ``jnp.asarray`` gives NumPy's (`_x64`: 32 bits for 64
  while x64 is off); its cotangent is widened back to NumPy's dtype on the host,
  so the gradients of 64-bit data are computed in 64 bits.

What JAX's own operators and primitives need to take a DiskArray is in `_jax_hooks`.

vmap, forward-mode differentiation, sharding and scanning over a DiskArray's rows
are refused with a `TypeError` naming the transformation (`_refusals`); so is
differentiating a backward pass (second order).
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import hijax as _hx

from ..execution._driver import Driver
from ..execution._pending import deferred
from ..kernels._promotion import canonical_dtype, is_constant, is_differentiable, operand_dtypes
from ..kernels._x64 import jax_value_dtype
from ..planning._budget import MemoryBudget
from ..planning._chain import is_chain, settle
from ..planning._resident import check_fits, resident_operand, tile_budget
from . import _handles, _refusals
from ._array import (
    DiskArray,
    _forward,
    _is_concrete,
    _reduction,
    _traced_bool,
    _traced_len,
)
from ._host import run_on_host
from ._namespace import namespace

__all__ = [
    "DiskArrayType",
    "OocBackwardPrim",
    "OocPrim",
    "ShapedArray",
    "bind",
    "scalar_type",
    "type_of",
]

# jax >= 0.11.2 names the primitive base `HiPrim`; earlier versions `VJPHiPrimitive`.
# Both call `dce(used_outs)` (old) or `dce(used_outs, live_ins)` (new): see OocPrim.dce.
_PrimBase: Any = getattr(_hx, "HiPrim", None) or _hx.VJPHiPrimitive
ShapedArray = _hx.ShapedArray  # JAX's own array type (`_jax_hooks` teaches its operators)

_refuse_vmap = _refusals.refuse_mapping


# ---------------------------------------------------------------- the type


def _traced(name: str, *, reflected: bool = False):
    """An aval operator method: ``aval._add(tracer, other)`` calls ``ops.add``."""

    def method(self, x, *args):
        op = getattr(namespace().ops, name)
        return op(args[0], x) if reflected else op(x, *args)

    return method


def _traced_divmod(*, reflected: bool = False):
    """``aval._divmod(tracer, other)``: ``(x // other, x % other)``, as `DiskArray`'s."""
    floor_divide = _traced("floor_divide", reflected=reflected)
    remainder = _traced("remainder", reflected=reflected)
    return lambda self, x, *args: (floor_divide(self, x, *args), remainder(self, x, *args))


class DiskArrayType(_hx.HiType):
    """The JAX type of a `DiskArray`: its shape and dtype (the file is not part of it)."""

    def __init__(self, shape, dtype):
        self.shape = tuple(int(n) for n in shape)
        self.dtype = np.dtype(dtype)

    ndim = property(lambda self: len(self.shape))

    @property
    def size(self) -> int:
        """The number of elements (JAX's ``bool(tracer)`` check reads it)."""
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def mat(self):
        """The manual-axis type JAX 0.10 reads from scan carries: the handle's (plain)."""
        return getattr(self.lo_ty()[0], "mat", None)

    weak_type = False
    is_disk_array = True  # how `_host` tells it from a 0-d ShapedArray

    def __hash__(self):
        return hash((DiskArrayType, self.shape, self.dtype))

    def __eq__(self, other):
        return (
            isinstance(other, DiskArrayType)
            and self.shape == other.shape
            and self.dtype == other.dtype
        )

    def __repr__(self):
        return self.str_short()

    def str_short(self, short_dtypes=False, **_) -> str:
        return f"DiskArray{{{self.dtype.name}{list(self.shape)}}}"

    # lowering: one int32 handle
    def lo_ty(self):
        return [_hx.ShapedArray((), jnp.int32)]

    def lower_val(self, hi_val, /):
        _refusals.refuse_checkpoint(self.shape)  # it would not raise its results back
        h = hi_val._handle
        if _is_concrete(h):
            _handles.sweep()  # a new compiled call starts: drop the last one's leftovers
            return [np.int32(h)]
        return [h]

    def raise_val(self, *lo_vals):
        (h,) = lo_vals
        if np.ndim(h) if not isinstance(h, jax.core.Tracer) else h.ndim:
            _refusals.refuse_stacked_handles()
        if isinstance(h, jax.Array) and not isinstance(h, jax.core.Tracer):
            h = int(h)
        return DiskArray._from_handle(h, self.shape, self.dtype)

    # autodiff: a float DiskArray's tangent is a DiskArray of the same type; an int or
    # bool one's is JAX's float0 (no gradient), as for in-memory ints
    def to_tangent_aval(self):
        if is_differentiable(self.dtype):
            return self
        return _hx.ShapedArray(self.shape, jax.dtypes.float0)

    def vspace_zero(self):
        return DiskArray(None, self.shape, self.dtype, _handles.ZERO_HANDLE)

    def vspace_add(self, x, y):
        for a, b in ((x, y), (y, x)):
            h = getattr(a, "_handle", None)  # None for a traced DiskArray
            if h is not None and _is_concrete(h) and int(h) == _handles.ZERO_HANDLE:
                return b
        if not self.shape:  # `add` would give a JAX value, not this type
            return namespace().add_scalar_cotangents(x, y)
        return namespace().ops.add(x, y)

    # vmap / scan
    def dec_rank(self, size, spec):
        _refuse_vmap(f"a DiskArray{list(self.shape)} cannot be mapped over")

    def inc_rank(self, size, spec):
        _refuse_vmap(f"a DiskArray{list(self.shape)} cannot be batched")

    def leading_axis_spec(self):
        _refusals.refuse_scan_over(self.shape)

    # shard_map / pmap
    def shard(self, *args, **kwargs):
        """Refused: a DiskArray cannot be sharded (shard_map, pmap)."""
        _refusals.refuse_sharding(f"a DiskArray{list(self.shape)} cannot be sharded")

    unshard = nospec = shard

    @property
    def sharding(self):
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
    device = _hx.aval_property(lambda self: DiskArray.device.fget(self))
    to_device = _hx.aval_method(DiskArray.to_device)
    update_ = _hx.aval_method(_forward("update_"))
    persist = _hx.aval_method(_forward("persist"))
    sum = _hx.aval_method(_reduction("sum"))
    mean = _hx.aval_method(_reduction("mean"))
    max = _hx.aval_method(_reduction("max"))
    astype = _hx.aval_method(_forward("astype"))


def _refuse_read(what: str):
    raise TypeError(
        f"DiskArray.{what} needs the data, but this DiskArray is being traced by JAX "
        "(inside jax.jit/grad). Return it from the traced function and use it outside."
    )


def _type_of_value(x: DiskArray) -> DiskArrayType:
    if not is_differentiable(x.dtype):
        _refusals.refuse_int_grad_input(x)
    return DiskArrayType(x.shape, x.dtype)


_hx.register_hitype(DiskArray, _type_of_value)


def type_of(x) -> DiskArrayType | None:
    """The `DiskArrayType` of a DiskArray or a traced one; ``None`` for anything else."""
    if isinstance(x, DiskArray):
        return DiskArrayType(x.shape, x.dtype)
    aval = getattr(x, "aval", None)
    return aval if isinstance(aval, DiskArrayType) else None


def as_input(x, dtype, budget: MemoryBudget, what: str):
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


def _in_type(x):
    t = type_of(x)
    return t if t is not None else _hx.ShapedArray(tuple(x.shape), np.dtype(x.dtype))


# ---------------------------------------------------------------- primitives


class _Refusals:
    """vmap and forward-mode refusals shared by both primitives."""

    def batch(self, *args, **kwargs):
        _refuse_vmap(f"{self.op!r} was called under vmap")

    def batch_dim_rule(self, *args, **kwargs):
        _refuse_vmap(f"{self.op!r} was called under vmap")

    def jvp(self, primals, tangents):
        _refusals.refuse_forward_mode(self.op)

    def lin(self, nzs_in, *primals):
        _refusals.refuse_forward_mode(self.op)

    def linearized(self, residuals, *tangents):
        _refusals.refuse_forward_mode(self.op)


def _merge(dynamic, consts, fill):
    """Inputs in call order: ``dynamic`` values with ``consts`` put back in place."""
    out, it = [], iter(dynamic)
    const_at = {pos: (value, dtype) for pos, value, dtype in consts}
    for pos in range(len(dynamic) + len(consts)):
        out.append(fill(*const_at[pos]) if pos in const_at else next(it))
    return out


def scalar_type(dtype):
    """The JAX type of a 0-d value of ``dtype``."""
    return _hx.ShapedArray((), np.dtype(dtype))


def _jax_type(t, what: str):
    """The type JAX holds an output of type ``t`` in: ``t`` for a DiskArray; for an
    in-memory value, a ShapedArray of `jax_value_dtype` (32 bits for 64 while x64 is off)."""
    if isinstance(t, DiskArrayType):
        return t
    return _hx.ShapedArray(tuple(t.shape), jax_value_dtype(t.dtype, what))


def _const_type(value, dtype):
    return scalar_type(dtype)


def _const_value(value, dtype):
    return np.asarray(value, dtype)


class OocPrim(_Refusals, _PrimBase):
    """One call of an out-of-core operation ``op`` on the given input types.

    ``consts`` are Python numbers among the inputs, as ``(position, value, dtype)``:
    they are part of the operation (not traced, not differentiated).
    """

    def __init__(self, op, budget: MemoryBudget, in_types, consts=(), *, backward_of=None):
        self.in_avals = tuple(in_types)
        self.out_aval = _jax_type(op.out_type(*_merge(in_types, consts, _const_type)), op.name)
        self.params = dict(
            op=op, budget=budget, in_types=self.in_avals, consts=consts, backward_of=backward_of
        )
        super().__init__()

    def expand(self, *args):
        op, budget, consts = self.op, self.budget, self.consts

        held_out = 0  # an output held in memory (a parameter's gradient) beside the tiles
        if op.in_memory_output and self.out_aval.shape:
            held_out = math.prod(self.out_aval.shape) * np.dtype(self.out_aval.dtype).itemsize

        def run(vals):
            driver = Driver(tile_budget(budget, vals, out=held_out), op.name, budget)
            vals = _settled(op, driver, vals)
            return op.forward(driver, *_merge(vals, consts, _const_value))

        def host(*vals):
            later = deferred(op, budget, vals, self.out_aval, lambda: run(vals))
            return (run(vals) if later is None else later,)

        (out,) = run_on_host(host, self.in_avals, (self.out_aval,), args)
        return out

    def vjp_fwd(self, nzs_in, *args):
        if self.backward_of is not None:
            _refuse_second_order(self.backward_of)
        # Which inputs need a gradient: kept on this instance (one per call site and
        # trace) because residuals may only hold JAX values.
        self._wants = tuple(
            bool(nz) and is_differentiable(t.dtype) for nz, t in zip(nzs_in, self.in_avals)
        )
        check_fits(self.in_avals, self.budget, self.op.name, backward=True)
        out = self(*args)
        return out, (args, out)

    def vjp_bwd_retval(self, res, g):
        args, out = res
        wants = getattr(self, "_wants", (True,) * len(self.in_avals))
        if isinstance(g, _hx.Zero) or not is_differentiable(self.out_aval.dtype):
            # an int or bool output has no gradient (JAX's float0 cotangent)
            return tuple(_zero_like(t) for t in self.in_avals)
        if type_of(g) is None:  # a 0-d cotangent (jax.vjp takes a Python number too)
            g = jnp.asarray(g, self.out_aval.dtype)
        zeros = self._zero_cotangents(wants)
        if any(zeros):  # pruned as JAX prunes them: symbolic zeros, never computed
            wants = tuple(w and not z for w, z in zip(wants, zeros))
        rule = getattr(self.op, "backward_ops", None)
        if rule is not None and not self.consts:
            with _backward_marker(self.op):
                grads = rule(args, out, g, wants, self.budget)
            return tuple(
                gr if w else _zero_like(t, z)
                for gr, w, t, z in zip(grads, wants, self.in_avals, zeros)
            )
        self.op.check_differentiable(
            _merge(self.in_avals, self.consts, _const_type),
            _merge(wants, self.consts, lambda value, dtype: False),
        )
        if not any(wants):
            return tuple(_zero_like(t, z) for t, z in zip(self.in_avals, zeros))
        prim = OocBackwardPrim(self.op, self.budget, self.in_avals, self.consts, _in_type(g), wants)
        grads = prim(*args, out, g)
        return tuple(
            gr if w else _zero_like(t, z) for gr, w, t, z in zip(grads, wants, self.in_avals, zeros)
        )

    def _zero_cotangents(self, wants) -> tuple[bool, ...]:
        """The inputs whose cotangent the op says is zero whatever the output's."""
        rule = getattr(self.op, "zero_cotangents", None)
        if rule is None or not any(wants):
            return (False,) * len(wants)
        const_pos = {pos for pos, _, _ in self.consts}
        zeros = rule(
            _merge(self.in_avals, self.consts, _const_type),
            _merge(wants, self.consts, lambda value, dtype: False),
        )
        return tuple(z for pos, z in enumerate(zeros) if pos not in const_pos)

    def dce(self, used_outs, *live_ins):
        if getattr(self.op, "has_side_effect", False):
            return True, True, self
        return super().dce(used_outs, *live_ins)


class OocBackwardPrim(_Refusals, _PrimBase):
    """The backward pass of ``op``: input gradients from inputs, output and cotangent."""

    def __init__(self, op, budget, in_types, consts, g_type, wants):
        out_type = _jax_type(op.out_type(*_merge(in_types, consts, _const_type)), op.name)
        self.in_avals = (*in_types, out_type, g_type)
        self.out_aval = tuple(in_types)
        self.params = dict(
            op=op, budget=budget, in_types=tuple(in_types), consts=consts, wants=wants
        )
        super().__init__()

    def expand(self, *args):
        op, budget, consts = self.op, self.budget, self.consts
        n = len(self.in_types)
        const_pos = {pos for pos, _, _ in consts}
        wants = _merge(self.wants, consts, lambda v, d: False)
        out_dtype = op.out_type(*_merge(self.in_types, consts, _const_type)).dtype

        def host(*vals):
            driver = Driver(tile_budget(budget, vals, backward=True), op.name, budget)
            vals = _settled(op, driver, vals)
            inputs = _merge(vals[:n], consts, _const_value)
            g = vals[n + 1]
            if isinstance(g, np.ndarray) and g.dtype != out_dtype:  # a rounded 0-d one
                g = g.astype(out_dtype)
            grads = op.backward(driver, inputs, vals[n], g, wants)
            return [gr for pos, gr in enumerate(grads) if pos not in const_pos]

        return tuple(run_on_host(host, self.in_avals, self.out_aval, args))

    def vjp_fwd(self, nzs_in, *args):
        _refuse_second_order(self.op)


def _settled(op, driver, values):
    """``values`` with the pending results they read computed (`_pending.settle`), and
    chains written first unless ``op`` reads them as they are."""
    settle(values)
    if getattr(op, "reads_through", False):
        return values
    return [v.store(driver).stored if is_chain(v) else v for v in values]


def _refuse_second_order(op):
    raise TypeError(
        f"gradpipe.ooc: differentiating the backward pass of {op!r} (second-order "
        "differentiation, e.g. jax.grad of jax.grad or jax.hessian) is not supported. "
        "Compute second derivatives in memory on a subset, or by finite differences of "
        "the out-of-core gradient."
    )


class _backward_marker:
    """While active, ops bound by a `backward_ops` rule refuse to be differentiated."""

    active: ClassVar[list] = []

    def __init__(self, op):
        self.op = op

    def __enter__(self):
        _backward_marker.active.append(self.op)

    def __exit__(self, *exc):
        _backward_marker.active.pop()


def current_backward_of():
    """The op whose backward rule is running (its ops refuse second order), or None."""
    return _backward_marker.active[-1] if _backward_marker.active else None


def _zero_like(t, symbolic: bool = False):
    """A zero cotangent for an input of type ``t``: JAX's symbolic zero where asked
    (nothing upstream runs for it), else a zero value."""
    if symbolic:
        return _hx.Zero(t.to_tangent_aval())
    if isinstance(t, DiskArrayType):
        if not is_differentiable(t.dtype):  # float0: JAX's no-gradient type
            return np.zeros(t.shape, jax.dtypes.float0)
        return t.vspace_zero()
    return jnp.zeros(t.shape, t.dtype)


def bind(op, budget: MemoryBudget, *args):
    """Apply ``op`` to ``args``: DiskArrays (traced or not), 0-d JAX values, numbers."""
    consts, dynamic = [], []
    for pos, (a, dtype) in enumerate(zip(args, operand_dtypes(args, type_of, op.name))):
        if is_constant(a):
            consts.append((pos, np.asarray(a, dtype).item(), dtype.str))
        else:
            dynamic.append(as_input(a, dtype, budget, op.name))
    in_types = tuple(_in_type(a) for a in dynamic)
    check_fits(in_types, budget, op.name)
    prim = OocPrim(
        op,
        budget,
        in_types,
        tuple(consts),
        backward_of=current_backward_of(),
    )
    return prim(*dynamic)
