"""The 4096-byte header of an array file: what it holds and how it is checked.

The header is ``MAGIC``, then a little-endian ``uint32`` length, then JSON with the
format version, shape, dtype and page shape, then ``CRC1`` and a ``uint32`` CRC-32
of the length and the JSON: a flipped bit that leaves valid JSON (``[4, 3]`` read
as ``[4, 2]``, ``<f4`` as ``>f4``) would otherwise open as a different array.
Every field is checked on open; a damaged header is refused naming the file.
"""

from __future__ import annotations

import json
import struct
import zlib
from collections.abc import Sequence

import numpy as np
from numpy.typing import DTypeLike

__all__ = [
    "FORMAT_VERSION",
    "HEADER_BYTES",
    "MAGIC",
    "check_layout",
    "decode_header",
    "encode_header",
]

MAGIC = b"GPOOC\x00\x01\x00"
CHECKSUM_MARK = b"CRC1"  # then a uint32 CRC-32 of the length field and the JSON
FORMAT_VERSION = 1
HEADER_BYTES = 4096


def check_layout(shape: Sequence[int], dtype: DTypeLike, what: str = "DiskArray") -> None:
    """Refuse a shape with a negative axis and a dtype that is not a number or bool.

    Only bool, integer, floating and complex dtypes are stored: an object array's
    bytes are pointers, a string, structured or ``bfloat16`` dtype's ``dtype.str``
    (``|V2``) does not name it again on open, so such files would read back garbage.
    """
    if any(int(n) < 0 for n in shape):
        raise ValueError(f"{what}: negative dimensions are not allowed, got shape {tuple(shape)}.")
    dtype = np.dtype(dtype)
    if dtype.kind not in "biufc":
        raise TypeError(
            f"{what}: gradpipe.ooc stores bool, integer, floating and complex dtypes, got "
            f"{dtype} ({dtype.str}). Convert the data first (e.g. bfloat16 to float32)."
        )


def encode_header(shape: Sequence[int], dtype: np.dtype, page_shape: Sequence[int]) -> bytes:
    check_layout(shape, dtype)
    meta = json.dumps(
        {
            "version": FORMAT_VERSION,
            "shape": list(shape),
            "dtype": dtype.str,
            "page_shape": list(page_shape),
        }
    ).encode()
    length = struct.pack("<I", len(meta))
    body = MAGIC + length + meta + CHECKSUM_MARK + struct.pack("<I", zlib.crc32(length + meta))
    if len(body) > HEADER_BYTES:
        raise ValueError(f"array of {len(shape)} dimensions is too many for the file header.")
    return body.ljust(HEADER_BYTES, b"\x00")


def decode_header(raw: bytes, path: str) -> tuple[tuple[int, ...], np.dtype, tuple[int, ...]]:
    """Shape, dtype and page shape from a header, each checked; a `ValueError` naming
    ``path`` and what is wrong when the header is damaged or not a gradpipe header."""

    def damaged(what: str) -> ValueError:
        return ValueError(
            f"{path!r} has a damaged gradpipe array header: {what}. The file cannot be "
            "read; recreate it (or restore it from a copy)."
        )

    if not raw.startswith(MAGIC):
        if MAGIC.startswith(raw):
            raise damaged(f"the file ends after {len(raw)} bytes, inside the header")
        raise ValueError(f"{path!r} is not a gradpipe array file (bad magic bytes).")
    start = len(MAGIC) + 4
    if len(raw) < HEADER_BYTES:
        raise damaged(f"the file ends after {len(raw)} bytes, inside the header")
    (n,) = struct.unpack_from("<I", raw, len(MAGIC))
    if start + n > HEADER_BYTES:
        raise damaged(f"its length field says {n} bytes, past the {HEADER_BYTES}-byte header")
    mark = raw[start + n : start + n + len(CHECKSUM_MARK)]
    if mark == CHECKSUM_MARK:  # files written before the checksum have zeros here
        (crc,) = struct.unpack_from("<I", raw, start + n + len(CHECKSUM_MARK))
        if crc != zlib.crc32(raw[len(MAGIC) : start + n]):
            raise damaged("its checksum does not match its contents")
    try:
        meta = json.loads(raw[start : start + n].decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise damaged(f"its JSON does not parse ({e})") from None
    if not isinstance(meta, dict):
        raise damaged(f"its JSON is a {type(meta).__name__}, not an object")
    if meta.get("version") != FORMAT_VERSION:
        raise ValueError(
            f"{path!r} uses array format version {meta.get('version')!r}; this gradpipe "
            f"reads version {FORMAT_VERSION}."
        )
    missing = [k for k in ("shape", "dtype", "page_shape") if k not in meta]
    if missing:
        raise damaged(f"it lacks the field(s) {missing}")
    shape, page_shape = meta["shape"], meta["page_shape"]
    for name, value, low in (("shape", shape, 0), ("page_shape", page_shape, 1)):
        if not isinstance(value, list) or not all(
            type(v) is int and low <= v < 2**62 for v in value
        ):
            raise damaged(f"{name} must be a list of integers >= {low}, got {value!r}")
    if len(page_shape) != len(shape):
        raise damaged(f"page_shape {page_shape} does not match the {len(shape)} axes of {shape}")
    try:
        dtype = np.dtype(meta["dtype"]) if isinstance(meta["dtype"], str) else None
    except TypeError:
        dtype = None
    if dtype is None or dtype.hasobject or dtype.itemsize == 0 or dtype.fields is not None:
        raise damaged(f"unknown or unsupported dtype {meta['dtype']!r}")
    return tuple(shape), dtype, tuple(page_shape)
