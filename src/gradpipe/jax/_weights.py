"""Weights: the array values of an operator, kept out of its configuration.

A configuration is JSON, and JSON has no exact form for an array. So the
configuration of a JAX operator records each array only as ``{"shape", "dtype"}``
(plus ``"weak_type": true`` for a weakly typed array such as ``jnp.asarray(0.25)``:
it takes the dtype of what it multiplies, so a reloaded strong copy would turn a
float16 pipeline's output into float32),
and the values travel separately as a *weights blob*: a safetensors file whose
tensors are named by their PyTree path (``.operators[0].log_k``). Nothing is
pickled, so a blob from an untrusted registry can be read safely.

Loading checks every path, shape and dtype against the operator that receives the
weights. A blob written for a different pipeline would otherwise fill leaves in
flattening order and produce a model that runs and is wrong.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any, TypeVar

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from gradpipe.core import ConfigError, Operator, Registry

__all__ = [
    "WeightsError",
    "array_spec",
    "from_registry",
    "is_array_spec",
    "placeholder_array",
    "serialize_weights",
    "with_weights",
]

_FORMAT = "gradpipe.weights/1"
_T = TypeVar("_T")


class WeightsError(ValueError):
    """A weights blob that does not fit the operator it is loaded into."""


# -- the configuration's view of an array ---------------------------------------


def array_spec(value: Any) -> dict[str, Any]:
    """``{"shape": [...], "dtype": "..."}``: what a configuration records of an array,
    with ``"weak_type": True`` added for a weakly typed JAX array."""
    spec: dict[str, Any] = {"shape": [int(d) for d in value.shape], "dtype": str(value.dtype)}
    if getattr(value, "weak_type", False):
        spec["weak_type"] = True
    return spec


def is_array_spec(value: Any) -> bool:
    """Whether ``value`` is a dict written by `array_spec`."""
    return (
        type(value) is dict
        and set(value) - {"weak_type"} == {"shape", "dtype"}
        and value.get("weak_type", True) is True
        and isinstance(value["dtype"], str)
        and isinstance(value["shape"], (list, tuple))
        and all(type(d) is int and d >= 0 for d in value["shape"])
    )


def placeholder_array(spec: dict[str, Any]) -> jax.Array:
    """An array of the spec's shape and dtype, waiting for its weights.

    Floating and complex placeholders are NaN, so that an operator rebuilt from its
    state and used before `with_weights` gives NaN rather than a plausible number.
    """
    dtype = np.dtype(jnp.dtype(spec["dtype"]))  # jnp knows "bfloat16", NumPy alone does not
    fill = np.nan if np.issubdtype(dtype, np.inexact) else 0
    if spec.get("weak_type"):
        weak = jnp.full(tuple(spec["shape"]), fill)  # a Python fill gives a weak array
        if weak.dtype == dtype:
            return weak
    return jnp.asarray(np.full(tuple(spec["shape"]), fill, dtype=dtype))


# -- blobs ----------------------------------------------------------------------


def _array_leaves(tree: Any) -> Iterator[tuple[str, Any]]:
    """``(path, leaf)`` for every array leaf, in flattening order."""
    for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
        if eqx.is_array(leaf):
            yield jax.tree_util.keystr(path), leaf


def _describe(dtype: Any, shape: tuple[int, ...]) -> str:
    return f"{np.dtype(dtype)}[{', '.join(str(d) for d in shape)}]"


def serialize_weights(tree: Any) -> bytes:
    """Every array leaf of ``tree`` as a safetensors blob keyed by PyTree path.

    The same tree always gives the same bytes, so a registry address depends only
    on the values.

    **Arguments:**

    - `tree`: any PyTree: a `JaxOperator`, a `JaxSequential`, an ``eqx.Module``.

    **Returns:**

    The blob, for `with_weights` or ``Registry.store(op, weights=...)``.
    """
    import safetensors.numpy

    tensors = {path: np.array(leaf, order="C") for path, leaf in _array_leaves(tree)}
    try:
        return safetensors.numpy.save(tensors, metadata={"format": _FORMAT})
    except Exception as error:  # safetensors names no path in its errors
        kinds = ", ".join(f"{p}: {a.dtype}" for p, a in tensors.items())
        raise WeightsError(f"Cannot write these arrays as safetensors ({kinds}): {error}") from None


def _numpy_dtype(code: str) -> np.dtype:
    """The NumPy dtype of a safetensors dtype code (``"F32"``, ``"BF16"``, ...).

    ``safetensors.numpy.load`` knows only NumPy's own dtypes, so bfloat16 and the
    float8 types (which ``safetensors.numpy.save`` writes) never loaded back. They
    are read here through ``ml_dtypes``, the package that gives JAX these types.
    """
    import ml_dtypes

    table = {
        "BOOL": np.bool_,
        "U8": np.uint8,
        "I8": np.int8,
        "U16": np.uint16,
        "I16": np.int16,
        "U32": np.uint32,
        "I32": np.int32,
        "U64": np.uint64,
        "I64": np.int64,
        "F16": np.float16,
        "F32": np.float32,
        "F64": np.float64,
        "C64": np.complex64,
        "BF16": ml_dtypes.bfloat16,
        "F8_E4M3": ml_dtypes.float8_e4m3fn,
        "F8_E5M2": ml_dtypes.float8_e5m2,
    }
    if code not in table:
        raise ValueError(f"unsupported tensor dtype {code!r}")
    return np.dtype(table[code])


def _load_tensors(blob: bytes) -> dict[str, np.ndarray]:
    from safetensors import deserialize

    return {
        name: np.frombuffer(view["data"], dtype=_numpy_dtype(view["dtype"])).reshape(view["shape"])
        for name, view in deserialize(blob)
    }


def with_weights(tree: _T, blob: bytes) -> _T:
    """A copy of ``tree`` whose array leaves hold the values in ``blob``.

    **Arguments:**

    - `tree`: the PyTree that receives the weights; its array leaves give the
      expected paths, shapes, dtypes and weak types (their values are ignored).
    - `blob`: bytes written by `serialize_weights`.

    **Returns:**

    The new tree. ``tree`` is not modified.

    Raises `WeightsError` naming the path when the blob lacks a leaf, holds a tensor
    the tree has no leaf for, or holds one of another shape or dtype.
    """
    try:
        tensors = _load_tensors(bytes(blob))
    except Exception as error:
        raise WeightsError(
            f"The weights blob is not a safetensors file ({error}). Pass bytes written "
            f"by serialize_weights()."
        ) from None
    expected = dict(_array_leaves(tree))
    for path in expected:
        if path not in tensors:
            leaf = expected[path]
            raise WeightsError(
                f"The weights blob has no tensor for {path} (expected "
                f"{_describe(leaf.dtype, leaf.shape)}); it holds {sorted(tensors)}. Was it "
                f"written for another pipeline?"
            )
    for path in tensors:
        if path not in expected:
            raise WeightsError(
                f"The weights blob holds a tensor {path} that {type(tree).__name__} has no "
                f"array for; its arrays are {sorted(expected)}."
            )
    for path, leaf in expected.items():
        got = tensors[path]
        if tuple(got.shape) != tuple(leaf.shape) or np.dtype(got.dtype) != np.dtype(leaf.dtype):
            hint = ""
            narrowed = np.dtype(jax.dtypes.canonicalize_dtype(got.dtype))
            if narrowed == np.dtype(leaf.dtype) != got.dtype:
                hint = (
                    f" JAX's 64-bit types are off, so JAX holds {got.dtype} arrays as "
                    f"{leaf.dtype}: load the weights after "
                    f"jax.config.update('jax_enable_x64', True) (or inside "
                    f"`with jax.enable_x64(True):`), rebuilding the operator there too."
                )
            raise WeightsError(
                f"Weights for {path}: {type(tree).__name__} expects "
                f"{_describe(leaf.dtype, leaf.shape)}, the blob holds "
                f"{_describe(got.dtype, got.shape)}.{hint}"
            )

    def replace(path: Any, leaf: Any) -> Any:
        if not eqx.is_array(leaf):
            return leaf
        value = tensors[jax.tree_util.keystr(path)]
        if isinstance(leaf, np.ndarray):
            return value.copy()
        if getattr(leaf, "weak_type", False):  # keep it weak: it decides the dtype of what it meets
            return leaf.at[...].set(value)
        return jnp.asarray(value)

    return jax.tree_util.tree_map_with_path(replace, tree)


def from_registry(registry: Registry, ref: str, *, like: Any = None) -> Any:
    """Load an operator and its weights from a `Registry`.

    **Arguments:**

    - `registry`: the registry.
    - `ref`: an address, a unique address prefix or a tag.
    - `like`: an operator of the stored structure, whose arrays are replaced. Needed
      when the state alone cannot rebuild the operator (a `JaxModelOp` around an
      arbitrary ``eqx.Module``); otherwise the operator is rebuilt from its state.

    **Returns:**

    The operator with the stored weights.

    ```python
    ref = reg.store(seq, weights=seq.serialize_weights())
    seq2 = from_registry(reg, ref)
    ```
    """
    if like is None:
        op = registry.load(ref)
    else:
        if not isinstance(like, Operator):
            raise TypeError(f"like= must be an operator, got {type(like).__name__}.")
        stored, expected = registry.load_state(ref), like.state
        if (stored["module"], stored["class"]) != (expected["module"], expected["class"]):
            raise ConfigError(
                f"Registry entry {ref!r} holds a {stored['module']}:{stored['class']}, but "
                f"like= is a {expected['module']}:{expected['class']}."
            )
        if stored["config"] != json.loads(json.dumps(expected["config"])):
            raise ConfigError(
                f"Registry entry {ref!r} has the configuration {stored['config']!r:.300}, "
                f"which differs from that of like= ({expected['config']!r:.300})."
            )
        op = like
    return with_weights(op, registry.load_weights(ref))
