"""Exact content keys for the residual cache.

A `ContentKey` stands for one complete input of one component. Two keys are equal
only when the inputs are the same to the bit, so that a cached backward pass is never
served for an input that merely looks equal. Each field of the key is there to stop a
specific wrong answer:

- **Static values carry their type and exact bits** (`StaticValue`). ``1 == 1.0 ==
  True`` and ``-0.0 == 0.0`` in Python, yet a function may branch on the type or the
  sign; comparing bare values would hand one input the other's gradient. Floats are
  compared by their IEEE bits, so a NaN static equals itself and a key holding one
  can be found again. A static dict is compared in its order: ``{"a": 1, "b": 2}``
  and ``{"b": 2, "a": 1}`` are equal in Python, yet ``list(d.values())`` differs,
  and the compiled function of one would serve the other.
- **The structure is compared, not hashed.** It holds the dict keys (sorted), list
  lengths and which optional fields are ``None``, so a dict with equal keys and
  swapped values, or a list split differently, is a different key. A key is never
  collapsed into an ``int``: a bare hash makes every collision a silent wrong
  gradient (CPython hashes ``-1`` and ``-2`` alike).
- **Every array contributes dtype, shape, weak type and devices**, so ``int64[4]``
  and ``int64[2, 2]`` holding the same bytes, or equal bytes read as different
  dtypes, are different keys.
- **Array contents are compared bitwise where they live.** A JAX array input stays
  on its devices: a fingerprint, computed by a jitted reduction there (no host copy)
  and only when cached keys of the same kind must be told apart, narrows the search;
  `__eq__` decides by comparing the bits on the device. A NumPy input is compared on
  the host, where it lives, at memory speed (its bits read as unsigned integers), and
  never copied to the device just to be compared; a key that is kept holds a private,
  read-only copy of it. Either way ``-0.0`` differs from ``0.0`` and NaN equals
  itself. A host leaf carries the device it would be put on (JAX's default device
  at the time), and differs in kind from a device leaf, so a NumPy input and a JAX
  array of equal content are different keys (a miss, never a wrong hit). The
  fingerprint salts each word with its position, so a permuted array lands
  elsewhere. The same ``jax.Array`` object is equal to itself without reading it:
  JAX arrays are immutable.
"""

from __future__ import annotations

import copy
import enum
import struct
from typing import Any, cast

import jax
import jax.numpy as jnp
import numpy as np

__all__ = [
    "ContentKey",
    "StaticValue",
    "bitwise_equal",
    "fingerprint",
    "host_equal",
    "private_copy",
]


# -- static values ---------------------------------------------------------------


def _exact(value: Any) -> Any:
    """A hashable stand-in that is equal only for values of the same type and bits."""
    kind = type(value)
    if value is None or kind in (bool, int, str, bytes):
        return (kind, value)
    if kind is float:
        return (kind, struct.pack("<d", value))
    if kind is complex:
        return (kind, struct.pack("<dd", value.real, value.imag))
    if kind in (list, tuple):
        return (kind, tuple(_exact(v) for v in value))
    if kind is dict:
        # In insertion order: the function may read a static dict in order.
        return (kind, tuple((_exact(k), _exact(v)) for k, v in value.items()))
    if isinstance(value, enum.Enum):
        return (kind, value.name)
    if isinstance(value, np.ndarray | np.generic):
        return (kind, value.dtype.str, value.shape, value.tobytes())
    try:
        hash(value)
    except TypeError:
        raise TypeError(
            f"a static value of type {kind.__name__} is not hashable, so it cannot be "
            f"part of a cache key; use a str, number, bool, None, list or dict."
        ) from None
    return (kind, value)


class StaticValue:
    """A non-array leaf of an input, compared by type and exact bits.

    It keeps a deep copy of the value: the compiled functions of a signature are
    built from its `value` long after the call that made it, and a list the caller
    changed in place meanwhile would be traced with the new contents under the key
    of the old ones.
    """

    __slots__ = ("_exact", "_hash", "value")

    def __init__(self, value: Any) -> None:
        self.value = copy.deepcopy(value)
        self._exact = _exact(self.value)
        self._hash = hash(self._exact)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, StaticValue) and self._exact == other._exact

    def __hash__(self) -> int:
        return self._hash

    def __repr__(self) -> str:
        return f"StaticValue({self.value!r})"


# -- array contents, on the device -------------------------------------------------


def _bits(x: jax.Array) -> list[jax.Array]:
    """``x`` reinterpreted as unsigned integers of the same width."""
    if jnp.issubdtype(x.dtype, jnp.complexfloating):
        return _bits(jnp.real(x)) + _bits(jnp.imag(x))
    if x.dtype == jnp.bool_:
        return [x.astype(jnp.uint8)]
    unsigned = jnp.dtype(f"uint{8 * x.dtype.itemsize}")
    return [jax.lax.bitcast_convert_type(x, unsigned)]


def _spread(x: jax.Array) -> jax.Array:
    # An xorshift-multiply finalizer: every input bit flips about half the output bits.
    x = x ^ (x >> 16)
    x = x * jnp.uint32(0x7FEB352D)
    x = x ^ (x >> 15)
    x = x * jnp.uint32(0x846CA68B)
    return x ^ (x >> 16)


def _words(bits: jax.Array) -> list[jax.Array]:
    flat = bits.ravel()
    if flat.dtype.itemsize == 8:
        return [flat.astype(jnp.uint32), (flat >> 32).astype(jnp.uint32)]
    return [flat.astype(jnp.uint32)]


@jax.jit
def _fingerprint(arrays: tuple[jax.Array, ...]) -> jax.Array:
    h = jnp.uint32(len(arrays))
    for x in arrays:
        for lane, words in enumerate(w for b in _bits(x) for w in _words(b)):
            position = jax.lax.iota(jnp.uint32, words.size)
            salted = words + (position + jnp.uint32(lane)) * jnp.uint32(0x9E3779B1)
            h = _spread(h * jnp.uint32(0x01000193) + jnp.sum(_spread(salted), dtype=jnp.uint32))
    return h


def fingerprint(arrays: tuple[jax.Array, ...]) -> jax.Array:
    """A 32-bit digest of the arrays' bits, computed where they live; it narrows a
    search and never decides equality. Returns a device scalar (``int()`` waits)."""
    return _fingerprint(arrays)


@jax.jit
def _bitwise_equal(a: tuple[jax.Array, ...], b: tuple[jax.Array, ...]) -> jax.Array:
    same = jnp.bool_(True)
    for x, y in zip(a, b):
        for xb, yb in zip(_bits(x), _bits(y)):
            same = same & jnp.all(xb == yb)
    return same


def bitwise_equal(a: tuple[jax.Array, ...], b: tuple[jax.Array, ...]) -> bool:
    """Whether two sequences of arrays of equal dtypes and shapes hold the same bits."""
    return bool(_bitwise_equal(a, b))


# -- array contents, on the host ---------------------------------------------------


def _host_bits(x: np.ndarray) -> np.ndarray:
    """``x`` read as unsigned integers of its item size (no copy for the usual sizes)."""
    size = x.dtype.itemsize
    if size in (1, 2, 4, 8):
        return x.view(np.dtype(f"u{size}"))
    return np.ascontiguousarray(x).view(np.uint8)


def host_equal(x: np.ndarray, y: np.ndarray) -> bool:
    """Whether two NumPy arrays of equal dtype and shape hold the same bits."""
    return bool(np.array_equal(_host_bits(x), _host_bits(y)))


# -- the key ----------------------------------------------------------------------


_HOST = "host"


def _meta(x: jax.Array | np.ndarray) -> tuple[Any, ...]:
    if isinstance(x, np.ndarray):
        # Where it would be put: JAX's default device now (None: the backend's first).
        # The stubs of jax.config lack its flags, and `jax.config.read` refuses this one.
        default = jax.config.jax_default_device  # type: ignore[attr-defined]
        return (x.dtype, x.shape, False, (_HOST, default))
    return (x.dtype, x.shape, x.weak_type, frozenset(x.devices()))


def private_copy(x: np.ndarray) -> np.ndarray:
    """A read-only copy of a NumPy array that nothing outside can change."""
    copy = np.array(x, copy=True, order="C")
    copy.flags.writeable = False
    return copy


class ContentKey:
    """The exact identity of one input: structure (with static values) and arrays.

    Building a key reads no array: the fingerprint (`digest`) of its device arrays is
    computed on first use, which `ResidualCache` asks for only when two keys of the
    same kind (equal structure, dtypes, shapes, devices) must be told apart. NumPy
    leaves are compared on the host and left out of the fingerprint.

    **Arguments:**

    - `structure`: a hashable token with everything but the arrays (see `_tree`).
    - `arrays`: the array leaves, as JAX arrays or NumPy arrays (host inputs), in a
      fixed order. A NumPy leaf must not change while the key is in use: a key that
      is kept must hold private copies (`private`).
    """

    __slots__ = (
        "_digest",
        "_kind_hash",
        "arrays",
        "groups",
        "host",
        "metas",
        "structure",
    )

    def __init__(self, structure: Any, arrays: tuple[jax.Array | np.ndarray, ...]) -> None:
        self.structure = structure
        self.arrays = arrays
        self.metas = tuple(_meta(x) for x in arrays)
        # One jitted call reads all device arrays on one set of devices.
        groups: dict[frozenset, list[int]] = {}
        host: list[int] = []
        for i, meta in enumerate(self.metas):
            if isinstance(arrays[i], np.ndarray):
                host.append(i)
            else:
                groups.setdefault(meta[3], []).append(i)
        self.groups = tuple(tuple(ix) for ix in groups.values())
        self.host = tuple(host)
        self._kind_hash = hash((structure, self.metas))
        self._digest: tuple[int, ...] | None = None

    def private(self) -> ContentKey:
        """This key with private, read-only copies of its NumPy leaves (itself when it
        has none), fit to be kept after the caller's buffers change."""
        if not self.host:
            return self
        arrays = list(self.arrays)
        for i in self.host:  # the indices of the NumPy leaves (see __init__)
            arrays[i] = private_copy(cast(np.ndarray, arrays[i]))
        key = ContentKey.__new__(ContentKey)
        key.structure, key.arrays, key.metas = self.structure, tuple(arrays), self.metas
        key.groups, key.host, key._kind_hash = self.groups, self.host, self._kind_hash
        key._digest = self._digest
        return key

    @property
    def nbytes(self) -> int:
        """Bytes held by the key's copies of the input arrays (counted in `max_bytes`)."""
        return sum(x.nbytes for x in self.arrays)

    @property
    def digest(self) -> tuple[int, ...]:
        """The fingerprints of the device arrays, one per set of devices (computed
        once); NumPy leaves are left out (they are compared exactly on the host)."""
        if self._digest is None:
            # Each group indexes device leaves only (see __init__).
            found = [
                fingerprint(cast("tuple[jax.Array, ...]", tuple(self.arrays[i] for i in ix)))
                for ix in self.groups
            ]
            self._digest = tuple(int(d) for d in found)
        return self._digest

    def same_kind(self, other: ContentKey) -> bool:
        """Equal structure (static values included), dtypes, shapes and devices."""
        return (
            self._kind_hash == other._kind_hash
            and self.metas == other.metas
            and self.structure == other.structure
        )

    def same_host(self, other: ContentKey) -> bool:
        """Whether the NumPy leaves of two keys of the same kind hold the same bits."""
        return all(
            host_equal(cast(np.ndarray, self.arrays[i]), cast(np.ndarray, other.arrays[i]))
            for i in self.host
        )

    def __hash__(self) -> int:
        return hash((self._kind_hash, self.digest))

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if not isinstance(other, ContentKey):
            return NotImplemented
        if not self.same_kind(other):
            return False
        if self._digest is not None and other._digest is not None and self._digest != other._digest:
            return False
        # The host first: it answers at memory speed without waiting for a device.
        if not self.same_host(other):
            return False
        for ix in self.groups:
            # Each group indexes device leaves only (see __init__).
            pairs = cast(
                "list[tuple[jax.Array, jax.Array]]",
                [(self.arrays[i], other.arrays[i]) for i in ix],
            )
            pairs = [(x, y) for x, y in pairs if x is not y]
            if pairs and not bitwise_equal(tuple(x for x, _ in pairs), tuple(y for _, y in pairs)):
                return False
        return True
