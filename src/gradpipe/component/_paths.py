"""Paths that address one leaf of a component's inputs or outputs, and the error that
names them.

A path is a string built from the field names of the pydantic models, list indices
and dict keys:

- ``x``: the field ``x`` of the top-level model;
- ``layer.w``: the field ``w`` of the nested model in field ``layer``;
- ``layers[2].w``: the field ``w`` of the third item of the list ``layers``;
- ``bands[red]``: the value under key ``"red"`` of the dict ``bands``;
- ``bands["a.b[0]"]``: a key written as a JSON string, for keys holding ``[``,
  ``]``, ``"`` or ``*``, or an empty key.

``bands[0]`` on a dict addresses the key ``"0"``: the model says whether brackets
index a list or a dict. The canonical spelling writes a key bare when it can and as a
JSON string otherwise; `canonical_path` turns any accepted spelling into it. In the
patterns of `Component.input_spec`, ``[*]`` stands for every index or key.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

__all__ = [
    "ComponentInputError",
    "canonical_path",
    "canonical_paths",
    "path_pattern",
    "join_index",
    "join_key",
    "join_name",
]


class ComponentInputError(ValueError):
    """A bad input to a component endpoint: a value that fails validation, a path that
    is unknown or not differentiable, a tangent or cotangent of the wrong shape.

    **Attributes:**

    - `path`: the path of the offending leaf (see `gradpipe.component` for the
      syntax), or ``""`` when the error concerns the whole input.
    """

    def __init__(self, path: str, message: str) -> None:
        super().__init__(message)
        self.path = path


_BARE_KEY = re.compile(r'[^\[\]"*]+')
_BRACKET = r'\[("(?:[^"\\]|\\.)*"|[^\[\]"]*)\]'
_SEGMENT = re.compile(r"\.([A-Za-z_][A-Za-z0-9_]*)|" + _BRACKET)
_ANY_BRACKET = re.compile(_BRACKET)
_FIRST_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def path_pattern(path: str) -> str:
    """The spec pattern a concrete path matches: every index or key becomes ``[*]``
    (``"layers[0].w"`` -> ``"layers[*].w"``)."""
    return _ANY_BRACKET.sub("[*]", path)


def join_name(prefix: str, name: str) -> str:
    """The path of field ``name`` of the model at ``prefix``."""
    return f"{prefix}.{name}" if prefix else name


def join_index(prefix: str, index: int) -> str:
    """The path of item ``index`` of the list at ``prefix``."""
    return f"{prefix}[{index}]"


def join_key(prefix: str, key: str) -> str:
    """The path of the value under ``key`` in the dict at ``prefix``."""
    if _BARE_KEY.fullmatch(key):
        return f"{prefix}[{key}]"
    return f"{prefix}[{json.dumps(key)}]"


def canonical_path(path: object, *, what: str = "path") -> str:
    """``path`` in its canonical spelling; a `ComponentInputError` if it is not a path."""
    if not isinstance(path, str):
        raise ComponentInputError(
            str(path), f"A {what} must be a string such as 'x' or 'layers[0].w', got {path!r}."
        )
    first = _FIRST_NAME.match(path)
    if first is None:
        raise ComponentInputError(path, _malformed(path, what))
    out = first.group(0)
    pos = first.end()
    while pos < len(path):
        segment = _SEGMENT.match(path, pos)
        if segment is None:
            raise ComponentInputError(path, _malformed(path, what))
        name, inner = segment.groups()
        if name is not None:
            out = join_name(out, name)
        elif inner.startswith('"'):
            out = join_key(out, json.loads(inner))
        elif inner == "":
            raise ComponentInputError(path, _malformed(path, what))
        else:
            out = f"{out}[{inner}]"
        pos = segment.end()
    return out


def _malformed(path: str, what: str) -> str:
    return (
        f"The {what} {path!r} is not a path: write field names joined by '.', "
        f"list indices as [0] and dict keys as [key] or [\"key\"], e.g. 'layers[0].w'."
    )


def canonical_paths(paths: Sequence[str] | set[str], *, what: str) -> dict[str, str]:
    """Canonical spelling -> the spelling the caller used, first one kept."""
    if isinstance(paths, str):
        raise ComponentInputError(
            paths, f"The {what}s must be a list of paths, got the single string {paths!r}."
        )
    out: dict[str, str] = {}
    for path in paths:
        out.setdefault(canonical_path(path, what=what), path)
    return out
