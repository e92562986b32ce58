"""The primitives of out-of-core operations: `OocPrim` and `OocBackwardPrim`.

`OocPrim` is one call of an out-of-core operation, `OocBackwardPrim` its backward
pass; `bind` applies an operation to its arguments. Both expand to host code
(`_host`): an ordered `io_callback` under tracing, a direct call in eager mode. A
0-d result is a JAX value of the dtype ``jnp.asarray`` gives NumPy's (`_x64`: 32
bits for 64 while x64 is off); its cotangent is widened back to NumPy's dtype on the
host, so the gradients of 64-bit data are computed in 64 bits. Their base class and
JAX's names come from `_hijax`, the one module that touches `jax.experimental.hijax`.

An operation (``op``) is a `BlockParallelOp` or `CustomOp` of `_op`, which imports
this module: it is typed `Any` here.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, NoReturn, TypeAlias, TypeVar

import jax
import jax.numpy as jnp
import numpy as np

from ..execution import _deferred_cotangents as deferred_cotangents
from ..execution import _one_pass as one_pass
from ..execution._driver import Driver
from ..execution._pending import deferred
from ..kernels._promotion import canonical_dtype, is_constant, is_differentiable, operand_dtypes
from ..kernels._x64 import jax_value_dtype
from ..planning._budget import MemoryBudget
from ..planning._chain import is_chain
from ..planning._chain_readers import settle
from ..planning._resident import check_fits, tile_budget
from . import _kept_residuals as kept_residuals
from . import _refusals
from ._hijax import (
    DiskArrayType,
    PrimBase,
    ShapedArray,
    Zero,
    as_input,
    in_type,
    scalar_type,
    type_of,
)
from ._host import run_on_host

__all__ = ["OocBackwardPrim", "OocPrim", "bind", "current_backward_of"]

#: The JAX type of an operation input: a DiskArray's, or an in-memory value's.
InType: TypeAlias = "DiskArrayType | ShapedArray"
#: Python numbers among an operation's inputs, as ``(position, value, dtype)``.
Consts: TypeAlias = "Sequence[tuple[int, Any, str]]"

_T = TypeVar("_T")
_tokens = itertools.count(1)  # names a loss's call site for its one-pass gradient
_refuse_vmap = _refusals.refuse_mapping


class _Refusals:
    """vmap and forward-mode refusals shared by both primitives."""

    op: Any

    def batch(self, *args: Any, **kwargs: Any) -> NoReturn:
        _refuse_vmap(f"{self.op!r} was called under vmap")

    def batch_dim_rule(self, *args: Any, **kwargs: Any) -> NoReturn:
        _refuse_vmap(f"{self.op!r} was called under vmap")

    def jvp(self, primals: Any, tangents: Any) -> NoReturn:
        _refusals.refuse_forward_mode(self.op)

    def lin(self, nzs_in: Any, *primals: Any) -> NoReturn:
        _refusals.refuse_forward_mode(self.op)

    def linearized(self, residuals: Any, *tangents: Any) -> NoReturn:
        _refusals.refuse_forward_mode(self.op)


def _merge(dynamic: Sequence[_T], consts: Consts, fill: Callable[[Any, str], _T]) -> list[_T]:
    """Inputs in call order: ``dynamic`` values with ``consts`` put back in place."""
    out: list[_T] = []
    it = iter(dynamic)
    const_at = {pos: (value, dtype) for pos, value, dtype in consts}
    for pos in range(len(dynamic) + len(consts)):
        out.append(fill(*const_at[pos]) if pos in const_at else next(it))
    return out


def _jax_type(t: Any, what: str) -> DiskArrayType | ShapedArray:
    """The type JAX holds an output of type ``t`` in: ``t`` for a DiskArray; for an
    in-memory value, a ShapedArray of `jax_value_dtype` (32 bits for 64 while x64 is off)."""
    if isinstance(t, DiskArrayType):
        return t
    return ShapedArray(tuple(t.shape), jax_value_dtype(t.dtype, what))


def _const_type(value: Any, dtype: str) -> ShapedArray:
    return scalar_type(dtype)


def _const_value(value: Any, dtype: str) -> np.ndarray:
    return np.asarray(value, dtype)


class OocPrim(_Refusals, PrimBase):
    """One call of an out-of-core operation ``op`` on the given input types.

    ``consts`` are Python numbers among the inputs, as ``(position, value, dtype)``:
    they are part of the operation (not traced, not differentiated).
    """

    def __init__(
        self,
        op: Any,
        budget: MemoryBudget,
        in_types: Sequence[InType],
        consts: Consts = (),
        *,
        backward_of: Any = None,
        one_pass: int | None = None,
    ):
        self.in_avals = tuple(in_types)
        self.out_aval = _jax_type(op.out_type(*_merge(in_types, consts, _const_type)), op.name)
        self.params = dict(
            op=op,
            budget=budget,
            in_types=self.in_avals,
            consts=consts,
            backward_of=backward_of,
            one_pass=one_pass,
        )
        super().__init__()

    def expand(self, *args: Any) -> Any:
        op, budget, consts = self.op, self.budget, self.consts

        held_out = 0  # an output held in memory (a parameter's gradient) beside the tiles
        if op.in_memory_output and self.out_aval.shape:
            held_out = math.prod(self.out_aval.shape) * np.dtype(self.out_aval.dtype).itemsize

        token = self.one_pass

        def run(vals: Sequence[Any]) -> Any:
            driver = Driver(tile_budget(budget, vals, out=held_out), op.name, budget)
            wants = getattr(self, "_wants", None)  # set where JAX differentiates it
            if wants is not None:
                driver.differentiated = tuple(_merge(wants, consts, lambda v, d: False))
            if token is not None:  # the loss of a gradient: its pass computes that too
                value = one_pass.forward(driver, op, vals[0], token)
                if value is not None:
                    return value
            vals = _settled(op, driver, vals)
            return op.forward(driver, *_merge(vals, consts, _const_value))

        def host(*vals: Any) -> tuple[Any]:
            if getattr(op, "gradient_of", None) is not None:  # a product's gradient
                done = deferred_cotangents.product_gradient(Driver(budget, op.name), op, vals)
                if done is not None:  # computed by its loss's pass (`_one_pass`)
                    return (done,)
            later = (
                None
                if token is not None
                else deferred(op, budget, vals, self.out_aval, lambda: run(vals))
            )
            return (run(vals) if later is None else later,)

        (out,) = run_on_host(host, self.in_avals, (self.out_aval,), args)
        return out

    def vjp_fwd(self, nzs_in: Sequence[bool], *args: Any) -> tuple[Any, Any]:
        if self.backward_of is not None:
            _refuse_second_order(self.backward_of)
        # Which inputs need a gradient: kept on this instance (one per call site and
        # trace) because residuals may only hold JAX values.
        self._wants = tuple(
            bool(nz) and is_differentiable(t.dtype) for nz, t in zip(nzs_in, self.in_avals)
        )
        check_fits(self.in_avals, self.budget, self.op.name, backward=self._wants)
        self._one_pass = None
        if (
            len(self.in_avals) == 1
            and self._wants[0]
            and isinstance(self.in_avals[0], DiskArrayType)
            and one_pass.one_pass_reduction(self.op, len(self.in_avals[0].shape))
        ):  # a loss: its pass computes its gradient too (`_one_pass`)
            self._one_pass = next(_tokens)
            prim = OocPrim(
                self.op, self.budget, self.in_avals, self.consts, one_pass=self._one_pass
            )
            out = prim(*args)
        else:
            out = self(*args)
        # stored inputs and output its backward pass reads, kept as they are now
        self._kept = tuple(kept_residuals.keep(a) for a in (*args, out))
        return out, (args, out)

    def vjp_bwd_retval(self, res: Any, g: Any) -> tuple[Any, ...]:
        kept: tuple[Any, ...] = getattr(self, "_kept", ())
        if not any(kept):
            return self._backward(res, g)
        args, out = res
        args = tuple(kept_residuals.as_kept(a, k) for a, k in zip(args, kept))
        out = kept_residuals.as_kept(out, kept[-1])
        grads = self._backward((args, out), g)
        kept_residuals.done(kept)
        return grads

    def _backward(self, res: Any, g: Any) -> tuple[Any, ...]:
        args, out = res
        wants = getattr(self, "_wants", (True,) * len(self.in_avals))
        if isinstance(g, Zero) or not is_differentiable(self.out_aval.dtype):
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
        token = getattr(self, "_one_pass", None)
        prim = OocBackwardPrim(
            self.op, self.budget, self.in_avals, self.consts, in_type(g), wants, token
        )
        if token is not None and self.op.one_pass_kind == "sum":
            # a loss's sum or mean: its backward never reads its value (the device may
            # still compute it); a traced one orders the backward after the loss's pass
            out = out if isinstance(out, jax.core.Tracer) else np.zeros((), out.dtype)
        grads = prim(*args, out, g)
        return tuple(
            gr if w else _zero_like(t, z) for gr, w, t, z in zip(grads, wants, self.in_avals, zeros)
        )

    def _zero_cotangents(self, wants: Sequence[bool]) -> tuple[bool, ...]:
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

    def dce(self, used_outs: Any, *live_ins: Any) -> Any:
        if getattr(self.op, "has_side_effect", False):
            return True, True, self
        return super().dce(used_outs, *live_ins)


class OocBackwardPrim(_Refusals, PrimBase):
    """The backward pass of ``op``: input gradients from inputs, output and cotangent."""

    def __init__(
        self,
        op: Any,
        budget: MemoryBudget,
        in_types: Sequence[InType],
        consts: Consts,
        g_type: InType,
        wants: Sequence[bool],
        one_pass: int | None = None,
    ):
        out_type = _jax_type(op.out_type(*_merge(in_types, consts, _const_type)), op.name)
        self.in_avals = (*in_types, out_type, g_type)
        self.out_aval = tuple(in_types)
        self.params = dict(
            op=op,
            budget=budget,
            in_types=tuple(in_types),
            consts=consts,
            wants=wants,
            one_pass=one_pass,
        )
        super().__init__()

    def expand(self, *args: Any) -> tuple[Any, ...]:
        op, budget, consts = self.op, self.budget, self.consts
        n = len(self.in_types)
        const_pos = {pos for pos, _, _ in consts}
        wants = _merge(self.wants, consts, lambda v, d: False)
        out_dtype = op.out_type(*_merge(self.in_types, consts, _const_type)).dtype

        token = self.one_pass

        def host(*vals: Any) -> list[Any]:
            driver = Driver(tile_budget(budget, vals, backward=True), op.name, budget)
            g = vals[n + 1]
            if isinstance(g, np.ndarray) and g.dtype != out_dtype:  # rounded
                g = g.astype(out_dtype)
            elif isinstance(g, jax.Array) and g.dtype != canonical_dtype(out_dtype):
                g = g.astype(canonical_dtype(out_dtype))  # (left unread: as JAX holds it)
            # gradients its loss's pass computed, or deferred: no pass (`_one_pass`)
            grads = deferred_cotangents.backward(
                driver, op, _merge(vals[:n], consts, _const_value), vals[n], g, wants, token
            )
            if grads is None:
                g = np.asarray(g, out_dtype) if isinstance(g, jax.Array) else g
                values = _settled(op, driver, vals)
                inputs = _merge(values[:n], consts, _const_value)
                grads = op.backward(driver, inputs, values[n], g, wants)
            return [gr for pos, gr in enumerate(grads) if pos not in const_pos]

        # a loss's cotangent goes to the host function unread (JAX's is computed on the
        # device behind the loss's pass, which may still be running there)
        unread = (n + 1,) if token is not None else ()
        return tuple(run_on_host(host, self.in_avals, self.out_aval, args, unread))

    def vjp_fwd(self, nzs_in: Sequence[bool], *args: Any) -> NoReturn:
        _refuse_second_order(self.op)


def _settled(op: Any, driver: Driver, values: Sequence[Any]) -> Sequence[Any]:
    """``values`` with the pending results they read computed (`_chain_readers.settle`), and
    chains written first unless ``op`` reads them as they are."""
    if getattr(op, "takes_pending", False):  # it decides (`ops._cotangent_sum`)
        return values
    settle(values)
    if getattr(op, "reads_through", False):
        return values
    return [v.store(driver).stored if is_chain(v) else v for v in values]


def _refuse_second_order(op: Any) -> NoReturn:
    raise TypeError(
        f"gradpipe.ooc: differentiating the backward pass of {op!r} (second-order "
        "differentiation, e.g. jax.grad of jax.grad or jax.hessian) is not supported. "
        "Compute second derivatives in memory on a subset, or by finite differences of "
        "the out-of-core gradient."
    )


class _backward_marker:
    """While active, ops bound by a `backward_ops` rule refuse to be differentiated."""

    active: ClassVar[list[Any]] = []

    def __init__(self, op: Any):
        self.op = op

    def __enter__(self) -> None:
        _backward_marker.active.append(self.op)

    def __exit__(self, *exc: object) -> None:
        _backward_marker.active.pop()


def current_backward_of() -> Any:
    """The op whose backward rule is running (its ops refuse second order), or None."""
    return _backward_marker.active[-1] if _backward_marker.active else None


def _zero_like(t: InType, symbolic: bool = False) -> Any:
    """A zero cotangent for an input of type ``t``: JAX's symbolic zero where asked
    (nothing upstream runs for it), else a zero value."""
    if symbolic or not is_differentiable(t.dtype):
        # an int or bool input's cotangent is JAX's float0 zero, kept symbolic as JAX
        # keeps it: two of them (an int result used twice) are never added
        return Zero(t.to_tangent_aval())
    if isinstance(t, DiskArrayType):
        return t.vspace_zero()
    return jnp.zeros(t.shape, t.dtype)


def bind(op: Any, budget: MemoryBudget, *args: Any) -> Any:
    """Apply ``op`` to ``args``: DiskArrays (traced or not), 0-d JAX values, numbers."""
    consts: list[tuple[int, Any, str]] = []
    dynamic: list[Any] = []
    for pos, (a, dtype) in enumerate(zip(args, operand_dtypes(args, type_of, op.name))):
        if is_constant(a):
            consts.append((pos, np.asarray(a, dtype).item(), dtype.str))
        else:
            dynamic.append(as_input(a, dtype, budget, op.name))
    in_types = tuple(in_type(a) for a in dynamic)
    check_fits(in_types, budget, op.name)
    prim = OocPrim(
        op,
        budget,
        in_types,
        tuple(consts),
        backward_of=current_backward_of(),
    )
    return prim(*dynamic)
