"""`CoreAxes`: a block kernel over whole core axes, tiled along the other (batch) axes.

The primitive behind the FFTs and the per-matrix functions of `linalg`: each input
keeps some of its axes whole (a matrix's two trailing axes, the line an FFT runs
along) and the remaining batch axes are cut into tiles by the budget, as `sort`
cuts its lines. Batch axes broadcast against each other as in NumPy (right
aligned); a size-1 batch axis reads its one row. Per tile the forward pass runs
``kernel(numpy, *blocks, **params)`` on the stacked blocks; the backward pass runs
JAX's VJP of the same kernel (`_kernel.run_vjp`, evaluated with NumPy), so no
function needs a hand-written derivative. A single batch element whose core axes do
not fit in the budget is refused with a `MemoryError` that says so.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ..arrays._array import ArrayLike, Result
from ..arrays._hijax import DiskArrayType, ShapedArray, scalar_type, type_of
from ..arrays._op import CustomOp, apply, frozen
from ..execution._driver import Driver, Value
from ..kernels._kernel import (
    BlockType,
    Kernel,
    Key,
    Params,
    _vjp_program,
    run_forward,
    run_in_jax,
    run_vjp,
)
from ..kernels._numpy_eval import unsupported
from ..kernels._promotion import is_differentiable, to_primal_dtype
from ..planning._budget import plan_tiles
from ..storage._paged_file import PagedFile, Region
from ._arg_types import BudgetLike
from ._reshape import tile_regions

__all__ = ["CoreAxes", "core_axes"]

# a tile's inputs, the kernel's result and its temporaries (LAPACK workspaces, an
# FFT's buffers), and the output tile with a write in flight
_FORWARD_COPIES = 4
# the VJP keeps the forward's residuals besides the cotangents it computes
_BACKWARD_COPIES = 8


@functools.lru_cache(maxsize=1024)
def _core_result(kernel: Kernel, params: Params, key: Key) -> tuple[tuple[int, ...], np.dtype]:
    """The shape and dtype ``jax.numpy`` gives the kernel on stand-ins of ``key``."""
    specs = [jax.ShapeDtypeStruct(shape, np.dtype(dtype)) for shape, dtype in key]
    with jax.enable_x64(True):
        out = jax.eval_shape(lambda *b: kernel(jnp, *b, **dict(params)), *specs)
    return tuple(out.shape), np.dtype(out.dtype)


@frozen
class CoreAxes(CustomOp):
    """``kernel(xp, *inputs, **params)`` over whole core axes, tile by tile along the rest.

    - `kernel`: computes the output for a stack of batch elements, as the
      ``numpy.linalg`` and ``numpy.fft`` functions do.
    - `label`: the name in errors and progress bars.
    - `core`: per input, its core axes as negative positions (``(-2, -1)`` for a
      matrix); the other axes are batch axes.
    - `out_core`: the output's core axes as negative positions.
    - `params`: ``(name, value)`` pairs passed to the kernel.
    - `differentiable`: ``False`` for a kernel with no gradient (integer results).

    The output's core sizes and dtype are those ``jax.numpy`` gives the kernel (with
    64-bit types on); the forward pass casts NumPy's result to that dtype.
    """

    kernel: Kernel
    label: str
    core: tuple[tuple[int, ...], ...]
    out_core: tuple[int, ...]
    params: Params = ()
    differentiable: bool = True

    @property
    def name(self) -> str:
        return self.label

    # -- shapes --------------------------------------------------------------

    def _batch(self, i: int, shape: tuple[int, ...]) -> tuple[int, ...]:
        core = {a % len(shape) for a in self.core[i]}
        return tuple(n for a, n in enumerate(shape) if a not in core)

    def _loop_shape(self, *shapes: tuple[int, ...]) -> tuple[int, ...]:
        batches = [self._batch(i, s) for i, s in enumerate(shapes)]
        try:
            return tuple(np.broadcast_shapes(*batches))
        except ValueError:
            listed = " and ".join(str(tuple(s)) for s in shapes)
            raise ValueError(
                f"{self.label}: the batch axes of shapes {listed} do not broadcast together."
            ) from None

    def _stand_in(self, i: int, shape: tuple[int, ...]) -> tuple[int, ...]:
        """``shape`` with its batch axes cut to 1."""
        core = {a % len(shape) for a in self.core[i]}
        return tuple(n if a in core else 1 for a, n in enumerate(shape))

    def _result(
        self, shapes: Sequence[tuple[int, ...]], dtypes: Sequence[Any]
    ) -> tuple[tuple[int, ...], np.dtype]:
        key = tuple(
            (self._stand_in(i, s), np.dtype(d).str) for i, (s, d) in enumerate(zip(shapes, dtypes))
        )
        return _core_result(self.kernel, self.params, key)

    def output_shape(self, *shapes: tuple[int, ...]) -> tuple[int, ...]:
        return self._output(shapes, [np.float64] * len(shapes))[0]

    def _output(
        self, shapes: Sequence[tuple[int, ...]], dtypes: Sequence[Any]
    ) -> tuple[tuple[int, ...], np.dtype]:
        """The output's shape and dtype: batch axes from the loop, core ones from JAX."""
        loop = self._loop_shape(*shapes)
        stand_in, dtype = self._result(shapes, dtypes)
        n_out = len(loop) + len(self.out_core)
        if len(stand_in) != n_out:
            raise ValueError(
                f"{self.label}: the kernel's result has {len(stand_in)} axes, not the "
                f"{n_out} its batch and core axes make."
            )
        core = {a % n_out for a in self.out_core}
        it = iter(loop)
        return tuple(stand_in[a] if a in core else next(it) for a in range(n_out)), dtype

    def out_type(self, *in_types: BlockType) -> DiskArrayType | ShapedArray:
        shape, dtype = self._output([t.shape for t in in_types], [t.dtype for t in in_types])
        if shape:
            return DiskArrayType(shape, dtype)
        return scalar_type(dtype)

    # -- tiles ---------------------------------------------------------------

    def _in_region(self, i: int, shape: tuple[int, ...], loop_r: Region) -> Region:
        core = {a % len(shape) for a in self.core[i]}
        batch = self._batch(i, shape)
        own = loop_r[len(loop_r) - len(batch) :] if batch else ()
        it = iter(slice(0, 1) if n == 1 else r for n, r in zip(batch, own))
        return tuple(slice(0, n) if a in core else next(it) for a, n in enumerate(shape))

    def _out_region(self, out_shape: tuple[int, ...], loop_r: Region) -> Region:
        core = {a % len(out_shape) for a in self.out_core}
        it = iter(loop_r)
        return tuple(slice(0, n) if a in core else next(it) for a, n in enumerate(out_shape))

    def _tiles(
        self,
        driver: Driver,
        inputs: Sequence[Value],
        out_shape: tuple[int, ...],
        out_item: int,
        copies: int,
    ) -> list[Region]:
        """The loop regions, planned from the budget; refuses (MemoryError) when one
        batch element's core axes alone exceed it."""
        shapes = [tuple(x.shape) for x in inputs]
        items = [np.dtype(x.dtype).itemsize for x in inputs]
        loop = self._loop_shape(*shapes)

        def nbytes(region: Region, item: int) -> int:
            return math.prod(s.stop - s.start for s in region) * item

        def bytes_for(tile: tuple[int, ...]) -> int:
            loop_r = tuple(slice(0, t) for t in tile)
            ins = sum(
                nbytes(self._in_region(i, s, loop_r), n)
                for i, (s, n) in enumerate(zip(shapes, items))
            )
            return copies * (ins + nbytes(self._out_region(out_shape, loop_r), out_item))

        one = bytes_for((1,) * len(loop))
        if one > driver.budget.nbytes:
            cores = ", ".join(str(tuple(s[a] for a in self.core[i])) for i, s in enumerate(shapes))
            raise MemoryError(
                f"{self.label}: one batch element (core axes of sizes {cores}) needs {one} "
                f"bytes, more than the {driver.budget}. gradpipe.ooc keeps the core axes of "
                "each element whole in memory: raise the budget or use smaller core axes."
            )
        if not loop:
            return [()]
        tile = plan_tiles(loop, bytes_for, driver.budget, what=self.label, thin_ok=range(len(loop)))
        return list(tile_regions(loop, tile))

    # -- forward and backward -----------------------------------------------

    def forward(self, driver: Driver, *inputs: Value) -> Value:
        out_shape, dtype = self._output([x.shape for x in inputs], [x.dtype for x in inputs])
        tiles = self._tiles(driver, inputs, out_shape, dtype.itemsize, _FORWARD_COPIES)
        if not out_shape:  # one element, checked against the budget above
            blocks = [driver.read(x, None) for x in inputs]
            return run_forward(self.kernel, self.params, blocks).astype(dtype)
        with driver.writing(out_shape, dtype) as out:
            for loop_r in tiles:
                blocks = [
                    driver.read(x, self._in_region(i, x.shape, loop_r))
                    for i, x in enumerate(inputs)
                ]
                result = run_forward(self.kernel, self.params, blocks)
                region = self._out_region(out_shape, loop_r)
                want = tuple(r.stop - r.start for r in region)
                out.write(region, np.ascontiguousarray(np.broadcast_to(result, want), dtype))
        return out

    def check_differentiable(self, in_types: Sequence[BlockType], wants: Sequence[bool]) -> None:
        wants = [bool(w) and is_differentiable(t.dtype) for w, t in zip(wants, in_types)]
        if not any(wants):
            return
        if not self.differentiable:
            raise TypeError(
                f"{self.label} is not differentiable (its result is not a smooth function "
                "of its input). Stop the gradient before it (jax.lax.stop_gradient)."
            )
        # whole core axes: a kernel's VJP may depend on their sizes (JAX differentiates
        # a square `svd` with full matrices, not a wide one), so they are not cut
        key = tuple(
            (self._stand_in(i, t.shape), np.dtype(t.dtype).str) for i, t in enumerate(in_types)
        )
        try:
            jaxpr, _, _ = _vjp_program(self.kernel, self.params, key, tuple(wants))
            missing = unsupported(jaxpr)
            if missing:
                raise NotImplementedError(f"no host rule for JAX's {', '.join(missing)}")
        except Exception as error:  # JAX's own refusal (no derivative rule), or a missing rule
            lines = str(error).strip().splitlines()
            raise TypeError(
                f"{self.label} is not differentiable out of core: JAX cannot differentiate "
                f"its kernel ({lines[0] if lines else type(error).__name__}). Stop the "
                "gradient before it (jax.lax.stop_gradient) or compute it in memory."
            ) from None

    def backward(
        self,
        driver: Driver,
        inputs: Sequence[Value],
        output: Value,
        g: Value,
        wants: Sequence[bool],
    ) -> list[Value | None]:
        wants = [bool(w) and is_differentiable(x.dtype) for w, x in zip(wants, inputs)]
        if not any(wants):
            return [None] * len(inputs)
        out_shape = tuple(output.shape)
        out_item = np.dtype(output.dtype).itemsize
        grads: list[PagedFile | None] = [
            driver.allocate(x.shape, x.dtype) if w else None for x, w in zip(inputs, wants)
        ]
        touched: list[set[tuple[tuple[int, int], ...]]] = [set() for _ in inputs]
        try:
            for loop_r in self._tiles(driver, inputs, out_shape, out_item, _BACKWARD_COPIES):
                regions = [self._in_region(i, x.shape, loop_r) for i, x in enumerate(inputs)]
                blocks = [driver.read(x, r) for x, r in zip(inputs, regions)]
                g_block = driver.read(g, self._out_region(out_shape, loop_r) if out_shape else None)
                parts = run_vjp(self.kernel, self.params, g_block, blocks, wants)
                for i, part in enumerate(parts):
                    grad = grads[i]
                    if part is None:
                        continue
                    assert grad is not None  # a part only where a gradient is wanted
                    part = to_primal_dtype(part, inputs[i].dtype)
                    key = tuple((s.start, s.stop) for s in regions[i])
                    if key in touched[i]:
                        part = grad.read(regions[i]) + part
                    touched[i].add(key)
                    grad.write(regions[i], np.ascontiguousarray(part))
        except BaseException:
            for gr in grads:
                if gr is not None:
                    gr.discard()
            raise
        return [gr.commit() if gr is not None else None for gr in grads]


def core_axes(
    kernel: Kernel,
    label: str,
    *operands: ArrayLike,
    core: tuple[tuple[int, ...], ...],
    out_core: tuple[int, ...],
    differentiable: bool = True,
    budget: BudgetLike = None,
    **params: Any,
) -> Result:
    """Apply ``kernel`` over the ``core`` axes of ``operands``, tiled along the others.

    With no `DiskArray` among the operands the kernel runs in memory (NumPy for
    concrete values, ``jax.numpy`` under tracing), as `blockwise` does.

    **Arguments:**

    - `kernel`: ``kernel(xp, *blocks, **params)``.
    - `label`: the function's name, for errors.
    - `core`: per operand, its core axes as negative positions.
    - `out_core`: the output's core axes as negative positions.
    - `differentiable`: whether the result has a gradient.
    - `budget`: a `MemoryBudget` for this call.

    **Returns:** a `DiskArray` (a 0-d JAX array when the output has no axes).
    """
    frozen_params = tuple(sorted(params.items()))
    if all(type_of(a) is None for a in operands):
        out = run_in_jax(kernel, frozen_params, operands)
        if not differentiable:
            out = jax.lax.stop_gradient(out)
        return out
    op = CoreAxes(kernel, label, tuple(core), tuple(out_core), frozen_params, differentiable)
    return apply(op, *operands, budget=budget)
