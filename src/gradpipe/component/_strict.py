"""What a component refuses in an input before pydantic validates it: fields the
models do not have, and static values pydantic would coerce.

pydantic's default drops a field a model does not declare (``extra="ignore"``) and
coerces ``"2"`` into an ``int``. For a component both are input the caller did not
mean: a misspelled ``lerning_rate`` leaves the default in place, and the call
answers for an input nobody sent. This walk reads the raw input along the model
nodes and names the first such field by its path.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any, Literal

from ._casting import static_problem
from ._nodes import DictNode, ListNode, ModelNode, Node, OptionalNode, StaticNode
from ._paths import ComponentInputError, join_index, join_key, join_name

__all__ = ["EXTRAS", "Extra", "check_extra", "check_given"]

Extra = Literal["forbid", "ignore"]
EXTRAS: tuple[str, ...] = ("forbid", "ignore")


def check_extra(extra: Any) -> None:
    """Refuse an ``extra=`` setting that is not one of `EXTRAS`."""
    if extra not in EXTRAS:
        raise ValueError(
            f"Component extra= must be 'forbid' (refuse unknown input fields) or 'ignore' "
            f"(drop them, pydantic's default), got {extra!r}."
        )


def _forbids(model: Any, extra: str) -> bool:
    # A model that says how to treat extra fields itself is taken at its word.
    own = model.model_config.get("extra")
    return own == "forbid" if own is not None else extra == "forbid"


def check_given(node: Node, value: Any, *, extra: str, casting: str, path: str = "") -> None:
    """Raise a `ComponentInputError` naming the first unknown field (unless ``extra``
    is ``"ignore"`` or the model allows it) or the first static value that pydantic
    would coerce (unless ``casting`` is ``"unchecked"``). Values of the wrong type
    are left to the validation that follows, which names them too."""
    if isinstance(node, OptionalNode):
        if value is not None:
            check_given(node.inner, value, extra=extra, casting=casting, path=path)
    elif isinstance(node, StaticNode):
        if casting == "checked":
            problem = static_problem(node._adapter, value)
            if problem:
                raise ComponentInputError(path, f"Input {path!r}: {problem}.")
    elif isinstance(node, ModelNode):
        if not isinstance(value, Mapping):
            return
        if _forbids(node.model, extra):
            known = _known_keys(node.model)
            unknown = [k for k in value if k not in known]
            if unknown:
                _refuse_unknown(node, path, unknown[0], len(unknown))
        for name, child in node.fields:
            if name in value:
                check_given(child, value[name], extra=extra, casting=casting,
                            path=join_name(path, name))  # fmt: skip
    elif isinstance(node, ListNode):
        if isinstance(value, list | tuple):
            for i, item in enumerate(value):
                check_given(node.item, item, extra=extra, casting=casting,
                            path=join_index(path, i))  # fmt: skip
    elif isinstance(node, DictNode) and isinstance(value, Mapping):
        for key, item in value.items():
            if isinstance(key, str):
                check_given(node.value, item, extra=extra, casting=casting,
                            path=join_key(path, key))  # fmt: skip


def _known_keys(model: Any) -> set[str]:
    """The keys a model reads: its field names and their string aliases."""
    known = set(model.model_fields)
    for info in model.model_fields.values():
        known.update(a for a in (info.alias, info.validation_alias) if isinstance(a, str))
    return known


def _refuse_unknown(node: ModelNode, path: str, name: Any, count: int) -> None:
    where = join_name(path, str(name))
    known = [n for n, _ in node.fields]
    close = difflib.get_close_matches(str(name), known, n=1)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    more = f" ({count - 1} more unknown)" if count > 1 else ""
    fields = ", ".join(repr(n) for n in known) or "none"
    model = f"{node.model.__name__} ({path})" if path else node.model.__name__
    raise ComponentInputError(
        where,
        f"Input {where!r} is not a field of {model}{more}; its fields are {fields}.{hint} "
        f"Unknown fields are refused so that a misspelled one does not leave the default "
        f"in place; build the Component with extra='ignore' to drop them instead.",
    )
