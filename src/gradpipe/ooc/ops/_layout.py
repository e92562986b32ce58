"""Transpose and indexing: ``x[key]`` (`getitem`), rows and tiles (`slice_rows`, `slice_tile`)."""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Any, cast

import jax
import jax.numpy as jnp
import numpy as np

from ..arrays._array import ArrayLike, DiskArray, Result, _is_concrete
from ..arrays._hijax import type_of
from ..arrays._op import BlockParallelOp, apply, frozen
from ..execution._driver import Driver, Value
from ..storage._paged_file import Region
from ._arg_types import BudgetLike
from ._indexing import Gather, check_bounds, is_sparse

__all__ = ["GetItem", "Transpose", "getitem", "slice_rows", "slice_tile", "transpose"]

#: One entry of an index as `_classify` gives it: ``(kind, value)``.
_Entry = tuple[str, Any]


@frozen
class Transpose(BlockParallelOp):
    """Axes permuted as ``np.transpose(x, axes)``."""

    fusable = True

    axes: tuple[int, ...]

    @property
    def name(self) -> str:
        return "transpose"

    def output_shape(self, s: tuple[int, ...]) -> tuple[int, ...]:
        return tuple(s[a] for a in self.axes)

    def index_map(self, out_r: Region, red_r: Region, s: tuple[int, ...]) -> tuple[Region]:
        region: list[slice] = [slice(None)] * len(s)
        for i, a in enumerate(self.axes):
            region[a] = out_r[i]
        return (tuple(region),)

    def forward_block(self, x: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(np.transpose(x, self.axes))

    def block_on(self, xp: Any, x: Any) -> Any:
        """The step on JAX arrays (`execution._one_pass`)."""
        return xp.transpose(x, self.axes)

    def backward_block(self, g: np.ndarray, x: np.ndarray) -> tuple[np.ndarray]:
        return (np.ascontiguousarray(np.transpose(g, np.argsort(self.axes))),)

    def backward(
        self,
        driver: Driver,
        inputs: Sequence[Value],
        output: Value | None,
        g: Value,
        wants: Sequence[bool],
    ) -> list[Value | None]:
        """The inverse transpose of ``g``: fused, as the forward is."""
        if not wants[0]:
            return [None]
        return [driver.forward(Transpose(tuple(int(a) for a in np.argsort(self.axes))), [g])]


@frozen
class GetItem(BlockParallelOp):
    """Basic indexing. Per axis of ``x``: the positions ``start + step * i`` for
    ``i < size`` (any nonzero step), or one position (``drop``: the axis goes);
    ``new`` gives the output position and size (1, or 0 for ``x[False]``) of each
    new axis. A tile reads the bounding region of the positions it selects; the
    step is applied within it."""

    fusable = True

    start: tuple[int, ...]
    step: tuple[int, ...]
    size: tuple[int, ...]
    drop: tuple[bool, ...]
    new: tuple[tuple[int, int], ...] = ()

    @property
    def name(self) -> str:
        return "getitem"

    def output_shape(self, s: tuple[int, ...]) -> tuple[int, ...]:
        shape = [n for n, d in zip(self.size, self.drop) if not d]
        for pos, n in sorted(self.new):
            shape.insert(pos, n)
        return tuple(shape)

    def index_map(self, out_r: Region, red_r: Region, s: tuple[int, ...]) -> tuple[Region | None]:
        if not s:
            return (None,)
        if any(r.stop <= r.start for r in out_r):  # an empty tile reads nothing
            return (tuple(slice(0, 0) for _ in s),)
        new = {pos for pos, _ in self.new}
        kept = iter(r for j, r in enumerate(out_r) if j not in new)
        region = []
        for a, k, d in zip(self.start, self.step, self.drop):
            if d:
                region.append(slice(a, a + 1))
                continue
            r = next(kept)
            first, last = a + k * r.start, a + k * (r.stop - 1)
            region.append(slice(min(first, last), max(first, last) + 1))
        return (tuple(region),)

    def _strided(self, x: np.ndarray) -> np.ndarray:
        steps = tuple(slice(None, None, 1 if d else k) for k, d in zip(self.step, self.drop))
        index: tuple[Any, ...] = (*steps, Ellipsis)
        return x[index]  # a view, even of a 0-d block

    def block_on(self, xp: Any, x: Any) -> Any:
        """The selected values, which `execution._one_pass` reshapes to the output's
        block (dropped and new axes are of size 1)."""
        steps = tuple(slice(None, None, 1 if d else k) for k, d in zip(self.step, self.drop))
        return x[steps] if steps else x

    def forward_into(self, out: np.ndarray, x: np.ndarray, accumulate: bool) -> None:
        if out.size:
            y = self._strided(x)
            out.reshape(y.shape)[...] = y

    def forward_block(
        self, x: np.ndarray
    ) -> np.ndarray:  # a 0-d output (`forward_into` writes the others)
        return np.array(self._strided(x)).reshape(())

    def backward_block(self, g: np.ndarray, x: np.ndarray) -> tuple[np.ndarray]:
        z = np.zeros(x.shape, x.dtype)
        if z.size:
            view = self._strided(z)
            view[...] = np.asarray(g).reshape(view.shape)
        return (z,)


def transpose(
    x: ArrayLike, axes: Sequence[int] | None = None, *, budget: BudgetLike = None
) -> Result:
    """``x`` with its axes permuted (reversed by default), out of core."""
    t = type_of(x)
    if t is None:
        raise TypeError(f"transpose(x): x must be a DiskArray, got {type(x).__name__}.")
    nd = len(t.shape)
    axes = tuple(reversed(range(nd))) if axes is None else tuple(a % nd for a in axes)
    if sorted(axes) != list(range(nd)):
        raise ValueError(f"transpose: axes {axes} is not a permutation of {tuple(range(nd))}.")
    return apply(Transpose(axes), x, budget=budget)


def getitem(x: ArrayLike, key: Any, /, *, budget: BudgetLike = None) -> Result:
    """``x[key]``, out of core, with NumPy's rules.

    ``key`` is one entry or a tuple of them: ints, slices with any step, ``...``,
    ``None`` (a new axis), a 0-d bool, and integer arrays (a `DiskArray`, NumPy
    array, list, or 0-d JAX integer; several are broadcast together and zipped
    into coordinates, as in NumPy). Out-of-range and malformed entries raise
    `IndexError`, as in NumPy; boolean masks are refused (their result's size
    depends on the data). Differentiable: the gradient scatters the cotangent back
    (adding it up where indices repeat).

    **Returns:** a `DiskArray`, or a 0-d JAX array when one element is selected.
    """
    t = type_of(x)
    if t is None:
        return _in_memory_getitem(x, key)
    x = cast(Result, x)  # a DiskArray, or its tracer
    items = key if isinstance(key, tuple) else (key,)
    entries = _expand([_classify(item) for item in items], t.shape)
    kinds = [kind for kind, _ in entries]
    bools = kinds.count("bool")
    if "array" in kinds or bools > 1 or (bools and "int" in kinds):
        return _gather(x, entries, True, budget=budget)
    start: list[int] = []
    step: list[int] = []
    size: list[int] = []
    drop: list[bool] = []
    new: list[tuple[int, int]] = []
    ax, sparse = 0, False
    for kind, value in entries:
        if kind in ("new", "bool"):
            new.append((len(size) - sum(drop) + len(new), 0 if value is False else 1))
            continue
        n = t.shape[ax]
        if kind == "slice":
            a, b, k = value.indices(n)
            start.append(a)
            step.append(k)
            size.append(len(range(a, b, k)))
            drop.append(False)
            sparse = sparse or is_sparse(k, size[-1], t.shape[ax + 1 :], t.dtype.itemsize)
        else:
            check_bounds(value, n, ax)
            start.append(value % n)
            step.append(1)
            size.append(1)
            drop.append(True)
        ax += 1
    if sparse:
        return _gather(x, entries, False, budget=budget)
    if not new and not any(drop) and size == list(t.shape) and set(step) <= {1}:
        return x  # the whole array (a view, as NumPy's x[...] is)
    op = GetItem(tuple(start), tuple(step), tuple(size), tuple(drop), tuple(new))
    return apply(op, x, budget=budget)


def _gather(
    x: Result, entries: list[_Entry], advanced: bool, *, budget: BudgetLike = None
) -> Result:
    """``x[key]`` as one `Gather`, for a key expanded to ``(kind, value)`` entries
    (see `getitem`), with NumPy's rules: with integer arrays (``advanced``), ints
    and 0-d bools index with them, and the broadcast index dims go where the
    indexed axes were if those are adjacent in the key, else first."""
    t = type_of(x)
    assert t is not None  # x is a DiskArray
    shape, item = t.shape, t.dtype.itemsize
    sources: list[Any] = [None] * len(shape)  # each axis of x gets its source below
    arrays: list[Result] = []  # the index arrays: DiskArrays, traced JAX integers
    joint: list[tuple[int, ...]] = []
    joint_at: list[int] = []
    # (entry, x axis, source, size) of each entry that no index array goes with
    plain: list[tuple[int, int | None, tuple[str, int, int] | None, int]] = []
    ax = 0
    for pos, (kind, value) in enumerate(entries):
        if kind == "new" or (kind == "bool" and not advanced):
            plain.append((pos, None, None, 0 if value is False else 1))
            continue
        if kind == "bool":
            joint.append((int(value),))
            joint_at.append(pos)
            continue
        n = shape[ax]
        if kind == "slice":
            a, b, k = value.indices(n)
            size = len(range(a, b, k))
            how = "range" if is_sparse(k, size, shape[ax + 1 :], item) else "out"
            plain.append((pos, ax, (how, a, k), size))
        elif kind == "int":
            check_bounds(value, n, ax)
            sources[ax] = ("point", value % n)
            if advanced:
                joint.append(())
                joint_at.append(pos)
        else:
            if isinstance(value, np.ndarray):
                check_bounds(value, n, ax)
                value = DiskArray.from_numpy(value, budget=budget)
            sources[ax] = ("index", len(arrays))
            arrays.append(value)
            joint.append(tuple(np.shape(value)))
            joint_at.append(pos)
        ax += 1
    try:
        b = tuple(np.broadcast_shapes(*joint))
    except ValueError:
        listed = " ".join(str(s) for s in joint)
        raise IndexError(
            f"shape mismatch: indexing arrays could not be broadcast together with shapes {listed}."
        ) from None
    adjacent = joint_at == list(range(joint_at[0], joint_at[-1] + 1)) if joint_at else True
    b0 = sum(pos < joint_at[0] for pos, *_ in plain) if joint_at and adjacent else 0
    out_shape = [size for *_, size in plain]
    out_shape[b0:b0] = b
    for i, (_, a, source, _) in enumerate(plain):
        if a is not None:  # an axis of x, so a source
            assert source is not None
            sources[a] = (source[0], i if i < b0 else i + len(b), *source[1:])
    dims = tuple(tuple(range(b0 + len(b) - len(np.shape(f)), b0 + len(b))) for f in arrays)
    return apply(Gather(tuple(sources), dims, tuple(out_shape)), x, *arrays, budget=budget)


def _expand(entries: list[_Entry], shape: tuple[int, ...]) -> list[_Entry]:
    """``entries`` with the ellipsis (or the missing trailing axes) as full slices."""
    ellipses = sum(kind == "ellipsis" for kind, _ in entries)
    if ellipses > 1:
        raise IndexError("an index can only have a single ellipsis ('...').")
    used = sum(kind in ("int", "slice", "array") for kind, _ in entries)
    if used > len(shape):
        raise IndexError(
            f"too many indices for array: array is {len(shape)}-dimensional, but {used} "
            "were indexed."
        )
    fill = [("slice", slice(None))] * (len(shape) - used)
    if not ellipses:
        return entries + fill
    i = [kind for kind, _ in entries].index("ellipsis")
    return entries[:i] + fill + entries[i + 1 :]


def _classify(item: Any) -> _Entry:
    """One entry of an index as ``(kind, value)``.

    Kinds: ``"slice"``, ``"new"`` (``None``), ``"ellipsis"``, ``"int"``, ``"bool"``
    (a 0-d bool) and ``"array"`` (an integer `DiskArray`, a traced 0-d JAX integer,
    or a NumPy integer array). Concrete 0-d integers of any kind are ints. Raises
    `IndexError` for what NumPy refuses as an index, and for boolean masks.
    """
    if item is None:
        return "new", None
    if item is Ellipsis:
        return "ellipsis", None
    if isinstance(item, slice):
        return "slice", item
    if isinstance(item, (bool, np.bool_)):
        return "bool", bool(item)
    if isinstance(item, (int, np.integer)):
        return "int", int(item)
    t = type_of(item)
    if t is not None or isinstance(item, jax.core.Tracer):
        dtype, shape = np.dtype(item.dtype), tuple(item.shape)
        if dtype.kind == "b":
            _refuse_mask(shape)
        if dtype.kind not in "iu":
            raise IndexError(f"arrays used as indices must be of integer type, got {dtype}.")
        if t is None:  # a traced index, held in memory (0-d, or a resident array)
            return "array", jax.lax.convert_element_type(item, dtype)  # no longer weak
        if not shape and isinstance(item, DiskArray) and _is_concrete(item._handle):
            return "int", operator.index(item)
        return "array", item
    if isinstance(item, (list, tuple, np.ndarray, jax.Array)):
        try:
            a = np.asarray(item)
        except ValueError as error:
            raise IndexError(f"cannot use {item!r} as an index: {error}") from None
        if a.size == 0 and a.dtype.kind not in "biu":
            a = a.astype(np.intp)  # ``x[[]]``: an empty integer index, as in NumPy
        if a.dtype.kind == "b":
            if a.shape:
                _refuse_mask(a.shape)
            return "bool", bool(a)
        if a.dtype.kind not in "iu":
            raise IndexError(f"arrays used as indices must be of integer type, got {a.dtype}.")
        return ("int", int(a)) if a.ndim == 0 else ("array", a)
    try:
        return "int", operator.index(item)
    except TypeError:
        raise IndexError(
            "only integers, slices (`:`), ellipsis (`...`), None and integer arrays are "
            f"valid indices, got {type(item).__name__} {item!r}."
        ) from None


def _refuse_mask(shape: Sequence[int]) -> None:
    raise IndexError(
        f"boolean-mask indexing (a bool index of shape {tuple(shape)}) is not supported "
        "out of core: its result's size depends on the data, which JAX cannot trace "
        "(__array_namespace_info__().capabilities()['boolean indexing'] is False). Keep "
        "the shape with ooc.where(mask, x, 0), or find the indices in memory "
        "(np.nonzero) and index with them."
    )


def _in_memory_getitem(x: ArrayLike, key: Any) -> jax.Array:
    """``x[key]`` for an in-memory ``x`` (DiskArray entries are read, within the budget)."""
    items = key if isinstance(key, tuple) else (key,)
    items = tuple(k.to_numpy() if type_of(k) is not None else k for k in items)
    return jnp.asarray(x)[items if isinstance(key, tuple) else items[0]]


def slice_rows(x: ArrayLike, start: int, stop: int, *, budget: BudgetLike = None) -> Result:
    """Rows ``start:stop`` of ``x`` (a new DiskArray; differentiable)."""
    return getitem(x, slice(start, stop), budget=budget)


def slice_tile(
    x: ArrayLike, rows: tuple[int, int], cols: tuple[int, int], *, budget: BudgetLike = None
) -> Result:
    """The tile ``x[rows[0]:rows[1], cols[0]:cols[1]]`` of a 2-D DiskArray."""
    return getitem(x, (slice(*rows), slice(*cols)), budget=budget)
