"""Authoring out-of-core operations: `BlockParallelOp`, `CustomOp` and `make_op`.

A `BlockParallelOp` says how one tile of the output is computed from tiles of the
inputs; the driver picks tile sizes from the memory budget, reads tiles ahead on a
background thread, and runs forward and backward. A `CustomOp` gets the driver as
a toolkit and does its own looping. `make_op` turns either into a public function
that works eagerly and under `jax.jit` and `jax.grad`.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from typing import Any, TypeVar, dataclass_transform

import numpy as np

from ..execution._driver import Driver
from ..planning._budget import MemoryBudget, get_budget
from ._array import ArrayLike, Result
from ._hijax import DiskArrayType, ShapedArray, type_of
from ._primitives import InType, bind

__all__ = ["BlockParallelOp", "CustomOp", "make_op"]

Region = tuple[slice, ...]
_T = TypeVar("_T")

# The methods a subclass defines with one argument per input (``output_shape(self,
# sa, sb)``) take them here as ``*shapes: Any`` & co., which such an override matches.


class _OpBase:
    """What every operation shares: a name and its output type."""

    #: Whether the operation reads chains (fused, computed on read) as they are.
    #: Block-parallel operations do (the driver plans for it); a `CustomOp` that
    #: reads each input region about once may set it, else its chain inputs are
    #: written first.
    reads_through: bool = False

    #: Whether the output is held in memory and returned as a JAX array rather than
    #: written to disk (the gradient of an in-memory parameter, summed over tiles).
    in_memory_output: bool = False

    @property
    def name(self) -> str:
        """The name used in error messages and progress bars (default: the class name)."""
        return type(self).__name__

    def output_dtype(self, *dtypes: Any) -> np.dtype:
        """The output dtype (default: NumPy's promotion of the input dtypes)."""
        return np.result_type(*dtypes)

    def accumulator_dtype(self, *dtypes: Any) -> np.dtype:
        """The dtype partial output tiles are held and combined in (default: the
        output's; a float16 sum accumulates in float32). The memory plan counts it."""
        return self.output_dtype(*dtypes)

    def output_shape(self, *shapes: Any) -> tuple[int, ...]:
        """The output's shape from the inputs' shapes (``()`` for a scalar). Subclasses define it.

        **Arguments:**

        - `*shapes`: one shape per input, in call order.

        **Returns:**

        The output's shape, a tuple of ints.
        """
        raise NotImplementedError(f"{self.name} must define output_shape(*input_shapes).")

    def check_differentiable(self, in_types: Sequence[InType], wants: Sequence[bool]) -> None:
        """Refuse, with a `TypeError`, a gradient this operation cannot compute.

        Called while JAX traces the backward pass, before any data moves, with the
        inputs' types (shape and dtype; constants included) and one bool per input
        saying whether its gradient is wanted. The default accepts every gradient.
        """

    def out_type(self, *in_types: InType) -> DiskArrayType | ShapedArray:
        """The output's abstract type (shape and dtype) from the inputs' types.

        Called by the driver and by JAX's shape inference; it combines `output_shape` and
        `output_dtype`, so subclasses rarely override it.
        """
        shape = tuple(self.output_shape(*[t.shape for t in in_types]))
        dtype = np.dtype(self.output_dtype(*[t.dtype for t in in_types]))
        if shape and not self.in_memory_output:
            return DiskArrayType(shape, dtype)
        return ShapedArray(shape, dtype)


class BlockParallelOp(_OpBase):
    """An operation computed tile by tile: subclass it, then call `make_op`.

    The loop space is the output's axes followed by the reduction axes
    (``reduction_shape``, empty for elementwise operations). For each output tile
    and each reduction tile, `index_map` names the region of every input that
    step reads; `forward_block` computes a partial output tile from those blocks;
    `combine` folds the partials of one output tile together.

    Subclasses define:

    - `output_shape(*input_shapes)`: the output's shape (``()`` for a scalar).
    - `index_map(out_region, red_region, *input_shapes)`: one region (a tuple of
      slices) per input, or ``None`` for a 0-d input.
    - `forward_block(*blocks)`: the partial output tile (NumPy in, NumPy out).
    - `backward_block(g_block, *blocks)`: one gradient block per input, shaped
      like that input's block (``None`` for no gradient); blocks of one input
      region reached from several steps are added. With
      ``backward_uses_output = True`` it is called as
      ``backward_block(g_block, out_block, *blocks)``.
    - optionally `reduction_shape(*input_shapes)` and `combine(acc, part)`
      (default ``acc + part``, in place).
    - optionally `finish(acc)`: the output tile from its combined partials (a
      mean divides its sum once here).
    - optionally `forward_into(out, *blocks, accumulate)`: write the partial into
      the C-contiguous output tile ``out`` (``accumulate=False``, first reduction
      step) or add it there (later steps), instead of `forward_block` + `combine`;
      a kernel that accumulates in place (BLAS ``gemm`` with ``beta=1``) then needs
      no partial tile at all.

    Instances must be hashable (use a frozen dataclass for configuration): equal
    operations on equal input types share one compilation.

    ```python
    @dataclasses.dataclass(frozen=True)
    class Scale(BlockParallelOp):
        factor: float
        def output_shape(self, shape): return shape
        def index_map(self, out_r, red_r, shape): return (out_r,)
        def forward_block(self, x): return x * self.factor
        def backward_block(self, g, x): return (g * self.factor,)

    scale = make_op(Scale)
    y = scale(x, factor=2.0)
    ```
    """

    backward_uses_output: bool = False

    reads_through = True

    #: A block map (no reduction axes, each output tile a function of input tiles
    #: alone) may set this: its output is then not written but computed when read,
    #: fused with the operations around it (see `gradpipe.ooc.explain`).
    fusable: bool = False

    def reduction_shape(self, *shapes: Any) -> tuple[int, ...]:
        """The shape of the reduction loop (default ``()``: no reduction, elementwise).

        A matrix product reduces over the shared axis: ``(a_shape[1],)``.
        """
        return ()

    def thin_axes(self, *shapes: Any) -> tuple[int, ...]:
        """Loop axes a tile may cut below the planner's minimum side at no cost to the
        kernel (default none): a stack of matrices' batch axes, say, where a tile of
        one matrix runs the same BLAS call as a tile of many."""
        return ()

    def index_map(
        self, out_region: Region, red_region: Region, *shapes: Any
    ) -> Sequence[Region | None]:
        """The region of each input that one step reads. Subclasses define it.

        **Arguments:**

        - `out_region`: the output tile, one slice per output axis.
        - `red_region`: the reduction tile, one slice per reduction axis (empty when
          there is no reduction).
        - `*shapes`: the inputs' shapes.

        **Returns:**

        One region (a tuple of slices) per input, or ``None`` for a 0-d input.
        """
        raise NotImplementedError(f"{self.name} must define index_map.")

    def forward_block(self, *blocks: Any) -> np.ndarray:
        """The partial output tile computed from one step's input blocks (NumPy in, NumPy out).

        Subclasses define it (or `forward_into`); the partials of one output tile are
        folded with `combine`.
        """
        raise NotImplementedError(f"{self.name} must define forward_block.")

    def backward_block(self, g_block: np.ndarray, *blocks: Any) -> Sequence[np.ndarray | None]:
        """One gradient block per input for one step, shaped like that input's block.

        Subclasses define it to be differentiable.

        **Arguments:**

        - `g_block`: the output's cotangent on this step's output tile.
        - `*blocks`: the input blocks the step read (preceded by the forward output
          block when ``backward_uses_output = True``).

        **Returns:**

        A tuple with one block per input, or ``None`` for an input without a gradient.
        """
        raise NotImplementedError(f"{self.name} must define backward_block to be differentiated.")

    def combine(self, acc: np.ndarray, part: np.ndarray) -> np.ndarray:
        """Fold ``part`` into ``acc`` (which the driver owns: updating it in place is fine)."""
        acc += part
        return acc

    # -- what the primitives call ---------------------------------------------

    def forward(self, driver: Driver, *inputs: Any) -> Any:
        """Run the operation through `Driver.forward` (the tiled loop); called by the primitive."""
        return driver.forward(self, inputs)

    def backward(
        self, driver: Driver, inputs: Sequence[Any], output: Any, g: Any, wants: Sequence[bool]
    ) -> Sequence[Any]:
        """Run the backward pass through `Driver.backward`; called by the primitive."""
        return driver.backward(self, inputs, output, g, wants)


class CustomOp(_OpBase):
    """An operation that is not block parallel: it loops itself, using the driver.

    Subclasses define `output_shape`, and

    - `forward(driver, *inputs)`: returns a committed file from
      ``driver.allocate(shape, dtype)`` (or a 0-d NumPy value for a scalar output).
      Inputs are array files (``.shape``, ``.dtype``, ``.read(region)``; an
      in-memory JAX operand comes as one too, a `ResidentFile`) or 0-d NumPy values.
    - `backward(driver, inputs, output, g, wants)`: one gradient per input (a
      committed file, a 0-d value, or ``None`` where ``wants`` is false; for an
      in-memory operand a file or a NumPy array of its shape, which is read into
      memory and given to JAX).

    ``driver.read(x, region)``, ``driver.allocate(...)``, ``driver.forward(op,
    inputs)`` and ``driver.backward(...)`` are the toolkit; ``driver.budget`` is the
    `MemoryBudget` to stay within.
    """

    def forward(self, driver: Driver, *inputs: Any) -> Any:
        """The output, computed with the driver's toolkit. Subclasses define it.

        **Arguments:**

        - `driver`: the `Driver` (``read``, ``allocate``, ``forward``, ``budget``).
        - `*inputs`: array files (``.shape``, ``.dtype``, ``.read(region)``;
          in-memory operands as `ResidentFile`s) or 0-d NumPy values.

        **Returns:**

        A committed file from ``driver.allocate(shape, dtype)``, or a 0-d NumPy value.
        """
        raise NotImplementedError(f"{self.name} must define forward(driver, *inputs).")

    def backward(
        self, driver: Driver, inputs: Sequence[Any], output: Any, g: Any, wants: Sequence[bool]
    ) -> Sequence[Any]:
        """One gradient per input. Subclasses define it to be differentiable.

        **Arguments:**

        - `driver`: the `Driver`.
        - `inputs`: the forward inputs; `output`: the forward output.
        - `g`: the output's cotangent (a file, or a 0-d value).
        - `wants`: one bool per input, whether its gradient is needed.

        **Returns:**

        One gradient per input: a committed file, a 0-d value (a NumPy array of the
        operand's shape for an in-memory operand), or ``None`` where ``wants`` is
        false.
        """
        raise NotImplementedError(f"{self.name} must define backward to be differentiated.")


def make_op(op_class: type[_OpBase], doc: str | None = None) -> Callable[..., Result]:
    """The public function for an operation class.

    **Arguments:**

    - `op_class`: a `BlockParallelOp` or `CustomOp` subclass whose constructor
      takes the operation's configuration as keyword arguments.
    - `doc`: the returned function's docstring (default: the class's).

    **Returns:** ``fn(*arrays, budget=None, **config)``. ``arrays`` are
    `DiskArray`s (traced or not) or scalars; ``budget`` is a `MemoryBudget` for
    this call; ``config`` builds the operation.
    """
    if not (isinstance(op_class, type) and issubclass(op_class, _OpBase)):
        raise TypeError(
            f"make_op(op_class) needs a BlockParallelOp or CustomOp subclass, got {op_class!r}."
        )

    @functools.wraps(op_class, assigned=("__module__",), updated=())
    def fn(
        *arrays: ArrayLike, budget: MemoryBudget | int | str | None = None, **config: Any
    ) -> Result:
        return apply(op_class(**config), *arrays, budget=budget)

    fn.__name__ = fn.__qualname__ = _snake(op_class.__name__)
    fn.__doc__ = doc if doc is not None else op_class.__doc__
    return fn


def apply(
    op: _OpBase, *arrays: ArrayLike, budget: MemoryBudget | int | str | None = None
) -> Result:
    """Run ``op`` on ``arrays`` (used by `make_op` and the built-in operations)."""
    if all(type_of(a) is None for a in arrays):
        raise TypeError(f"{op.name}: at least one argument must be a DiskArray.")
    return bind(op, get_budget(budget), *arrays)


def _snake(name: str) -> str:
    return "".join("_" + c.lower() if c.isupper() and i else c.lower() for i, c in enumerate(name))


@dataclass_transform(frozen_default=True)
def frozen(cls: type[_T]) -> type[_T]:
    """Decorator: a frozen, hashable dataclass (the usual shape of an op's config)."""
    return dataclasses.dataclass(frozen=True)(cls)
