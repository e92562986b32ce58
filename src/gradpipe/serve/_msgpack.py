"""A msgpack writer and reader that never copy large ``bin`` buffers.

The C ``msgpack`` package copies every ``bin`` value when packing (into its output
buffer) and when unpacking (into a new ``bytes``). For multi-megabyte arrays each of
those copies lands in freshly allocated memory, which on a busy or virtualised
machine costs far more than the copy itself (page faults). Here the writer returns
the document as a list of pieces in which large buffers appear as they are, ready for
a vectored send, and the reader returns ``bin`` values as ``memoryview`` slices of the
body. Small values still go through the C package.

The reader accepts only what `gradpipe.serve` documents use: nil, bool, int, float,
str, bin, arrays and maps with str keys. Extension types, non-str keys, truncation,
trailing bytes, nesting deeper than `MAX_DEPTH` and more than `MAX_ITEMS` values are
errors (`ValueError`), so a hostile body cannot make it loop for long.
"""

from __future__ import annotations

import struct
from typing import Any

import msgpack

__all__ = ["MAX_DEPTH", "MAX_ITEMS", "pack_pieces", "unpack"]

MAX_DEPTH = 64
MAX_ITEMS = 1_000_000
_INLINE = 1 << 16  # buffers below this size are copied into the surrounding piece


# -- writing ----------------------------------------------------------------------


def _bin_header(size: int) -> bytes:
    if size < 1 << 8:
        return b"\xc4" + struct.pack(">B", size)
    if size < 1 << 16:
        return b"\xc5" + struct.pack(">H", size)
    return b"\xc6" + struct.pack(">I", size)


def _container_header(size: int, is_map: bool) -> bytes:
    if size < 16:
        return bytes([(0x80 if is_map else 0x90) | size])
    if size < 1 << 16:
        return (b"\xde" if is_map else b"\xdc") + struct.pack(">H", size)
    return (b"\xdf" if is_map else b"\xdd") + struct.pack(">I", size)


def pack_pieces(document: Any) -> list[bytes | memoryview]:
    """``document`` as msgpack, in pieces whose concatenation is the whole message.

    ``bytes``/``memoryview`` values become ``bin``; large ones are returned as they
    are, not copied.
    """
    pieces: list[bytes | memoryview] = []
    small = bytearray()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            small.extend(_container_header(len(node), True))
            for key, value in node.items():
                small.extend(msgpack.packb(key, use_bin_type=True))
                walk(value)
        elif isinstance(node, list | tuple):
            small.extend(_container_header(len(node), False))
            for value in node:
                walk(value)
        elif isinstance(node, bytes | bytearray | memoryview):
            view = memoryview(node).cast("B")
            small.extend(_bin_header(view.nbytes))
            if view.nbytes < _INLINE:
                small.extend(view)
            else:
                pieces.append(bytes(small))
                small.clear()
                pieces.append(view)
        else:
            small.extend(msgpack.packb(node, use_bin_type=True))

    walk(document)
    if small:
        pieces.append(bytes(small))
    return pieces


# -- reading ----------------------------------------------------------------------

_FIXED = {
    0xCA: (">f", 4), 0xCB: (">d", 8),
    0xCC: (">B", 1), 0xCD: (">H", 2), 0xCE: (">I", 4), 0xCF: (">Q", 8),
    0xD0: (">b", 1), 0xD1: (">h", 2), 0xD2: (">i", 4), 0xD3: (">q", 8),
}  # fmt: skip
_LENGTH = {
    0xC4: ("bin", 1), 0xC5: ("bin", 2), 0xC6: ("bin", 4),
    0xD9: ("str", 1), 0xDA: ("str", 2), 0xDB: ("str", 4),
    0xDC: ("array", 2), 0xDD: ("array", 4), 0xDE: ("map", 2), 0xDF: ("map", 4),
}  # fmt: skip
_SIZE_FORMAT = {1: ">B", 2: ">H", 4: ">I"}


class _Reader:
    def __init__(self, body: bytes | bytearray | memoryview):
        self.view = memoryview(body).cast("B")
        self.pos = 0
        self.items = 0

    def take(self, size: int) -> memoryview:
        end = self.pos + size
        if end > len(self.view):
            raise ValueError(
                f"the body is truncated: a value at byte {self.pos} needs {size} bytes, "
                f"{len(self.view) - self.pos} remain"
            )
        chunk = self.view[self.pos : end]
        self.pos = end
        return chunk

    def read(self, depth: int) -> Any:
        self.items += 1
        if self.items > MAX_ITEMS:
            raise ValueError(f"the document holds more than {MAX_ITEMS} values; send arrays")
        if depth > MAX_DEPTH:
            raise ValueError(f"the document is nested deeper than {MAX_DEPTH} levels")
        code = self.take(1)[0]
        if code <= 0x7F:
            return code
        if code >= 0xE0:
            return code - 0x100
        if 0x80 <= code <= 0x8F:
            return self.container("map", code & 0x0F, depth)
        if 0x90 <= code <= 0x9F:
            return self.container("array", code & 0x0F, depth)
        if 0xA0 <= code <= 0xBF:
            return self.string(code & 0x1F)
        if code == 0xC0:
            return None
        if code in (0xC2, 0xC3):
            return code == 0xC3
        if code in _FIXED:
            fmt, size = _FIXED[code]
            return struct.unpack(fmt, self.take(size))[0]
        if code in _LENGTH:
            kind, width = _LENGTH[code]
            (size,) = struct.unpack(_SIZE_FORMAT[width], self.take(width))
            if kind == "bin":
                return self.take(size)
            if kind == "str":
                return self.string(size)
            return self.container(kind, size, depth)
        raise ValueError(f"msgpack type 0x{code:02x} at byte {self.pos - 1} is not accepted")

    def string(self, size: int) -> str:
        try:
            return str(self.take(size), "utf-8")
        except UnicodeDecodeError:
            raise ValueError(f"a string before byte {self.pos} is not UTF-8") from None

    def container(self, kind: str, size: int, depth: int) -> Any:
        if size > len(self.view) - self.pos:  # every item takes at least one byte
            raise ValueError(f"a {kind} of {size} items cannot fit in the rest of the body")
        if kind == "array":
            return [self.read(depth + 1) for _ in range(size)]
        out = {}
        for _ in range(size):
            key = self.read(depth + 1)
            if not isinstance(key, str):
                raise ValueError(f"map keys must be strings, got {type(key).__name__}")
            out[key] = self.read(depth + 1)
        return out


def unpack(body: bytes | bytearray | memoryview) -> Any:
    """The document in ``body``; ``bin`` values are zero-copy ``memoryview`` slices."""
    reader = _Reader(body)
    document = reader.read(0)
    if reader.pos != len(reader.view):
        raise ValueError(f"{len(reader.view) - reader.pos} bytes follow the document")
    return document
