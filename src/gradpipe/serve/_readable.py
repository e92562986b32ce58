"""A decoded answer as JSON a person reads: each array as the wire's ``"json"``
frame, its numbers as nested lists, one row per line (what ``gradpipe call`` prints).

The text is valid JSON (non-finite numbers as ``NaN`` and ``Infinity``, as Python's
``json`` writes them), and each frame is one that a payload may hold, so an answer can
be fed back to the server. Numbers are written in the shortest form that reads back
to the same value of the array's dtype. Complex arrays, which JSON has no numbers
for, keep the ``"base64"`` frame.
"""

from __future__ import annotations

import base64
import json
import re
import secrets
import sys
from typing import Any

import numpy as np

from ._encoding import FLOAT0

__all__ = ["readable"]

_LINE_WIDTH = 96


def readable(document: Any) -> str:
    """``document`` (JSON values and NumPy arrays, as `decode` returns) as indented
    JSON text with readable arrays."""
    marker = f"gradpipe-array-{secrets.token_hex(6)}"
    arrays: list[np.ndarray] = []

    def mark(value: Any) -> Any:
        if isinstance(value, dict):
            return {key: mark(item) for key, item in value.items()}
        if isinstance(value, list | tuple):
            return [mark(item) for item in value]
        if isinstance(value, np.ndarray | np.generic):
            arrays.append(np.asarray(value))
            return f"{marker}-{len(arrays) - 1}"
        return value

    text = json.dumps(mark(document), indent=2)
    pattern = re.compile(rf'^( *)(.*)"{marker}-(\d+)"(,?)$', flags=re.MULTILINE)
    return pattern.sub(
        lambda m: (
            m.group(1) + m.group(2) + _frame(arrays[int(m.group(3))], m.group(1)) + m.group(4)
        ),
        text,
    )


def _frame(array: np.ndarray, indent: str) -> str:
    """One array's frame, its continuation lines indented by ``indent``."""
    name = "float0" if array.dtype == FLOAT0 else array.dtype.name
    head = f'{{"object_type": "array", "dtype": "{name}", "shape": {json.dumps(list(array.shape))},'
    if np.issubdtype(array.dtype, np.complexfloating):
        data = base64.b64encode(array.astype(array.dtype.newbyteorder("<")).tobytes()).decode()
        return head + f' "data": {{"encoding": "base64", "buffer": "{data}"}}}}'
    inner = indent + "  "
    opening = f'{inner}"data": {{"encoding": "json", "buffer": '
    return head + "\n" + opening + _numbers(array, len(opening)) + "}\n" + indent + "}"


def _numbers(array: np.ndarray, column: int) -> str:
    if array.dtype == FLOAT0:
        return "[]"
    if array.size == 0:
        return json.dumps(array.tolist())
    text = np.array2string(
        array,
        separator=", ",
        prefix=" " * column,
        max_line_width=max(_LINE_WIDTH, column + 24),
        threshold=sys.maxsize,
        formatter={"bool": lambda v: "true" if v else "false", "float_kind": _float},
    )
    return re.sub(r"\n\s*\n", "\n", text)  # no blank lines between the blocks of 3-d arrays


def _float(value: Any) -> str:
    if np.isnan(value):
        return "NaN"
    if np.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return str(value)
