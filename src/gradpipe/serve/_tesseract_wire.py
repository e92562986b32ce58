"""Arrays, paths and encodings as tesseract-core's runtime writes them on the wire.

Arrays are JSON objects ``{"object_type": "array", "shape", "dtype", "data":
{"buffer", "encoding"}}`` (``object_type`` may be left out in requests), where the
encoding is ``"json"`` (the numbers as a nested list; ``"raw"`` is the old name),
``"base64"`` (the little-endian bytes) or ``"binref"`` (``"file.bin:offset"``, a
file beside the server). A plain number or nested list also stands for an array.

Paths join field names with ``.``, list items as ``.[0]`` and dict entries as
``.{key}`` (``"layers.[0].w"``, ``"bands.{red}"``); gradpipe writes ``layers[0].w``
and ``bands[red]``. `to_gradpipe_path` and `to_tesseract_path` translate.

Every decoding failure is a `WireError` with the peer's error ``type``, its location
(a list of keys from the body's root) and a message; `_tesseract_api` answers it as
the peer does, with 422 and ``{"detail": [{"type", "loc", "msg", "input"}]}``.
"""

from __future__ import annotations

import json
import math
import os
import re
import uuid
from collections.abc import Iterable
from io import BufferedWriter
from pathlib import Path
from typing import Any

import numpy as np

from gradpipe.component._paths import join_index, join_key, join_name

from ._base64 import b64decode, b64encode
from ._encoding import FLOAT0
from ._json_body import Base64Buffer, Base64Text

__all__ = [
    "PEER_DTYPES",
    "WireError",
    "decode_arrays",
    "encode_arrays",
    "encode_pieces",
    "to_gradpipe_path",
    "to_tesseract_path",
]

PEER_DTYPES = frozenset(
    {"bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
     "float16", "float32", "float64", "complex64", "complex128"}
)  # fmt: skip
_ARRAY_KEYS = {"object_type", "shape", "dtype", "data"}
_MAX_RANK = 32
_BINREF = re.compile(r"^(?P<path>.+?)(:(?P<offset>\d+))?$")


class WireError(ValueError):
    """A request value the tesseract protocol cannot read: ``kind`` is the peer's
    error type, ``loc`` where the value stands (keys from the body's root)."""

    def __init__(self, kind: str, loc: list[Any], message: str, value: Any = None):
        super().__init__(message)
        self.kind, self.loc, self.message, self.value = kind, loc, message, value


# -- decoding ---------------------------------------------------------------------


def _is_encoded_array(node: dict) -> bool:
    return {"shape", "dtype", "data"} <= set(node) <= _ARRAY_KEYS


def _decode_array(node: dict, loc: list[Any], files: Path | None) -> np.ndarray:
    if node.get("object_type", "array") != "array":
        raise WireError("literal_error", [*loc, "object_type"], "Input should be 'array'")
    dtype_name, shape, data = node["dtype"], node["shape"], node["data"]
    if not isinstance(dtype_name, str) or dtype_name not in PEER_DTYPES:
        raise WireError(
            "literal_error", [*loc, "dtype"],
            f"Input should be one of {sorted(PEER_DTYPES)}", dtype_name,
        )  # fmt: skip
    if (
        not isinstance(shape, list)
        or len(shape) > _MAX_RANK
        or not all(type(n) is int and n >= 0 for n in shape)
    ):
        raise WireError("array_shape_invalid", [*loc, "shape"],
                        "shape must be a list of non-negative integers", shape)  # fmt: skip
    if not isinstance(data, dict) or not {"buffer", "encoding"} <= set(data):
        raise WireError("missing", [*loc, "data"], 'data must be {"buffer", "encoding"}')
    encoding, buffer = data["encoding"], data["buffer"]
    extra = set(data) - {"buffer", "encoding", "compression"}
    if extra:
        name = sorted(extra)[0]
        raise WireError("extra_forbidden", [*loc, "data", name], "Extra inputs are not permitted")
    if data.get("compression") is not None:
        raise WireError(
            "array_decode_error", [*loc, "data", "compression"],
            "this server reads uncompressed buffers only; send compression null",
        )  # fmt: skip
    dtype = np.dtype(dtype_name)
    if encoding in ("json", "raw"):
        try:
            array = np.asarray(buffer)
            if array.dtype.kind not in "biufc":
                raise TypeError("the buffer holds values that are not numbers")
            if array.shape != tuple(shape):
                array = array.reshape(shape)
            with np.errstate(over="ignore", invalid="ignore"):
                cast = array.astype(dtype)
            # As the runtime casts: rounding a float is fine; losing a value is not
            # (a fraction or a wrap into an integer, a finite number into inf).
            lost = (
                not np.array_equal(cast, array)
                if dtype.kind in "biu"
                else bool(np.any(np.isinf(cast) & np.isfinite(array)))
            )
            if array.size and lost:
                raise ValueError(f"the numbers do not fit dtype {dtype_name}")
            return cast
        except (TypeError, ValueError, OverflowError) as exc:
            raise WireError(
                "array_decode_error",
                [*loc, "data"],
                f"Failed to decode array buffer (json encoding): {exc}",
            ) from None
    if isinstance(buffer, Base64Buffer) and encoding != "base64":
        buffer = buffer.text()
    if isinstance(buffer, Base64Text | Base64Buffer) and encoding == "base64":
        raw: bytes | memoryview = buffer.raw
    elif encoding == "base64" and isinstance(buffer, str):
        try:
            raw = b64decode(buffer)
        except ValueError as exc:
            raise WireError(
                "array_decode_error",
                [*loc, "data"],
                f"Failed to decode array buffer (base64 encoding): {exc}",
            ) from None
    elif encoding == "binref" and isinstance(buffer, str):
        raw = _read_binref(buffer, math.prod(shape) * dtype.itemsize, [*loc, "data"], files)
    else:
        raise WireError(
            "union_tag_invalid", [*loc, "data", "encoding"],
            "encoding must be 'json', 'base64' or 'binref', with a buffer that fits it",
            encoding,
        )  # fmt: skip
    expected = math.prod(shape) * dtype.itemsize
    if len(raw) != expected:
        raise WireError("array_decode_error", [*loc, "data"],
                        f"shape {shape} of {dtype_name} needs {expected} bytes; the buffer "
                        f"holds {len(raw)}")  # fmt: skip
    return (
        np.frombuffer(raw, dtype=dtype.newbyteorder("<")).reshape(shape).astype(dtype, copy=False)
    )


def _read_binref(buffer: str, nbytes: int, loc: list[Any], files: Path | None) -> bytes:
    if files is None:
        raise WireError("array_decode_error", loc,
                        "this server takes no file references (binref): it was started "
                        "without a file directory; send json or base64 buffers")  # fmt: skip
    match = _BINREF.match(buffer)
    assert match is not None  # the pattern matches any non-empty string
    name, offset = match.group("path"), int(match.group("offset") or 0)
    base = files.resolve()
    target = (base / name).resolve()
    if base not in target.parents:
        raise WireError("array_decode_error", loc,
                        f"the file reference {name!r} points outside the server's file "
                        "directory; give a path relative to it")  # fmt: skip
    try:
        with open(target, "rb") as file:
            file.seek(offset)
            raw = file.read(nbytes)
    except OSError as exc:
        raise WireError(
            "array_decode_error",
            loc,
            f"the file reference {name!r} cannot be read ({exc.strerror})",
        ) from None
    return raw


def decode_arrays(node: Any, loc: list[Any], files: Path | None = None) -> Any:
    """``node`` with every encoded array replaced by a NumPy array (and any
    `Base64Buffer` that is not an array's by its string)."""
    if isinstance(node, Base64Buffer):
        return node.text()
    if isinstance(node, dict):
        if _is_encoded_array(node):
            return _decode_array(node, loc, files)
        return {k: decode_arrays(v, [*loc, k], files) for k, v in node.items()}
    if isinstance(node, list):
        return [decode_arrays(v, [*loc, i], files) for i, v in enumerate(node)]
    return node


# -- encoding ---------------------------------------------------------------------


class FileWriter:
    """Writes the arrays of one response into one ``.bin`` file under ``files/run_<id>/``
    and answers each with its reference relative to ``files``."""

    def __init__(self, files: Path, run_id: str):
        self.relative = Path(f"run_{run_id}") / f"{uuid.uuid4()}.bin"
        self.path = files / self.relative
        self.offset = 0
        self._file: BufferedWriter | None = None

    def write(self, raw: memoryview) -> str:
        if self._file is None:
            os.makedirs(self.path.parent, exist_ok=True)
            self._file = open(self.path, "wb")  # noqa: SIM115 - open across the arrays
        self._file.write(raw)
        reference = f"{self.relative.as_posix()}:{self.offset}"
        self.offset += raw.nbytes
        return reference

    def close(self) -> None:
        if self._file is not None:
            self._file.close()


def _encode_array(value: Any, encoding: str, buffers: list, writer: FileWriter | None) -> dict:
    array = np.asarray(value)
    if array.dtype == FLOAT0:  # a derivative of an integer leaf: zeros, as the peer sends
        array = np.zeros(array.shape, np.float32)
    array = array.astype(array.dtype.newbyteorder("<"), order="C", copy=False)
    if array.dtype.name not in PEER_DTYPES:
        raise TypeError(f"dtype {array.dtype.name} has no tesseract encoding")
    if encoding == "json":
        data = {"buffer": array.tolist(), "encoding": "json"}
    elif encoding == "binref":
        assert writer is not None
        data = {"buffer": writer.write(array.data.cast("B")), "encoding": "binref"}
    else:  # a placeholder, replaced by the base64 text after json.dumps
        buffers.append(array.data.cast("B") if array.size else b"")
        data = {"buffer": f"{buffers[0]}-{len(buffers) - 1}", "encoding": "base64"}
    return {"object_type": "array", "shape": list(array.shape), "dtype": array.dtype.name,
            "data": data}  # fmt: skip


def _is_array(value: Any) -> bool:
    return isinstance(value, np.ndarray | np.generic) or (
        hasattr(value, "__array__") and hasattr(value, "dtype") and hasattr(value, "shape")
    )


def encode_arrays(document: Any, encoding: str, writer: FileWriter | None = None) -> bytes:
    """``document`` as JSON, its arrays in ``encoding`` (``json``/``base64``/``binref``)."""
    return b"".join(encode_pieces(document, encoding, writer))


def encode_pieces(document: Any, encoding: str, writer: FileWriter | None = None) -> list[bytes]:
    """`encode_arrays` as the pieces whose concatenation it is (each base64 text one
    piece), for a vectored send that copies none of them into one body."""
    buffers: list = [f"gp-{uuid.uuid4().hex}"]

    def wire(node: Any) -> Any:
        if isinstance(node, dict):
            return {str(k): wire(v) for k, v in node.items()}
        if isinstance(node, list | tuple):
            return [wire(v) for v in node]
        if _is_array(node):
            return _encode_array(node, encoding, buffers, writer)
        return node

    text = json.dumps(wire(document), allow_nan=True, separators=(",", ":")).encode()
    pieces = []
    for i, raw in enumerate(buffers[1:], start=1):
        before, text = text.split(f'"{buffers[0]}-{i}"'.encode(), 1)
        pieces += [before, b'"', b64encode(raw), b'"']
    pieces.append(text)
    return pieces


# -- paths ------------------------------------------------------------------------


def _split(path: str) -> list[str]:
    """Segments of a tesseract path: dots inside ``{...}`` and escaped characters
    belong to their segment."""
    parts, buf, depth, i = [], [], 0, 0
    while i < len(path):
        char = path[i]
        if char == "\\" and i + 1 < len(path):
            buf += [char, path[i + 1]]
            i += 2
            continue
        depth += (char == "{") - (char == "}")
        if char == "." and depth == 0:
            parts.append("".join(buf))
            buf = []
        else:
            buf.append(char)
        i += 1
    parts.append("".join(buf))
    return parts


def _unescape(key: str) -> str:
    return re.sub(r"\\(.)", r"\1", key)


def to_gradpipe_path(path: str) -> str:
    """``"layers.[0].w"`` -> ``"layers[0].w"``, ``"bands.{red}"`` -> ``"bands[red]"``;
    a `ValueError` for a string that is not a tesseract path."""
    if not isinstance(path, str) or not path:
        raise ValueError(f"{path!r} is not a path")
    out = ""
    for segment in _split(path):
        if re.fullmatch(r"\[\d+\]", segment) and out:
            out = join_index(out, int(segment[1:-1]))
        elif segment.startswith("{") and segment.endswith("}") and len(segment) > 2 and out:
            out = join_key(out, _unescape(segment[1:-1]))
        elif segment.isidentifier():
            out = join_name(out, segment)
        else:
            raise ValueError(
                f"{path!r} is not a path: join field names with '.', write list items as "
                "'.[0]' and dict entries as '.{key}'"
            )
    return out


_GRADPIPE_SEGMENT = re.compile(r'\.?([A-Za-z_][A-Za-z0-9_]*)|\[("(?:[^"\\]|\\.)*"|[^\[\]"]*)\]')


def to_tesseract_path(path: str, dict_patterns: Iterable[str] = ()) -> str:
    """``"layers[0].w"`` -> ``"layers.[0].w"``; a bracket after a pattern in
    ``dict_patterns`` (gradpipe patterns with ``[*]``) is a dict key: ``.{key}``."""
    dicts = set(dict_patterns)
    parts: list[str] = []
    pattern = ""
    for match in _GRADPIPE_SEGMENT.finditer(path):
        name, inner = match.groups()
        if name is not None:
            parts.append(name)
            pattern = f"{pattern}.{name}" if pattern else name
            continue
        key = json.loads(inner) if inner.startswith('"') else inner
        if pattern in dicts or not key.isdigit():
            parts.append("{" + re.sub(r"([{}\\])", r"\\\1", key) + "}")
        else:
            parts.append(f"[{key}]")
        pattern += "[*]"
    return ".".join(parts)


def tesseract_pattern(pattern: str) -> str:
    """A tesseract schema pattern (``"layers.[].w"``, ``"bands.{}"``) as gradpipe's
    (``"layers[*].w"``, ``"bands[*]"``)."""
    return pattern.replace(".[]", "[*]").replace(".{}", "[*]")


def dict_patterns(patterns: Iterable[str]) -> frozenset[str]:
    """The gradpipe patterns of the dicts in tesseract schema patterns."""
    out = set()
    for pattern in patterns:
        start = 0
        while (k := pattern.find(".{}", start)) >= 0:
            out.add(tesseract_pattern(pattern[:k]))
            start = k + 3
    return frozenset(out)
