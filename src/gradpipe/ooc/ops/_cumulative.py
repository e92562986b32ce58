"""Cumulative sums and products along an axis, out of core.

`cumulative_sum` and `cumulative_prod` (the array API standard's) walk each line of
tiles along the axis with a running total carried from tile to tile (`Cumulative`);
`cumsum` and `cumprod` are NumPy's spellings, flattening when no axis is given. The
tile kernel is written once against an array namespace: its backward pass is JAX's
VJP of it (`_kernel`), so gradients are the ones `jax.numpy` gives.
"""

from __future__ import annotations

import builtins
import itertools
import math
from collections.abc import Iterator, Sequence
from types import ModuleType
from typing import Any

import jax.numpy as jnp
import numpy as np
from numpy.typing import DTypeLike

from ..arrays._array import ArrayLike, Result
from ..arrays._hijax import type_of
from ..arrays._op import CustomOp, apply, frozen
from ..execution._driver import Driver, Value
from ..kernels._kernel import Params, run_forward, run_vjp
from ..kernels._promotion import canonical_dtype, is_differentiable, to_primal_dtype
from ..planning._budget import plan_tiles
from ..storage._paged_file import PagedFile, Region
from ._arg_types import BudgetLike
from ._reduce import accumulated_dtype, default_accumulation, normalize_axes

__all__ = ["cumprod", "cumsum", "cumulative_prod", "cumulative_sum"]


def _cumulate(xp: ModuleType, x: Any, carry: Any, *, kind: str, axis: int, dtype: DTypeLike) -> Any:
    """One tile's running totals along ``axis``, continued from ``carry`` (the total
    before the tile, size 1 along the axis)."""
    dtype = np.dtype(dtype)
    x = xp.astype(x, dtype)
    if kind == "sum":
        return carry + xp.cumsum(x, axis=axis, dtype=dtype)
    return carry * xp.cumprod(x, axis=axis, dtype=dtype)


def _lines(
    shape: tuple[int, ...], tile: Sequence[int], axis: int
) -> Iterator[tuple[Region, list[Region]]]:
    """Per line of tiles along ``axis``: the line's first-row region (size 1 along the
    axis) and its tiles' regions in order along the axis."""
    tile = [builtins.max(t, 1) for t in tile]
    starts = [
        range(0, builtins.max(n, 1), t) if a != axis else [0]
        for a, (n, t) in enumerate(zip(shape, tile))
    ]
    for corner in itertools.product(*starts):
        base = [slice(s, builtins.min(s + t, n)) for s, t, n in zip(corner, tile, shape)]
        base[axis] = slice(0, 1)
        line = []
        for s in range(0, shape[axis], tile[axis]):
            r = list(base)
            r[axis] = slice(s, builtins.min(s + tile[axis], shape[axis]))
            line.append(tuple(r))
        yield tuple(base), line


def _along(region: Sequence[slice], axis: int, start: int | None, stop: int | None) -> Region:
    return tuple(slice(start, stop) if a == axis else r for a, r in enumerate(region))


@frozen
class Cumulative(CustomOp):
    """Running sums (``kind="sum"``) or products (``kind="prod"``) along ``axis``,
    in ``dtype`` (see `accumulated_dtype`); ``include_initial`` puts the empty
    total (0 or 1) first.

    Each line of tiles along the axis is walked in order, the last totals of one
    tile carried into the next, so only a tile and the carry are in memory. The
    backward pass walks the lines in reverse: each tile's VJP (JAX's, of the same
    kernel) gives the gradient of its input and of its carry, which is added to
    the previous tile's last cotangents.
    """

    kind: str
    axis: int
    include_initial: bool = False
    dtype: str | None = None

    @property
    def name(self) -> str:
        return f"cumulative_{self.kind}"

    def output_shape(self, s: tuple[int, ...]) -> tuple[int, ...]:
        return tuple(n + (a == self.axis and self.include_initial) for a, n in enumerate(s))

    def output_dtype(self, dx: np.dtype) -> np.dtype:
        return accumulated_dtype(self.name, dx, self.dtype)

    def _params(self, dx: np.dtype) -> Params:
        return (
            ("axis", self.axis),
            ("dtype", np.dtype(self.output_dtype(dx)).str),
            ("kind", self.kind),
        )

    def _plan(self, driver: Driver, x: Value, per_element: int, phase: str) -> tuple[int, ...]:
        out_item = np.dtype(self.output_dtype(x.dtype)).itemsize

        def bytes_for(tile: tuple[int, ...]) -> int:
            side = math.prod(t for a, t in enumerate(tile) if a != self.axis)
            return (math.prod(tile) * per_element + 2 * side) * out_item

        what = f"{self.name} ({phase})"
        return plan_tiles(tuple(x.shape), bytes_for, driver.budget, what=what)

    def _identity(self, region: Region, dtype: np.dtype) -> np.ndarray:
        shape = tuple(r.stop - r.start for r in region)
        return np.full(shape, 0 if self.kind == "sum" else 1, dtype)

    def forward(self, driver: Driver, x: Value) -> PagedFile:
        dtype = np.dtype(self.output_dtype(x.dtype))
        out = driver.allocate(self.output_shape(x.shape), dtype)
        off, params = int(self.include_initial), self._params(x.dtype)
        try:
            for base, line in _lines(x.shape, self._plan(driver, x, 4, "forward"), self.axis):
                carry = self._identity(base, dtype)
                if self.include_initial:
                    out.write(base, carry)
                for r in line:
                    y = run_forward(_cumulate, params, (driver.read(x, r), carry))
                    s = r[self.axis]
                    out.write(_along(r, self.axis, s.start + off, s.stop + off), y)
                    carry = np.take(y, [-1], axis=self.axis)
        except BaseException:
            out.discard()
            raise
        return out.commit()

    def backward(
        self,
        driver: Driver,
        inputs: Sequence[Value],
        output: Value,
        g: Value,
        wants: Sequence[bool],
    ) -> list[PagedFile | None]:
        (x,) = inputs
        if not wants[0] or not is_differentiable(x.dtype):
            return [None]
        dtype = np.dtype(self.output_dtype(x.dtype))
        grad = driver.allocate(x.shape, x.dtype)
        off, params, axis = int(self.include_initial), self._params(x.dtype), self.axis
        try:
            for base, line in _lines(x.shape, self._plan(driver, x, 12, "backward"), axis):
                carry_grad = None
                for r in reversed(line):
                    s = r[axis]
                    if s.start + off == 0:
                        carry = self._identity(base, dtype)
                    else:  # the total before this tile: the output just before it
                        carry = driver.read(
                            output, _along(r, axis, s.start + off - 1, s.start + off)
                        )
                    gb = np.array(driver.read(g, _along(r, axis, s.start + off, s.stop + off)))
                    if carry_grad is not None:
                        last = _along([slice(None)] * gb.ndim, axis, -1, None)
                        gb[last] += carry_grad
                    gx, carry_grad = run_vjp(
                        _cumulate, params, gb, (driver.read(x, r), carry), (True, True)
                    )
                    assert gx is not None  # wanted
                    grad.write(r, to_primal_dtype(gx, x.dtype))
        except BaseException:
            grad.discard()
            raise
        return [grad.commit()]


def _cumulative(
    kind: str,
    x: ArrayLike,
    axis: int | None,
    dtype: DTypeLike | None,
    include_initial: bool,
    budget: BudgetLike,
) -> Result:
    name = f"cumulative_{kind}"
    t = type_of(x)
    shape = t.shape if t is not None else np.shape(x)
    if not shape:
        raise ValueError(f"{name}: x must have at least one dimension, got a 0-d array.")
    if axis is None:
        if len(shape) > 1:
            raise ValueError(
                f"{name}: axis is required for an array of {len(shape)} dimensions (it may "
                "be omitted only for a 1-d array)."
            )
        axis = 0
    if not isinstance(axis, (int, np.integer)) or isinstance(axis, bool):
        raise TypeError(f"{name}: axis must be an int or None, got {axis!r}.")
    (axis,) = normalize_axes(axis, len(shape))
    op = Cumulative(kind, axis, bool(include_initial), default_accumulation(name, x, dtype))
    if t is None:
        v = jnp.asarray(x)
        out_dtype = canonical_dtype(op.output_dtype(v.dtype))
        fn = jnp.cumulative_sum if kind == "sum" else jnp.cumulative_prod
        return fn(v.astype(out_dtype), axis=axis, include_initial=bool(include_initial))
    return apply(op, x, budget=budget)


def cumulative_sum(
    x: ArrayLike,
    /,
    *,
    axis: int | None = None,
    dtype: DTypeLike | None = None,
    include_initial: bool = False,
    budget: BudgetLike = None,
) -> Result:
    """Running sums of ``x`` along ``axis`` (optional for a 1-d ``x``), out of core.

    **Arguments:**

    - `dtype`: the result's dtype (the sums are computed in it); by default the
      standard's, as for `sum`.
    - `include_initial`: start with the empty sum, 0 (the axis grows by one).

    **Returns:** a `DiskArray`. Differentiable, as ``jnp.cumulative_sum``.
    """
    return _cumulative("sum", x, axis, dtype, include_initial, budget)


def cumulative_prod(
    x: ArrayLike,
    /,
    *,
    axis: int | None = None,
    dtype: DTypeLike | None = None,
    include_initial: bool = False,
    budget: BudgetLike = None,
) -> Result:
    """Running products of ``x`` along ``axis``, out of core; see `cumulative_sum`
    (the initial value is 1). Differentiable, as ``jnp.cumulative_prod`` (zeros
    included: each tile's gradient is JAX's)."""
    return _cumulative("prod", x, axis, dtype, include_initial, budget)


def cumsum(
    x: ArrayLike,
    /,
    axis: int | None = None,
    dtype: DTypeLike | None = None,
    *,
    budget: BudgetLike = None,
) -> Result:
    """NumPy's ``cumsum``: `cumulative_sum` along ``axis``, over the flattened array
    when ``axis`` is None (as NumPy, and xarray, call it)."""
    return cumulative_sum(_flat_unless(x, axis), axis=axis, dtype=dtype, budget=budget)


def cumprod(
    x: ArrayLike,
    /,
    axis: int | None = None,
    dtype: DTypeLike | None = None,
    *,
    budget: BudgetLike = None,
) -> Result:
    """NumPy's ``cumprod``: `cumulative_prod` along ``axis`` (flattened when None)."""
    return cumulative_prod(_flat_unless(x, axis), axis=axis, dtype=dtype, budget=budget)


def _flat_unless(x: ArrayLike, axis: int | None) -> ArrayLike:
    from ._manipulation import reshape

    t = type_of(x)
    ndim = len(t.shape) if t is not None else len(np.shape(x))
    return reshape(x, (-1,)) if axis is None and ndim != 1 else x
