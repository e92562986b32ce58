"""Schema types for a component's pydantic models: `Array` (with its `ArraySpec`) and
`Differentiable`. The tree of nodes a `Component` reads from a model is in `_nodes`.

```python
class Inputs(pydantic.BaseModel):
    x: Differentiable[Array[np.float32, (None,)]]   # a vector of any length
    w: Differentiable[Array[np.float32, (3, 3)]]    # a fixed 3x3 matrix
    t: Array[np.float32, ()]                        # a scalar, not differentiated
    any_rank: Array[np.int32, ...]                  # any shape
    n: int                                          # a static input
```
"""

from __future__ import annotations

from typing import Annotated, Any, get_origin

import jax
import numpy as np
from pydantic_core import core_schema

from ._casting import as_numbers, cast_problem, kind, kind_problem

__all__ = ["DIFFERENTIABLE", "Array", "ArraySpec", "Differentiable", "array_spec", "is_inexact"]


# -- dtypes --------------------------------------------------------------------


def is_inexact(dtype: np.dtype) -> bool:
    """Whether arrays of ``dtype`` have non-trivial tangents (floats and complex)."""
    return kind(np.dtype(dtype)) in ("f", "c")


# -- Array ---------------------------------------------------------------------


class ArraySpec:
    """The dtype and shape an array field accepts; the metadata behind `Array`.

    A shape is a tuple of sizes, where ``None`` accepts any size and one ``...``
    accepts any number of axes; ``...`` alone accepts any shape and ``()`` a scalar.
    """

    def __init__(self, dtype: Any, shape: Any) -> None:
        try:
            self.dtype = np.dtype(dtype)
        except TypeError:
            raise TypeError(
                f"Array[...] needs a NumPy dtype such as np.float32, got {dtype!r}."
            ) from None
        if kind(self.dtype) is None:
            raise TypeError(f"Array[...] needs a numeric or bool dtype, got {self.dtype}.")
        if shape is Ellipsis:
            shape = (...,)
        if not isinstance(shape, tuple) or not all(
            s is None or s is Ellipsis or (isinstance(s, int) and s >= 0) for s in shape
        ):
            raise TypeError(
                f"Array[...] needs a shape: a tuple of sizes, None (any size) and at most "
                f"one ... (any number of axes), or ... alone; got {shape!r}."
            )
        if shape.count(...) > 1:
            raise TypeError(f"Array shape {shape!r} holds more than one '...'.")
        self.shape: tuple[Any, ...] = shape

    def __repr__(self) -> str:
        return f"Array[{self.dtype.name}, {self.shape_text()}]"

    def shape_text(self) -> str:
        """The declared shape as written in messages: `(3,)`, `(None, 3)`, `(..., 2)`."""
        inner = ", ".join("..." if s is ... else str(s) for s in self.shape)
        return f"({inner},)" if len(self.shape) == 1 else f"({inner})"

    def shape_matches(self, shape: tuple[int, ...]) -> bool:
        """Whether a concrete shape fits the declared one.

        `None` matches any size of its axis and `...` any number of axes.

        **Arguments:**

        - `shape`: the shape of a given value.

        **Returns:**

        `True` when the value's shape is accepted.
        """
        spec = self.shape
        if ... in spec:
            cut = spec.index(...)
            head, tail = spec[:cut], spec[cut + 1 :]
            if len(shape) < len(head) + len(tail):
                return False
            pairs = list(zip(head, shape[: len(head)]))
            pairs += list(zip(tail, shape[len(shape) - len(tail) :]))
        else:
            if len(shape) != len(spec):
                return False
            pairs = list(zip(spec, shape))
        return all(s is None or s == n for s, n in pairs)

    def check(
        self, shape: tuple[int, ...], dtype: np.dtype, casting: str = "checked"
    ) -> str | None:
        """Why an array of ``shape`` and ``dtype`` does not fit (looking at the dtype
        alone, not the values), or ``None``."""
        problem = kind_problem(np.dtype(dtype), self.dtype, casting)
        if problem:
            return problem
        if not self.shape_matches(tuple(shape)):
            return f"expected shape {self.shape_text()}, got {tuple(shape)}"
        return None

    def validate(self, value: Any, casting: str = "checked") -> Any:
        """``value`` as an array of this dtype: JAX arrays stay JAX arrays (cast on
        their device), anything else becomes a NumPy array. A cast that would change
        a value is refused under ``casting="checked"`` (see `gradpipe.component`'s
        casting rules): integers that do not fit, finite floats that would become
        ``inf``, floats to integers, complex to real, bool to numbers."""
        if isinstance(value, jax.core.Tracer):
            raise ValueError(
                "got a JAX tracer; component endpoints take concrete arrays. Call the "
                "component's function directly inside jit/grad."
            )
        if value is None:
            raise ValueError(f"expected an array of {self.dtype.name}, got None")
        if isinstance(value, jax.Array) and value.is_deleted():
            raise ValueError(
                "the JAX array was deleted (or donated to a jitted function); pass a live array"
            )
        if not isinstance(value, jax.Array):
            try:
                value = as_numbers(value) if casting == "checked" else np.asarray(value)
            except (ValueError, TypeError) as error:
                raise ValueError(f"expected an array of {self.dtype.name}: {error}") from None
        problem = self.check(value.shape, value.dtype, casting)
        if problem:
            raise ValueError(problem)
        if value.dtype != self.dtype:
            problem = cast_problem(value, self.dtype, casting)
            if problem:
                raise ValueError(problem)
            with np.errstate(all="ignore"):
                value = value.astype(self.dtype)
        return value

    def _validate_with_context(self, value: Any, info: Any) -> Any:
        context = info.context if isinstance(info.context, dict) else {}
        return self.validate(value, context.get("casting", "checked"))

    # pydantic hooks: validation is a plain function; JSON schema describes nested
    # lists of numbers with the dtype and shape as extension keys.
    def __get_pydantic_core_schema__(self, source: Any, handler: Any) -> Any:
        return core_schema.with_info_plain_validator_function(
            self._validate_with_context,
            serialization=core_schema.plain_serializer_function_ser_schema(
                _serialize_array, info_arg=True
            ),
        )

    def __get_pydantic_json_schema__(self, schema: Any, handler: Any) -> dict[str, Any]:
        number = dict(b="boolean", u="integer", i="integer").get(kind(self.dtype) or "", "number")
        js: dict[str, Any] = {"type": number}
        if ... not in self.shape:
            for size in reversed(self.shape):
                js = {"type": "array", "items": js}
                if size is not None:
                    js.update(minItems=size, maxItems=size)
        else:
            js = {}
        js["x-dtype"] = self.dtype.name
        js["x-shape"] = ["..." if s is ... else s for s in self.shape]
        return js


def _serialize_array(value: Any, info: Any) -> Any:
    return np.asarray(value).tolist() if info.mode == "json" else value


class Array:
    """An array field: ``Array[dtype, shape]``.

    ``dtype`` is a NumPy dtype (``np.float32``, ``"int32"``...); ``shape`` a tuple of
    sizes with ``None`` for any size and at most one ``...`` for any number of axes,
    or ``...`` alone for any shape; ``()`` is a scalar. Values are validated and cast
    to ``dtype`` only when the cast keeps every value (``int`` to ``float`` is
    accepted, ``float`` to ``int``, ``1e40`` to ``float32`` and ``-1`` to ``uint8``
    are not; see the casting table of the components guide): NumPy arrays, nested
    lists and numbers become NumPy arrays, JAX arrays stay on their device. Array
    fields are traced (a new value does not recompile); wrap them in `Differentiable`
    to take derivatives with respect to them.
    """

    def __class_getitem__(cls, params: Any) -> Any:
        if not isinstance(params, tuple) or len(params) != 2:
            raise TypeError("Write Array[dtype, shape], e.g. Array[np.float32, (None, 3)].")
        return Annotated[Any, ArraySpec(*params)]


class _DifferentiableMarker:
    def __repr__(self) -> str:
        return "Differentiable"

    def __get_pydantic_json_schema__(self, schema: Any, handler: Any) -> dict[str, Any]:
        js = dict(handler(schema))
        js["x-differentiable"] = True
        return js


DIFFERENTIABLE = _DifferentiableMarker()


class Differentiable:
    """Marks an `Array` field as one the gradient endpoints may differentiate with
    respect to (inputs) or of (outputs): ``Differentiable[Array[np.float32, (None,)]]``.

    The array's dtype is a real float (the usual case), an integer or bool (whose
    derivatives are zeros of dtype ``jax.dtypes.float0``, as in JAX); complex arrays
    are refused.
    """

    def __class_getitem__(cls, item: Any) -> Any:
        spec = array_spec(item)
        if spec is None:
            raise TypeError(f"Differentiable[...] takes an Array[...] type, got {item!r}.")
        if kind(spec.dtype) == "c":
            raise TypeError(
                f"Differentiable[...] supports real and integer dtypes, not {spec.dtype}: "
                f"split a complex array into real and imaginary fields."
            )
        return Annotated[item, DIFFERENTIABLE]


def array_spec(annotation: Any) -> ArraySpec | None:
    """The `ArraySpec` of an ``Array[...]`` annotation (also inside ``Differentiable``),
    or ``None``."""
    if get_origin(annotation) is Annotated:
        for meta in annotation.__metadata__:
            if isinstance(meta, ArraySpec):
                return meta
    return None
