"""Flattening a component's inputs and outputs along the nodes of their models, and
building them back.

An input flattens to its array leaves (as JAX arrays, in a fixed order), their paths,
and a *structure*: a hashable token holding everything else — the static values,
list lengths, dict keys and which optional fields are ``None``. Two inputs with equal
structures and bitwise-equal arrays are the same input; the structure alone selects
the compiled function.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pydantic

from ._casting import cast_problem
from ._keys import StaticValue
from ._nodes import ArrayNode, DictNode, ListNode, ModelNode, Node, OptionalNode, StaticNode
from ._paths import ComponentInputError, join_index, join_key, join_name

__all__ = [
    "FlatInputs",
    "flatten_inputs",
    "flatten_outputs",
    "loc_to_path",
    "on_device",
    "rebuild",
    "to_device",
    "validation_error",
    "x64_problem",
]


@dataclass(frozen=True, eq=False)
class FlatInputs:
    """A validated input, flattened.

    - `structure`: the hashable token described in the module docstring.
    - `arrays`: the array leaves of their declared dtype: JAX arrays, or, when
      flattened with ``host=True``, NumPy arrays for leaves given as anything but a
      JAX array (see `on_device`), or, when flattened with ``abstract=True``,
      ``jax.ShapeDtypeStruct``s (hence typed ``Any``: the kind follows the flags).
    - `paths`: the canonical path of each array leaf.
    - `nodes`: the `ArrayNode` of each array leaf.
    """

    structure: Any
    arrays: tuple[Any, ...]
    paths: tuple[str, ...]
    nodes: tuple[ArrayNode, ...]


def flatten_inputs(
    node: ModelNode,
    value: pydantic.BaseModel | Mapping[str, Any],
    *,
    abstract: bool = False,
    private: bool = True,
    host: bool = False,
    casting: str = "checked",
) -> FlatInputs:
    """Flatten a validated input model along ``node``.

    With ``abstract=True``, ``value`` is an unvalidated dict whose array leaves are
    ``{"shape": [...], "dtype": "..."}`` dicts, anything with ``shape`` and ``dtype``,
    or concrete values; they become ``jax.ShapeDtypeStruct``s, and static leaves and
    missing fields are validated here.

    With ``private=False``, device arrays may share memory with the caller's NumPy
    arrays (see `to_device`): only for work that finishes before the call returns.

    With ``host=True``, leaves not given as JAX arrays stay NumPy arrays of their
    declared dtype, sharing the caller's memory where they can (no copy, nothing
    sent to a device): for a cache lookup that compares them where they live, and
    `on_device` to compute with them afterwards.
    """
    arrays: list[jax.Array | np.ndarray | jax.ShapeDtypeStruct] = []
    paths: list[str] = []
    nodes: list[ArrayNode] = []

    def walk(node: Node, value: Any, path: str) -> Any:
        if isinstance(node, ArrayNode):
            array: jax.Array | np.ndarray | jax.ShapeDtypeStruct
            if value is None:
                raise ComponentInputError(path, f"Input {path!r} is required, got None.")
            problem = x64_problem(node.spec.dtype)
            if problem:
                raise ComponentInputError(path, f"Input {path!r}: {problem}.")
            if abstract:
                array = _abstract_array(node, value, path, casting)
            elif host and not isinstance(value, jax.Array):
                array = np.asarray(value, dtype=node.spec.dtype)
            else:
                array = to_device(value, node.spec.dtype, private)
            if not node.spec.shape_matches(array.shape):
                raise ComponentInputError(
                    path,
                    f"Input {path!r} expected shape {node.spec.shape_text()}, got {array.shape}.",
                )
            arrays.append(array)
            paths.append(path)
            nodes.append(node)
            return len(arrays) - 1
        if isinstance(node, StaticNode):
            if abstract:
                try:
                    value = node.validate(value)
                except pydantic.ValidationError as error:
                    raise validation_error(node, error, path) from None
            try:
                return StaticValue(value)
            except TypeError as error:
                raise ComponentInputError(path, f"Input {path!r}: {error}") from None
        if isinstance(node, OptionalNode):
            return None if value is None else walk(node.inner, value, path)
        if isinstance(node, ModelNode):
            if isinstance(value, pydantic.BaseModel):
                return tuple(
                    walk(child, getattr(value, name), join_name(path, name))
                    for name, child in node.fields
                )
            if not isinstance(value, Mapping):
                raise ComponentInputError(path, f"Input {path or 'root'!r} must be a dict.")
            return tuple(
                walk(child, _field(node, value, name, path), join_name(path, name))
                for name, child in node.fields
            )
        if isinstance(node, ListNode):
            if not isinstance(value, list | tuple):
                raise ComponentInputError(path, f"Input {path!r} must be a list.")
            return ("list", *(walk(node.item, v, join_index(path, i)) for i, v in enumerate(value)))
        if not isinstance(value, Mapping):
            raise ComponentInputError(path, f"Input {path!r} must be a dict.")
        return (
            "dict",
            *((key, walk(node.value, value[key], join_key(path, key))) for key in sorted(value)),
        )

    structure = walk(node, value, "")
    return FlatInputs(structure, tuple(arrays), tuple(paths), tuple(nodes))


def x64_problem(dtype: np.dtype) -> str | None:
    """Why JAX cannot hold arrays of ``dtype`` now, or ``None`` when it can.

    With JAX's 64-bit types off (its default), a float64 or int64 array silently
    becomes float32 or int32: a component declaring one would compute with less
    precision, or with wrapped integers, and report nothing.
    """
    canonical = jax.dtypes.canonicalize_dtype(dtype)
    if canonical == dtype:
        return None
    return (
        f"it is declared {np.dtype(dtype).name}, but JAX's 64-bit types are off, so "
        f"JAX would silently turn it into {np.dtype(canonical).name}. Turn them on "
        f"with jax.config.update('jax_enable_x64', True) (or call inside "
        f"`with jax.enable_x64(True):`), or declare {np.dtype(canonical).name}"
    )


def to_device(value: Any, dtype: np.dtype, private: bool = True) -> jax.Array:
    """``value`` as a JAX array of ``dtype``.

    On the CPU, ``jax.device_put`` of a NumPy array may share its memory, and the
    transfer may read it after the call returns, so a caller reusing their buffer
    would change the array under a result or a cache key. ``private=True`` copies it
    first, so nothing outside can change the array; ``private=False`` saves that copy
    for work the caller waits for before returning. (``jnp.asarray`` of a large NumPy
    array is several times slower than either.)
    """
    if isinstance(value, jax.Array):
        return jnp.asarray(value, dtype=dtype)  # also drops a weak type
    if private:
        return jax.device_put(np.array(value, dtype=dtype, copy=True))
    return jax.device_put(np.asarray(value, dtype=dtype))


def on_device(arrays: tuple[Any, ...], private: bool = True) -> tuple[jax.Array, ...]:
    """The leaves of a ``host=True`` flattening as JAX arrays (see `to_device`); JAX
    arrays pass through. ``private=False`` also suits NumPy leaves that are already
    private copies (`private_copy`)."""
    return tuple(
        jax.device_put(np.array(a, copy=True) if private else a) if isinstance(a, np.ndarray) else a
        for a in arrays
    )


def _field(node: ModelNode, value: Mapping[str, Any], name: str, path: str) -> Any:
    if name in value:
        return value[name]
    info = node.model.model_fields[name]
    if info.is_required():
        where = join_name(path, name)
        raise ComponentInputError(where, f"Input {where!r} is required.")
    return info.get_default(call_default_factory=True)


def _abstract_array(node: ArrayNode, value: Any, path: str, casting: str) -> jax.ShapeDtypeStruct:
    if isinstance(value, Mapping) and set(value) == {"shape", "dtype"}:
        shape, dtype = value["shape"], value["dtype"]
    elif hasattr(value, "shape") and hasattr(value, "dtype"):
        shape, dtype = value.shape, value.dtype
    else:
        try:
            concrete = np.asarray(value)
        except (TypeError, ValueError):
            concrete = np.asarray(None)
        if isinstance(value, Mapping) or concrete.dtype == object:
            raise ComponentInputError(
                path,
                f"Abstract input {path!r} must be {{'shape': [...], 'dtype': '...'}} or an array.",
            )
        shape, dtype = concrete.shape, concrete.dtype
    try:
        if isinstance(shape, str | bytes) or not all(
            isinstance(n, int | np.integer) and not isinstance(n, bool) and n >= 0 for n in shape
        ):  # int() would take 1.5 as 1, True as 1, and let -1 through
            raise TypeError
        shape, dtype = tuple(int(n) for n in shape), np.dtype(dtype)
    except (TypeError, ValueError):
        raise ComponentInputError(
            path,
            f"Abstract input {path!r} needs a list of non-negative ints as shape and a dtype name.",
        ) from None
    problem = node.spec.check(shape, dtype, casting)
    if problem:
        raise ComponentInputError(path, f"Abstract input {path!r}: {problem}.")
    return jax.ShapeDtypeStruct(shape, node.spec.dtype)


def rebuild(node: Node, structure: Any, arrays: tuple[Any, ...] | list[Any]) -> Any:
    """The nested input that ``fn`` receives: models become dicts, lists stay lists,
    array leaves are taken from ``arrays`` (tracers inside jit)."""
    if isinstance(node, ArrayNode):
        return arrays[structure]
    if isinstance(node, StaticNode):
        return structure.value
    if isinstance(node, OptionalNode):
        return None if structure is None else rebuild(node.inner, structure, arrays)
    if isinstance(node, ModelNode):
        return {
            name: rebuild(child, token, arrays)
            for (name, child), token in zip(node.fields, structure)
        }
    if isinstance(node, ListNode):
        return [rebuild(node.item, token, arrays) for token in structure[1:]]
    return {key: rebuild(node.value, token, arrays) for key, token in structure[1:]}


def flatten_outputs(
    node: ModelNode, value: Any
) -> tuple[Any, list[str], list[Any], list[ArrayNode]]:
    """The structure, paths, leaves and nodes of ``fn``'s output (arrays, tracers or
    ``ShapeDtypeStruct``s), checked against the output model; `rebuild` inverts it."""
    paths: list[str] = []
    leaves: list[Any] = []
    nodes: list[ArrayNode] = []

    def walk(node: Node, value: Any, path: str) -> Any:
        where = f"The function's output {path!r}" if path else "The function's output"
        if isinstance(node, OptionalNode):
            return None if value is None else walk(node.inner, value, path)
        if isinstance(node, ArrayNode):
            if isinstance(value, bool | int | float | complex):
                # jax.jit returns a Python number as an array: so does a component,
                # when the number keeps its value in the declared dtype.
                problem = cast_problem(np.asarray(value), node.spec.dtype)
                if problem:
                    raise TypeError(f"{where} is the Python number {value!r}: {problem}.")
                value = jnp.asarray(value, node.spec.dtype)
            if not hasattr(value, "shape") or not hasattr(value, "dtype"):
                raise TypeError(f"{where} must be an array, got {type(value).__name__}.")
            problem = x64_problem(node.spec.dtype)
            if problem:
                raise TypeError(f"{where}: {problem}.")
            if np.dtype(value.dtype) != node.spec.dtype:
                raise TypeError(
                    f"{where} has dtype {value.dtype}, but the output model declares "
                    f"{node.spec.dtype.name}. Cast it in the function."
                )
            if not node.spec.shape_matches(tuple(value.shape)):
                raise TypeError(
                    f"{where} has shape {tuple(value.shape)}, but the output model declares "
                    f"{node.spec.shape_text()}."
                )
            paths.append(path)
            leaves.append(value)
            nodes.append(node)
            return len(leaves) - 1
        if isinstance(node, ModelNode):
            if isinstance(value, pydantic.BaseModel):
                value = dict(value)
            if not isinstance(value, Mapping):
                raise TypeError(f"{where} must be a dict of the output model's fields.")
            names = [name for name, _ in node.fields]
            extra = sorted(set(value) - set(names))
            if extra:
                raise TypeError(f"{where} has fields {extra} that the output model lacks.")
            tokens = []
            for name, child in node.fields:
                if name not in value and not isinstance(child, OptionalNode):
                    raise TypeError(f"{where} lacks the field {join_name(path, name)!r}.")
                tokens.append(walk(child, value.get(name), join_name(path, name)))
            return tuple(tokens)
        if isinstance(node, ListNode):
            if not isinstance(value, list | tuple):
                raise TypeError(f"{where} must be a list, got {type(value).__name__}.")
            return ("list", *(walk(node.item, v, join_index(path, i)) for i, v in enumerate(value)))
        if isinstance(node, DictNode):
            if not isinstance(value, Mapping):
                raise TypeError(f"{where} must be a dict, got {type(value).__name__}.")
            return (
                "dict",
                *((k, walk(node.value, value[k], join_key(path, k))) for k in sorted(value)),
            )
        raise TypeError(f"{where} is static; outputs must be arrays.")

    structure = walk(node, value, "")
    return structure, paths, leaves, nodes


def loc_to_path(node: Node, loc: tuple[Any, ...]) -> str:
    """The path of a pydantic error location, read along the nodes."""
    path = ""
    for item in loc:
        while isinstance(node, OptionalNode):
            node = node.inner
        if isinstance(node, ModelNode) and isinstance(item, str):
            children = dict(node.fields)
            if item not in children:
                return join_name(path, item)
            path, node = join_name(path, item), children[item]
        elif isinstance(node, ListNode) and isinstance(item, int):
            path, node = join_index(path, item), node.item
        elif isinstance(node, DictNode) and isinstance(item, str):
            path, node = join_key(path, item), node.value
        else:
            break
    return path


def validation_error(
    node: Node, error: pydantic.ValidationError, prefix: str = ""
) -> ComponentInputError:
    """A `ComponentInputError` naming the first failing field of ``error``."""
    first = error.errors()[0]
    inner = loc_to_path(node, tuple(first["loc"]))
    path = prefix + ("." + inner if prefix and inner and inner[0] != "[" else inner)
    count = error.error_count()
    more = f" ({count - 1} more error{'s' if count > 2 else ''})" if count > 1 else ""
    where = f"Input {path!r}" if path else "The input"
    message = first["msg"].removeprefix("Value error, ")
    return ComponentInputError(path, f"{where}: {message}{more}.")
