"""JSON bodies whose long base64 buffers are read at memory speed.

`json.loads` reads a string one character at a time (about 1 ns each, 5 ms for the
base64 text of a 4 MB array). `loads` first cuts every long ``"buffer": "<base64>"``
value out of the body, found by jumping from quote to quote with `bytes.find`, and
decodes it with the SIMD base64 decoder (`_base64`), which also proves that the text
holds base64 characters only (so no escape or control character that `json.loads`
would have read or refused). It parses the rest with `json.loads`, and gives each cut
value back as a `Base64Text`: a `str` of the same text whose `raw` holds the decoded
bytes, so that the array decoders need not decode it again. A reader that hands the
document's values to `_tesseract_wire.decode_arrays` may ask for `Base64Buffer`s
instead, which skip making the string: that decoder turns any it does not read as an
array back into the string, and `with_text` does the same for a value shown in an
error.

The document is the one `json.loads` reads from the same body, and so is any error:
a body that fails is read again by `json.loads` alone, which raises its own error.
A buffer that is not strict base64 is not cut, and fails where it fails without
this module.
"""

from __future__ import annotations

import contextlib
import json
import secrets
from typing import Any

from ._base64 import b64decode

__all__ = ["Base64Buffer", "Base64Text", "loads", "with_text"]

_MIN_CUT = 4096  # shorter strings cost json.loads less than cutting them out
_MAX_STRINGS = 65_536  # quote pairs walked at most, so that the walk's time is bounded
_WHITESPACE = b" \t\n\r"
_BACKSLASH = 0x5C


class Base64Text(str):
    """A base64 string of a JSON body, with its decoded bytes as `raw`."""

    __slots__ = ("raw",)
    raw: bytes

    def __new__(cls, text: str, raw: bytes) -> Base64Text:
        self = super().__new__(cls, text)
        self.raw = raw
        return self


class Base64Buffer:
    """A base64 string of a JSON body, not yet a `str`: `raw` holds its decoded bytes,
    `text` gives the string."""

    __slots__ = ("_view", "raw")

    def __init__(self, view: memoryview, raw: bytes):
        self._view, self.raw = view, raw

    def text(self) -> str:
        return str(self._view, "ascii")


def with_text(node: Any) -> Any:
    """``node`` with every `Base64Buffer` in it replaced by its string."""
    if isinstance(node, Base64Buffer):
        return node.text()
    if isinstance(node, dict):
        return {k: with_text(v) for k, v in node.items()}
    if isinstance(node, list):
        return [with_text(v) for v in node]
    return node


def _string_end(body: bytes | bytearray, start: int) -> int:
    """The index of the quote that closes the JSON string opened at ``start``; -1 if
    the body ends first."""
    end = body.find(b'"', start + 1)
    while end > 0 and body[end - 1] == _BACKSLASH:
        before = end - 1
        while body[before] == _BACKSLASH:
            before -= 1
        if (end - 1 - before) % 2 == 0:  # an even run of backslashes escapes itself
            break
        end = body.find(b'"', end + 1)
    return end


def _buffer_strings(body: bytes | bytearray) -> list[tuple[int, int, bytes]]:
    """``(start, stop, raw)`` of each long string token that is the value of a
    ``"buffer"`` key and strict base64 (``body[start:stop]`` with its quotes)."""
    found = []
    view = memoryview(body)
    position, key_start, key_stop = 0, -1, -1
    for _ in range(_MAX_STRINGS):
        start = body.find(b'"', position)
        if start < 0:
            break
        end = _string_end(body, start)
        if end < 0:
            break
        if (
            end - start > _MIN_CUT
            and body[key_start:key_stop] == b'"buffer"'
            and body[key_stop:start].strip(_WHITESPACE) == b":"
        ):
            with contextlib.suppress(ValueError):  # not base64: json.loads reads it
                found.append((start, end + 1, b64decode(view[start + 1 : end])))
        key_start, key_stop, position = start, end + 1, end + 1
    return found


def loads(body: bytes | bytearray, *, as_text: bool = True) -> Any:
    """`json.loads` of ``body``, long base64 ``buffer`` values as `Base64Text`, or as
    `Base64Buffer` with ``as_text=False``."""
    if (
        not isinstance(body, bytes | bytearray)
        or len(body) <= _MIN_CUT
        or json.detect_encoding(body) != "utf-8"
    ):
        return json.loads(body)
    cuts = _buffer_strings(body)
    if not cuts:
        return json.loads(body)
    tag = f"gp-{secrets.token_hex(8)}"
    texts: dict[str, tuple[int, int, bytes]] = {}
    pieces, position = [], 0
    for i, (start, stop, raw) in enumerate(cuts):
        placeholder = f"{tag}-{i}"
        texts[placeholder] = (start, stop, raw)
        pieces += [body[position:start], b'"', placeholder.encode(), b'"']
        position = stop
    pieces.append(body[position:])

    view = memoryview(body)

    def restore(node: dict) -> dict:
        value = node.get("buffer")
        if type(value) is str and value in texts:
            start, stop, raw = texts[value]
            cut = Base64Buffer(view[start + 1 : stop - 1], raw)
            node["buffer"] = Base64Text(cut.text(), raw) if as_text else cut
        return node

    try:
        return json.loads(b"".join(pieces), object_hook=restore)
    except (ValueError, RecursionError):
        return json.loads(body)
