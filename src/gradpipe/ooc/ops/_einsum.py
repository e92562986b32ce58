"""`einsum`: NumPy's Einstein summation over DiskArrays, out of core.

Not in the array API standard, but xarray's ``xr.dot`` and ``weighted(...)``
reductions call it on an array's namespace. A subscript string is turned into the
operations this package already has: a pair of operands with no label in common
that is also kept (a plain contraction, ``"ij,jk->ik"`` or ``"...a,a->..."``) is
one `tensordot`; anything else (labels shared and kept, as in ``"ij,ij->i"``, or
more than two operands) lines every operand up along all labels, multiplies them
with broadcasting and sums the contracted labels away. A label repeated within one
operand (a diagonal) is refused. Differentiable as the operations it is made of.
"""

from __future__ import annotations

import string
from collections.abc import Callable, Sequence
from typing import Any, cast, overload

import jax.numpy as jnp
import numpy as np

from ..arrays._array import ArrayLike, Result
from ..arrays._hijax import type_of
from ..kernels._promotion import canonical_dtype
from ._arg_types import BudgetLike
from ._elementwise import astype, multiply
from ._layout import transpose
from ._linalg import tensordot
from ._manipulation import expand_dims, permute_dims
from ._reduce import sum

__all__ = ["einsum"]


def _routed(
    name: str, in_memory: Callable[..., Any], on_disk: Callable[..., Any]
) -> Callable[..., Any]:
    """``in_memory`` (a ``jax.numpy`` or NumPy function), or ``on_disk`` (this
    namespace's ``name``) when a DiskArray is among the arguments."""

    def fn(*args: Any, **kwargs: Any) -> Any:
        if any(type_of(a) is not None for a in args):
            return on_disk(*args, **kwargs)
        return in_memory(*args, **kwargs)

    fn.__name__ = name
    fn.__doc__ = f"``{in_memory.__module__}.{name}``, or ``gradpipe.ooc.{name}`` for DiskArrays."
    fn.routes_disk_arrays = True  # type: ignore[attr-defined]  # a mark on the function
    return fn


def register_with_opt_einsum() -> None:
    """Let ``opt_einsum.contract`` (what xarray's ``xr.dot`` and ``weighted``
    reductions call when it is installed, as it is with JAX) compute on DiskArrays
    with this namespace's ``tensordot``, ``transpose`` and ``einsum``.

    opt_einsum looks a backend up by the top-level package of the first operand's
    class: ``gradpipe`` for a DiskArray (made an alias of `gradpipe.ooc` here; it
    would otherwise fall back to NumPy and read the arrays into memory), ``jax``
    for a DiskArray traced under ``jax.jit`` (a JAX tracer), and ``numpy`` when a
    NumPy array comes first (``xr.dot(weights, t)``): the ``jax`` and ``numpy``
    backends' three functions are routed here when a DiskArray is among their
    arguments (NumPy's would read it whole into memory), and stay their own for
    everything else."""
    try:
        from opt_einsum.backends import dispatch
    except ImportError:  # not installed: nothing routes einsum around the namespace
        return
    aliases = getattr(dispatch, "_aliases", None)
    cached = getattr(dispatch, "_cached_funcs", None)
    if not isinstance(aliases, dict) or not isinstance(cached, dict):
        return  # another opt_einsum: DiskArrays then go through xarray's namespace path
    aliases.setdefault("gradpipe", "gradpipe.ooc")
    for backend, module in (("jax", jnp), ("numpy", np)):
        for name, on_disk in (
            ("tensordot", tensordot),
            ("transpose", transpose),
            ("einsum", einsum),
        ):
            current = cached.get((name, backend), getattr(module, name))
            if not getattr(current, "routes_disk_arrays", False):  # once per process
                cached[(name, backend)] = _routed(name, current, on_disk)


def _shape(x: ArrayLike) -> tuple[int, ...]:
    t = type_of(x)
    return tuple(t.shape) if t is not None else tuple(np.shape(x))


def _parse(subscripts: str, shapes: Sequence[tuple[int, ...]]) -> tuple[list[str], str]:
    """Each operand's labels and the output's, with ``...`` spelled out as capital
    letters (right-aligned across operands, as NumPy broadcasts them)."""
    text = subscripts.replace(" ", "")
    inputs, arrow, output = text.partition("->")
    terms = inputs.split(",")
    if len(terms) != len(shapes):
        raise ValueError(
            f"einsum: {subscripts!r} names {len(terms)} operands, but {len(shapes)} were given."
        )
    ellipsis = 0
    for term, shape in zip(terms, shapes):
        named = len(term.replace("...", ""))
        if "..." in term:
            ellipsis = max(ellipsis, len(shape) - named)
        elif named != len(shape):
            raise ValueError(
                f"einsum: {term!r} names {named} axes of an operand with {len(shape)}."
            )
    broadcast = string.ascii_uppercase[:ellipsis]
    labels = []
    for term, shape in zip(terms, shapes):
        if "..." in term:
            own = len(shape) - len(term.replace("...", ""))
            term = term.replace("...", broadcast[ellipsis - own :])
        if len(set(term)) != len(term):
            raise NotImplementedError(
                f"einsum: {term!r} repeats a label within one operand (a diagonal); "
                "gradpipe.ooc's einsum contracts and broadcasts only."
            )
        labels.append(term)
    if arrow:
        out = output.replace("...", broadcast)
    else:
        counts = "".join(labels)
        out = broadcast + "".join(
            sorted(c for c in set(counts) if c.islower() and counts.count(c) == 1)
        )
    return labels, out


@overload
def _line_up(x: Result, labels: str, order: str, budget: BudgetLike) -> Result: ...
@overload
def _line_up(x: ArrayLike, labels: str, order: str, budget: BudgetLike) -> ArrayLike: ...
def _line_up(x: ArrayLike, labels: str, order: str, budget: BudgetLike) -> ArrayLike:
    """``x`` with its axes in ``order`` (a size-1 axis for each label it lacks)."""
    mine = [c for c in order if c in labels]
    perm = tuple(labels.index(c) for c in mine)
    if perm != tuple(range(len(perm))):
        x = permute_dims(x, perm, budget=budget)
    missing = tuple(i for i, c in enumerate(order) if c not in labels)
    return expand_dims(x, missing, budget=budget) if missing else x


def _sum_own(
    x: ArrayLike, labels: str, keep: str, common: np.dtype, budget: BudgetLike
) -> tuple[ArrayLike, str]:
    """``x`` summed over the labels no other operand and not the output has, in the
    ``common`` dtype of all operands: NumPy converts every operand to it before it
    multiplies and sums, so a float32 operand summed with float64 weights is summed
    in float64 (in its own dtype the sum would carry float32 rounding)."""
    axes = tuple(i for i, c in enumerate(labels) if c not in keep)
    if not axes:
        return x, labels
    dtype = None if common.kind == "b" else common
    out = sum(x, axis=axes, dtype=dtype, budget=budget)
    return out, "".join(c for c in labels if c in keep)


def _dtype(x: ArrayLike) -> np.dtype:
    """``x``'s dtype as an operand, as the operations einsum is made of see it: a
    DiskArray's or a NumPy array's own (a float64 NumPy operand stays float64: it goes
    to disk, exact, while x64 is off), any other's as JAX holds it (32 bits for 64
    while x64 is off)."""
    t = type_of(x)
    if t is not None:
        return np.dtype(t.dtype)
    if isinstance(x, (np.ndarray, np.generic)):
        return x.dtype
    return canonical_dtype(np.result_type(getattr(x, "dtype", x)))


def _promoted(operands: Sequence[ArrayLike], budget: BudgetLike) -> list[ArrayLike]:
    """The operands, a bool or integer one converted to the dtype all of them
    promote to when that is another kind (as ``jnp.einsum`` computes): a bool
    summed on its own would otherwise count in integers, and promote the result
    past the other operands' float."""
    dtypes = [_dtype(x) for x in operands]
    common = np.result_type(*dtypes)
    out = []
    for x, dt in zip(operands, dtypes):
        if dt.kind in "biu" and dt != common and common.kind != "b":
            on_disk = type_of(x) is not None
            x = astype(x, common, budget=budget) if on_disk else np.asarray(x, common)
        out.append(x)
    return out


def einsum(
    subscripts: str, /, *operands: ArrayLike, budget: BudgetLike = None, **options: Any
) -> Result:
    """Einstein summation as ``np.einsum`` gives it (``"ij,jk->ik"``, ``"...a,...a->..."``),
    out of core. ``optimize=`` and NumPy's other options are accepted and ignored."""
    if options.pop("out", None) is not None:
        raise TypeError("einsum(..., out=...): results are new arrays; drop out=.")
    if all(type_of(x) is None for x in operands):
        return jnp.einsum(subscripts, *(jnp.asarray(x) for x in operands))
    shapes = [_shape(x) for x in operands]
    labels, out = _parse(subscripts, shapes)
    xs = _promoted(operands, budget)
    common = np.result_type(*(_dtype(x) for x in xs))
    for i, (x, lab) in enumerate(zip(xs, labels)):
        others = out + "".join(b for j, b in enumerate(labels) if j != i)
        xs[i], labels[i] = _sum_own(x, lab, others, common, budget)
    if len(xs) == 1:
        return _line_up(cast(Result, xs[0]), labels[0], out, budget)  # the one operand is on disk
    if len(xs) == 2 and not set(labels[0]) & set(labels[1]) & set(out):
        a, b = labels
        shared = [c for c in a if c in b]
        result = tensordot(
            xs[0],
            xs[1],
            axes=([a.index(c) for c in shared], [b.index(c) for c in shared]),
            budget=budget,
        )
        got = "".join(c for c in a if c not in shared) + "".join(c for c in b if c not in shared)
        return _line_up(result, got, out, budget) if got != out else result
    order = out + "".join(sorted({c for lab in labels for c in lab} - set(out)))
    product = _line_up(xs[0], labels[0], order, budget)
    for x, lab in zip(xs[1:], labels[1:]):
        product = multiply(product, _line_up(x, lab, order, budget), budget=budget)
    contracted = tuple(range(len(out), len(order)))
    product = cast(Result, product)  # a product of two operands at least
    return sum(product, axis=contracted, budget=budget) if contracted else product
