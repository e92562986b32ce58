"""Why a path given to a derivative endpoint does not address a leaf it can use: the
refusal names what the path is (a static input, an optional field that is ``None``
in this input, a leaf of the other side, an array that is not `Differentiable`)
rather than calling it unknown."""

from __future__ import annotations

import difflib
from collections.abc import Sequence

from ._nodes import LeafSpec
from ._paths import path_pattern

__all__ = ["unselectable_reason"]


def _under(pattern: str, spec_path: str) -> bool:
    return pattern == spec_path or pattern.startswith((spec_path + ".", spec_path + "["))


def unselectable_reason(
    path: str,
    side: str,
    present: Sequence[str],
    specs: Sequence[LeafSpec],
    other_present: Sequence[str],
) -> str:
    """Why ``path`` (canonical) is not a differentiable leaf among ``present`` (the
    leaves of this input on ``side``), knowing the model's leaf ``specs`` of that side
    and the leaves ``other_present`` of the other side."""
    pattern = path_pattern(path)
    other = "output" if side == "input" else "input"
    for spec in specs:
        if spec.kind == "static" and _under(pattern, spec.path):
            return (
                f"is a static input ({spec.annotation}): its value is part of the compiled "
                f"function, not a traced array, so it cannot be differentiated. Declare it "
                f"as a Differentiable[Array[...]] field to differentiate with respect to it"
            )
    if path in present:
        return (
            f"is an array {side} that is not Differentiable; wrap its type in "
            f"Differentiable[...] to take derivatives "
            f"{'with respect to' if side == 'input' else 'of'} it"
        )
    if any(spec.kind == "array" and spec.path == pattern for spec in specs):
        return (
            f"is not present in this {side}: an optional field that is None here, or a "
            f"list index or dict key it lacks"
        )
    if path in other_present:
        return f"is an {other}, not an {side}"
    close = difflib.get_close_matches(path, list(present), n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return f"is not an {side}{hint}"
