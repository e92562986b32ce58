"""Wire formats for arrays: a binary msgpack frame and JSON with base64 buffers.

Both formats carry the same document: JSON-like values (dicts with string keys,
lists, str, int, float, bool, None) where each array is a small dict

```python
{"object_type": "array", "dtype": "float32", "shape": [2, 3],
 "data": {"buffer": ..., "encoding": "raw" | "base64" | "json"}}
```

- `BINARY` (``application/x-gradpipe+msgpack``): a msgpack document whose array
  buffers are msgpack ``bin`` values holding the raw little-endian bytes (any msgpack
  library reads it; `_msgpack` writes and reads it without copying the buffers).
- `JSON` (``application/json``): the buffer is a base64 string (``"base64"``) or a
  nested list of numbers (``"json"``, handy for hand-written requests).

Decoding never unpickles or evaluates anything: only the dtypes in
`ALLOWED_DTYPES` are accepted, and a buffer must hold exactly
``prod(shape) * itemsize`` bytes. Every failure is a `PayloadError` that names the
path of the offending value.
"""

from __future__ import annotations

import json
import math
import secrets
import sys
from typing import Any

import numpy as np

from gradpipe.component._casting import cast_numbers

from ._base64 import b64decode, b64encode
from ._json_body import Base64Text
from ._json_body import loads as load_json
from ._msgpack import pack_pieces, unpack

__all__ = [
    "ALLOWED_DTYPES",
    "BINARY",
    "JSON",
    "PayloadError",
    "choose_response_type",
    "decode",
    "encode",
    "encode_pieces",
    "media_type",
]

BINARY = "application/x-gradpipe+msgpack"
JSON = "application/json"

ALLOWED_DTYPES = frozenset(
    {
        "bool",
        "int8",
        "int16",
        "int32",
        "int64",
        "uint8",
        "uint16",
        "uint32",
        "uint64",
        "float16",
        "float32",
        "float64",
        "complex64",
        "complex128",
        "float0",
    }
)
# JAX's dtype of tangents of integer arrays: no bytes at all (same as jax.dtypes.float0).
FLOAT0 = np.dtype([("float0", "V")])
_MAX_RANK = 32
# The most elements (times the itemsize) an array may declare, zero-size or not: NumPy
# refuses shapes whose product of non-zero sides overflows its index type.
_MAX_NBYTES = 2**62


class PayloadError(ValueError):
    """A request or response body that cannot be decoded; ``path`` names the value."""

    def __init__(self, message: str, path: str = ""):
        super().__init__(f"{path}: {message}" if path else message)
        self.path = path


def media_type(content_type: str | None) -> str | None:
    """`BINARY`, `JSON` or ``None`` for a ``Content-Type`` header value."""
    if not content_type:
        return None
    base = content_type.split(";", 1)[0].strip().lower()
    if base == BINARY:
        return BINARY
    if base == JSON or base.endswith("+json"):
        return JSON
    return None


def choose_response_type(accept: str | None, request_type: str | None) -> str:
    """The response format: what ``Accept`` names, else the request's own format."""
    if accept:
        for part in accept.split(","):
            chosen = media_type(part)
            if chosen is not None:
                return chosen
    return request_type or JSON


# -- encoding -------------------------------------------------------------------


def _is_array(value: Any) -> bool:
    return isinstance(value, np.ndarray | np.generic) or (
        hasattr(value, "__array__") and hasattr(value, "dtype") and hasattr(value, "shape")
    )


def _encode_array(value: Any, buffers: list | None) -> dict[str, Any]:
    array = np.asarray(value)
    name = "float0" if array.dtype == FLOAT0 else array.dtype.name
    if name not in ALLOWED_DTYPES:
        raise PayloadError(f"dtype {name} cannot be sent; use one of {sorted(ALLOWED_DTYPES)}.")
    if name == "float0" or array.size == 0:
        raw: Any = b""
    else:
        # astype, not ascontiguousarray: the latter turns a 0-d array into a 1-d one.
        array = array.astype(array.dtype.newbyteorder("<"), order="C", copy=False)
        raw = array.data.cast("B")
    if buffers is None:
        buffer: Any = {"buffer": raw, "encoding": "raw"}
    else:  # a placeholder, replaced by the base64 text after json.dumps (see encode)
        buffers.append(raw)
        buffer = {"buffer": f"{buffers[0]}-{len(buffers) - 1}", "encoding": "base64"}
    return {"object_type": "array", "dtype": name, "shape": list(array.shape), "data": buffer}


def _to_wire(value: Any, buffers: list | None) -> Any:
    if isinstance(value, dict):
        return {str(k): _to_wire(v, buffers) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_to_wire(v, buffers) for v in value]
    if _is_array(value):  # first: np.float64 is also a float, and stays an array
        return _encode_array(value, buffers)
    if value is None or isinstance(value, bool | int | float | str):
        return value
    raise PayloadError(f"a {type(value).__name__} cannot be sent; send arrays and JSON values.")


def encode(document: Any, content_type: str) -> bytes:
    """Serialise a document of JSON values and arrays in the given format."""
    # One allocation of the exact size: msgpack.packb grows its buffer by doubling,
    # which touches several times the message's size in fresh memory.
    return b"".join(encode_pieces(document, content_type))


def encode_pieces(document: Any, content_type: str) -> list[bytes | memoryview]:
    """`encode`, as pieces whose concatenation is the body: large array buffers of the
    binary form are the arrays' own memory, ready for a vectored send."""
    if content_type == BINARY:
        return pack_pieces(_to_wire(document, None))
    # json.dumps would scan every base64 character for escapes; instead each buffer is
    # dumped as a unique placeholder string and the base64 text spliced in after.
    # buffers[0] is a random tag, so no string of the document can match a placeholder.
    buffers: list = [f"gp-{secrets.token_hex(8)}"]
    text = json.dumps(_to_wire(document, buffers), allow_nan=True).encode()
    pieces: list[bytes | memoryview] = []
    for i, raw in enumerate(buffers[1:], start=1):
        before, text = text.split(f'"{buffers[0]}-{i}"'.encode(), 1)
        pieces += [before, b'"', b64encode(raw), b'"']
    pieces.append(text)
    return pieces


# -- decoding -------------------------------------------------------------------


def _join(path: str, key: Any) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else str(key)


def _decode_array(node: dict[str, Any], path: str) -> np.ndarray:
    unknown = set(node) - {"object_type", "dtype", "shape", "data"}
    if unknown:
        raise PayloadError(f"unknown array fields {sorted(unknown)}.", path)
    dtype_name = node.get("dtype")
    if not isinstance(dtype_name, str) or dtype_name not in ALLOWED_DTYPES:
        raise PayloadError(f"dtype {dtype_name!r} is not one of {sorted(ALLOWED_DTYPES)}.", path)
    shape = node.get("shape")
    if (
        not isinstance(shape, list)
        or len(shape) > _MAX_RANK
        or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in shape)
    ):
        raise PayloadError(f"shape must be a list of non-negative ints, got {shape!r}.", path)
    data = node.get("data")
    if not isinstance(data, dict) or set(data) != {"buffer", "encoding"}:
        raise PayloadError('data must be {"buffer": ..., "encoding": ...}.', path)
    dtype = FLOAT0 if dtype_name == "float0" else np.dtype(dtype_name).newbyteorder("<")
    if math.prod(n for n in shape if n) * max(1, dtype.itemsize) > _MAX_NBYTES:
        raise PayloadError(f"shape {shape} is too large for any array.", path)
    encoding, buffer = data["encoding"], data["buffer"]
    if encoding == "json" and dtype_name != "float0":
        try:
            # JSON numbers become the declared dtype only when no value changes
            # (1.5 for int32, 1e40 for float32, true for a number, "1.5" are refused).
            array = cast_numbers(buffer, dtype)
        except (TypeError, ValueError, OverflowError) as exc:
            long_int = _find_long_int(buffer)
            if long_int is not None:
                raise PayloadError(long_int.message(), path) from None
            message = f"the json buffer is not a {dtype_name} array: {exc}"
            raise PayloadError(message, path) from None
        if list(array.shape) != shape:
            raise PayloadError(f"the json buffer has shape {list(array.shape)}, not {shape}.", path)
        return array
    raw: bytes | memoryview
    if isinstance(buffer, Base64Text) and encoding == "base64":
        raw = buffer.raw
    elif encoding == "base64" and isinstance(buffer, str):
        try:
            raw = b64decode(buffer)
        except ValueError:
            raise PayloadError("the buffer is not valid base64.", path) from None
    elif encoding == "raw" and isinstance(buffer, bytes | memoryview):
        raw = buffer
    elif encoding == "json" and buffer in ([], ""):  # float0: no data
        raw = b""
    else:
        raise PayloadError(f"buffer encoding {encoding!r} does not fit its buffer.", path)
    expected = math.prod(shape) * dtype.itemsize
    if len(raw) != expected:
        raise PayloadError(
            f"shape {shape} of {dtype_name} needs {expected} bytes; the buffer holds {len(raw)}.",
            path,
        )
    if dtype_name == "float0":
        return np.zeros(shape, FLOAT0)
    array = np.frombuffer(raw, dtype=dtype).reshape(shape)
    return array.astype(dtype.newbyteorder("="), copy=False)


class _LongInt:
    """A JSON integer longer than Python converts (``sys.get_int_max_str_digits``),
    kept as its digit count so that decoding can name the path where it stands."""

    def __init__(self, digits: int):
        self.digits = digits

    def message(self) -> str:
        return (
            f"an integer of {self.digits} digits is out of range (at most "
            f"{sys.get_int_max_str_digits()} digits are read); send a smaller number."
        )

    def __repr__(self) -> str:
        return f"<an integer of {self.digits} digits>"

    def __int__(self) -> int:  # inside a "json" array buffer: NumPy's error names it
        raise OverflowError(self.message())

    __float__ = __index__ = __int__


def _find_long_int(node: Any) -> _LongInt | None:
    """The first over-long integer in a nested list, searched only once a cast failed."""
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, _LongInt):
            return item
        if isinstance(item, list):
            stack.extend(item)
    return None


def _parse_int(text: str) -> int | _LongInt:
    digits = len(text) - text.startswith("-")
    limit = sys.get_int_max_str_digits()
    return _LongInt(digits) if limit and digits > limit else int(text)


def _from_wire(node: Any, path: str) -> Any:
    if isinstance(node, _LongInt):
        raise PayloadError(node.message(), path)
    if isinstance(node, dict):
        if node.get("object_type") == "array":
            return _decode_array(node, path)
        out = {}
        for key, value in node.items():
            if not isinstance(key, str):
                raise PayloadError(f"keys must be strings, got {type(key).__name__}.", path)
            out[key] = _from_wire(value, _join(path, key))
        return out
    if isinstance(node, list):
        return [_from_wire(v, _join(path, i)) for i, v in enumerate(node)]
    if node is None or isinstance(node, bool | int | float | str):
        return node
    raise PayloadError(f"a {type(node).__name__} is not a JSON value.", path)


def decode(body: bytes | bytearray, content_type: str) -> Any:
    """Parse a body in the given format back to JSON values and NumPy arrays.

    Raises `PayloadError` for a malformed body, naming the path of the bad value.
    """
    if content_type == BINARY:
        try:
            document = unpack(body)
        except ValueError as exc:
            raise PayloadError(f"the msgpack body is malformed or truncated ({exc}).") from None
    else:
        try:
            document = load_json(body)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise PayloadError(f"the JSON body is malformed or truncated ({exc}).") from None
        except RecursionError:
            raise PayloadError("the JSON body is nested too deeply.") from None
        except ValueError:
            # An integer longer than Python converts: read again, keeping such
            # integers as markers, so that the error names where the integer stands.
            try:
                document = json.loads(body, parse_int=_parse_int)
            except ValueError as exc:
                raise PayloadError(f"the JSON body cannot be read ({exc}).") from None
    try:
        return _from_wire(document, "")
    except RecursionError:
        raise PayloadError("the body is nested too deeply.") from None
