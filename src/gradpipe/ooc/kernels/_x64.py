"""What ``jax_enable_x64`` decides in `gradpipe.ooc`: default dtypes, and the dtype
of a result that becomes a JAX value.

`gradpipe.ooc` follows ``jax.numpy`` wherever the flag matters:

- **Default dtypes** (where no input dtype decides: creation without ``dtype``,
  Python numbers and lists of them, the sum of ints, indices and counts) are
  ``jax.numpy``'s: float32, complex64 and int32 while x64 is off (JAX's default),
  float64, complex128 and int64 while it is on.
- **A result that must become a JAX value** (a 0-d result, the gradient of an
  in-memory parameter) gets the dtype ``jnp.asarray`` would give it: a float64
  one is rounded to float32, an int64 one wrapped to int32, a complex128 one
  rounded to complex64 while x64 is off. The first such rounding in a process
  warns once (`jax_value_dtype`).
- **DiskArray results** keep NumPy's dtypes on disk, whatever the flag: a float64
  array stays float64 and so do its reductions along axes and its gradients.

The flag is read when a function is called, in the caller's thread, and the
dtype it gives is fixed in the operation then: an operation's host code runs
later (under ``jax.jit``) on JAX's callback thread, where a ``jax.enable_x64``
context of the caller does not hold.
"""

from __future__ import annotations

import os
import sys
import warnings
from types import FrameType

import numpy as np
from numpy.typing import DTypeLike

from ._promotion import canonical_dtype

__all__ = [
    "accumulation_dtype",
    "default_dtypes",
    "index_dtype",
    "jax_value_dtype",
    "number_dtype",
    "x64_enabled",
]

#: Whether a rounding to a 32-bit JAX value has been warned about in this process.
_warned = False


def x64_enabled() -> bool:
    """Whether ``jax_enable_x64`` is on in this thread (a ``jax.enable_x64`` context included)."""
    return canonical_dtype(np.float64) == np.float64


def default_dtypes() -> dict[str, np.dtype]:
    """The array API's default dtypes, as ``jax.numpy`` has them now."""
    wide = x64_enabled()
    return {
        "real floating": np.dtype(np.float64 if wide else np.float32),
        "complex floating": np.dtype(np.complex128 if wide else np.complex64),
        "integral": np.dtype(np.int64 if wide else np.int32),
        "indexing": np.dtype(np.int64 if wide else np.int32),
    }


def number_dtype(value: complex | np.generic) -> np.dtype:
    """The dtype of an array made from a Python number (or a NumPy scalar) without a
    ``dtype``: bool for a bool, else the default of its kind."""
    if isinstance(value, (bool, np.bool_)):
        return np.dtype(bool)
    defaults = default_dtypes()
    if isinstance(value, (int, np.integer)):
        return defaults["integral"]
    if isinstance(value, (complex, np.complexfloating)):
        return defaults["complex floating"]
    return defaults["real floating"]


def accumulation_dtype(dtype: DTypeLike) -> np.dtype:
    """The dtype a sum or product of ``dtype`` values is computed in by default, as
    ``jax.numpy``'s: bools and signed ints give the default int (a wider int
    stays), unsigned ints the unsigned int of its width; others keep theirs."""
    dtype = np.dtype(dtype)
    integral = default_dtypes()["integral"]
    if dtype.kind == "b":
        return integral
    if dtype.kind == "i":
        return np.result_type(dtype, integral)
    if dtype.kind == "u":
        return np.result_type(dtype, np.dtype(f"uint{8 * integral.itemsize}"))
    return dtype


def index_dtype(largest: int, what: str) -> np.dtype:
    """The default index dtype, for indices or counts up to ``largest``.

    **Raises:** `ValueError` naming ``what`` when ``largest`` does not fit in it
    (more than 2**31 - 1 while x64 is off): an index must not wrap around.
    """
    dtype = default_dtypes()["indexing"]
    if largest > np.iinfo(dtype).max:
        raise ValueError(
            f"{what}: indices up to {largest} do not fit in {dtype.name}, the default index "
            "dtype while jax_enable_x64 is off. Turn x64 on "
            "(jax.config.update('jax_enable_x64', True)) for int64 indices."
        )
    return dtype


def jax_value_dtype(dtype: DTypeLike, what: str) -> np.dtype:
    """The dtype a result of ``dtype`` has as a JAX value: ``jnp.asarray``'s (a
    32-bit one for a 64-bit one while x64 is off).

    The first rounding in a process warns once, with a `UserWarning` that names
    ``what`` (e.g. ``"sum"``) and the ways to keep 64 bits: silently, a float64
    loss of float64 data would lose half its digits.
    """
    global _warned
    dtype = np.dtype(dtype)
    jax_dtype = canonical_dtype(dtype)
    if jax_dtype != dtype and not _warned:
        _warned = True
        warnings.warn(
            f"gradpipe.ooc: the {dtype.name} result of {what} becomes a {jax_dtype.name} "
            "JAX value, as jnp.asarray makes it while jax_enable_x64 is off. To keep 64 "
            "bits, turn x64 on (jax.config.update('jax_enable_x64', True)) or keep the "
            "result on disk (keepdims=True for a reduction); to compute in 32 bits from the "
            "start, convert the data with ooc.astype(x, ooc.float32). (Warned once per "
            "process.)",
            UserWarning,
            stacklevel=_caller_level(),
        )
    return jax_dtype


def _caller_level() -> int:
    """The ``stacklevel`` of the first frame outside gradpipe and JAX: the user's call."""
    import jax

    inside = (
        os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep,
        os.path.dirname(os.path.abspath(jax.__file__)) + os.sep,
    )
    frame: FrameType | None = sys._getframe(2)
    level = 2
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(inside):
        frame, level = frame.f_back, level + 1
    return level
