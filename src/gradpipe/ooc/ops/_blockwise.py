"""`Blockwise`: one output block from the matching blocks of its inputs, by a kernel.

The primitive behind every elementwise function (and `where`, `clip`, casts,
broadcasting): inputs broadcast against each other as in NumPy, each output tile
reads the matching tile of every input (a size-1 axis reads its one row), and the
block kernel (`_kernel`) computes the tile. The backward pass is JAX's VJP of the
kernel, so a new elementwise function is one line: its kernel.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any, cast

import numpy as np
from numpy.typing import DTypeLike

from ..arrays._array import ArrayLike, Result
from ..arrays._op import BlockParallelOp, apply, frozen
from ..arrays._primitives import InType
from ..execution._driver import Driver, Value
from ..kernels._kernel import (
    Kernel,
    Params,
    check_vjp,
    kernel_dtype,
    run_forward,
    run_in_jax,
    run_vjp,
    vjp_reads,
    vjp_zeros,
)
from ..kernels._promotion import is_differentiable, to_primal_dtype
from ..planning._chain_graph import Unread
from ..planning._resident import is_resident
from ..storage._paged_file import Region
from ._arg_types import BudgetLike

__all__ = ["Blockwise", "blockwise"]


def broadcast_region(out_r: Region, shape: tuple[int, ...]) -> Region | None:
    """The region of an input of ``shape`` that an output tile ``out_r`` reads."""
    if not shape:
        return None
    lead = len(out_r) - len(shape)
    return tuple(slice(0, 1) if n == 1 else r for n, r in zip(shape, out_r[lead:]))


@frozen
class Blockwise(BlockParallelOp):
    """``kernel(xp, *inputs, **params)`` tile by tile, inputs broadcast as in NumPy.

    ``label`` names it in errors and progress bars; ``params`` are ``(name, value)``
    pairs passed to the kernel (hashable: equal operations share one compilation);
    ``wants`` is set by the backward pass to the inputs whose gradient is needed.
    """

    fusable = True

    kernel: Kernel
    label: str
    params: Params = ()
    wants: tuple[bool, ...] | None = None

    @property
    def name(self) -> str:
        return self.label

    @property
    def stops_gradient(self) -> bool:
        """Whether this is `jax.lax.stop_gradient` of a DiskArray (`_one_pass` asks)."""
        return bool(getattr(self.kernel, "stops_gradient", False))

    def output_shape(self, *shapes: tuple[int, ...]) -> tuple[int, ...]:
        try:
            return tuple(np.broadcast_shapes(*shapes))
        except ValueError:
            listed = " and ".join(str(tuple(s)) for s in shapes)
            raise ValueError(f"{self.label}: shapes {listed} do not broadcast together.") from None

    def output_dtype(self, *dtypes: DTypeLike) -> np.dtype:
        try:
            return kernel_dtype(self.kernel, self.params, tuple(np.dtype(d) for d in dtypes))
        except TypeError as error:  # e.g. bitwise_and of floats, negative of bools
            names = ", ".join(np.dtype(d).name for d in dtypes)
            raise TypeError(f"{self.label} is not defined for {names} arrays: {error}") from None

    def index_map(
        self, out_r: Region, red_r: Region, *shapes: tuple[int, ...]
    ) -> tuple[Region | None, ...]:
        return tuple(broadcast_region(out_r, s) for s in shapes)

    def forward_block(self, *blocks: np.ndarray) -> np.ndarray:
        out = run_forward(self.kernel, self.params, blocks)
        dtype = self.output_dtype(*[b.dtype for b in blocks])
        return out if out.dtype == dtype else out.astype(dtype)

    def block_on(self, xp: Any, *blocks: Any) -> Any:
        """The kernel on the array namespace ``xp`` (a fused chain's step as JAX
        code, for the gradient of a loss in its forward pass: `_one_pass`)."""
        return self.kernel(xp, *blocks, **dict(self.params))

    def chain_kernel(self, dtype: np.dtype) -> Callable[[Sequence[np.ndarray]], tuple[np.ndarray]]:
        """``forward_block`` for reads through a chain: NumPy's warnings are already
        off there and the output dtype is known, so each piece is one kernel call."""
        kernel, params = self.kernel, dict(self.params)

        def compute(blocks: Sequence[np.ndarray]) -> tuple[np.ndarray]:
            out = np.asarray(kernel(np, *blocks, **params))
            return (out if out.dtype == dtype else out.astype(dtype),)

        return compute

    def backward_block(self, g: np.ndarray, *blocks: np.ndarray) -> tuple[np.ndarray | None, ...]:
        wants = self.wants if self.wants is not None else (True,) * len(blocks)
        wants = tuple(bool(w) and is_differentiable(b.dtype) for w, b in zip(wants, blocks))
        if not any(wants):
            return (None,) * len(blocks)
        grads = run_vjp(self.kernel, self.params, g, blocks, wants)
        return tuple(
            None if gr is None else to_primal_dtype(gr, b.dtype) for gr, b in zip(grads, blocks)
        )

    def zero_cotangents(
        self, in_types: Sequence[InType], wants: Sequence[bool]
    ) -> tuple[bool, ...]:
        """The wanted inputs whose cotangent is zero whatever the output's (`vjp_zeros`)."""
        wants = [bool(w) and is_differentiable(t.dtype) for w, t in zip(wants, in_types)]
        if not any(wants):
            return (False,) * len(wants)
        try:
            return vjp_zeros(self.kernel, self.params, in_types, wants)
        except Exception:  # no VJP at all: `check_differentiable` refuses it, clearly
            return (False,) * len(wants)

    def check_differentiable(self, in_types: Sequence[InType], wants: Sequence[bool]) -> None:
        wants = [bool(w) and is_differentiable(t.dtype) for w, t in zip(wants, in_types)]
        if any(wants):
            check_vjp(self.kernel, self.params, in_types, wants, self.label)

    def backward(
        self,
        driver: Driver,
        inputs: Sequence[Value],
        output: Value,
        g: Value,
        wants: Sequence[bool],
    ) -> list[Value | None]:
        """Gradients of inputs of the output's shape are chains computed on read (the
        kernel's VJP per block, recomputing the forward chain there); those of
        broadcast inputs are summed over tiles in one pass that writes them, and
        those of in-memory (resident) inputs summed in memory in that pass."""
        shape = tuple(g.shape)
        fused = [
            i
            for i, (v, w) in enumerate(zip(inputs, wants))
            if w
            and tuple(v.shape) == shape
            and shape
            and is_differentiable(v.dtype)
            and not is_resident(v)
        ]
        rest = [bool(w) and i not in fused for i, w in enumerate(wants)]
        grads: list[Value | None] = [None] * len(inputs)
        if any(rest):
            op = dataclasses.replace(self, wants=tuple(rest))
            grads = list(driver.backward(op, inputs, output, g, rest))
        if fused:
            fused_wants = tuple(i in fused for i in range(len(inputs)))
            op = dataclasses.replace(self, wants=fused_wants)

            def compute(blocks: Sequence[np.ndarray]) -> tuple[np.ndarray, ...]:
                parts = op.backward_block(blocks[0], *blocks[1:])
                # wanted and differentiable, each fused input has a cotangent
                return tuple(cast(np.ndarray, parts[i]) for i in fused)

            # inputs the VJP does not read are not computed (nor their chains)
            reads = vjp_reads(self.kernel, self.params, inputs, fused_wants)
            sources = [
                v if r or not v.shape else Unread(v.shape, v.dtype) for v, r in zip(inputs, reads)
            ]
            chains = driver.fuse_map(
                f"d{self.label}",
                [g, *sources],
                lambda out_r: (out_r, *self.index_map(out_r, (), *[v.shape for v in inputs])),
                compute,
                shape,
                [inputs[i].dtype for i in fused],
            )
            for i, c in zip(fused, chains):
                grads[i] = c
        return grads


def blockwise(
    kernel: Kernel,
    label: str,
    *operands: ArrayLike,
    budget: BudgetLike = None,
    **params: Any,
) -> Result:
    """Apply ``kernel`` blockwise to ``operands``: DiskArrays (traced or not), 0-d
    JAX values or Python numbers. With no `DiskArray` among them the kernel runs in
    memory on ``jax.numpy`` (a 0-d result is a JAX array, as every 0-d result is)."""
    from ..arrays._hijax import type_of
    from ._widened import widened

    frozen_params = tuple(sorted(params.items()))
    if all(type_of(a) is None for a in operands):
        return run_in_jax(kernel, frozen_params, operands)
    kernel = widened(kernel, operands, label)  # a weak JAX scalar NumPy widens: `_widened`
    return apply(Blockwise(kernel, label, frozen_params), *operands, budget=budget)
