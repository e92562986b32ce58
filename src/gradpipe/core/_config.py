"""Configurations: the JSON-safe description of an operator, and its round trip.

An operator's configuration is the set of its ``__init__`` arguments. It must hold
only values JSON represents exactly (``None``, ``bool``, ``int``, finite ``float``,
``str``, and lists, tuples and string-keyed dicts of these) or nested operators.
Anything else is refused when the configuration is built, with the operator and the
field named: a NumPy scalar stored as its ``repr`` comes back as a string, which is
a silent wrong answer several steps later.

Tuples and operators have no JSON form, so they are tagged: ``{"$tuple": [...]}``
and ``{"$operator": state}``. Dict keys starting with ``$`` are reserved for tags.
"""

from __future__ import annotations

import difflib
import importlib
import json
import math
import sys
from typing import Any

import yaml

__all__ = [
    "ConfigError",
    "decode_config",
    "encode_config",
    "from_state",
    "known_operator",
    "nest_in_configs",
    "public_module",
    "register_operator",
    "state_from_json",
    "state_from_yaml",
    "state_to_json",
    "state_to_yaml",
]

_TUPLE = "$tuple"
_OPERATOR = "$operator"

# Classes that `from_state` may rebuild, by "module:qualname". Every `Operator`
# subclass defined at module level registers itself; `register_operator` adds others.
_REGISTRY: dict[str, type] = {}
# What a configuration may hold as its `state` ({"$operator": state}): `Operator`,
# named by `nest_in_configs` (the operator module imports this one, not the reverse).
_NESTED: tuple[type, ...] = ()
# Modules `from_state` may import to find a class that is not registered yet.
_IMPORTABLE_PREFIXES = ("gradpipe.",)


class ConfigError(TypeError):
    """A configuration value that cannot be saved or a state that cannot be loaded."""


def _class_id(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


def nest_in_configs(cls: type) -> type:
    """Let configurations hold instances of ``cls`` (and its subclasses), saved as
    their ``state`` and rebuilt by `from_state`."""
    global _NESTED
    if cls not in _NESTED:
        _NESTED = (*_NESTED, cls)
    return cls


def register_operator(cls: type) -> type:
    """Allow `from_state` to rebuild ``cls``. Usable as a class decorator."""
    if "<locals>" in cls.__qualname__:
        return cls  # a class inside a function cannot be found again by name
    _REGISTRY[_class_id(cls)] = cls
    return cls


def public_module(cls: type) -> str:
    """The shortest package path that exports ``cls`` (``gradpipe.core``, not
    ``gradpipe.core._operator``), so saved states survive moves between private
    modules."""
    parts = cls.__module__.split(".")
    for end in range(1, len(parts)):
        candidate = ".".join(parts[:end])
        module = sys.modules.get(candidate)
        if module is not None and getattr(module, cls.__qualname__, None) is cls:
            return candidate
    return cls.__module__


def known_operator(module: str, name: str) -> type[Any]:
    """The registered class ``module:name``; imports only gradpipe's own modules."""
    key = f"{module}:{name}"
    if key in _REGISTRY:
        return _REGISTRY[key]
    if module.startswith(_IMPORTABLE_PREFIXES) or module == "gradpipe":
        found = getattr(importlib.import_module(module), name, None)
        if isinstance(found, type) and _REGISTRY.get(_class_id(found)) is found:
            return found
    raise ConfigError(
        f"Cannot rebuild operator {key}: the class is not registered.{_suggest(key, name)} "
        f"Import the module that defines it before loading, or decorate it with "
        f"gradpipe.register_operator. States never import arbitrary modules."
    )


def _suggest(key: str, name: str) -> str:
    """`` Did you mean ...?`` naming the registered classes closest to ``key``: those
    whose class name is close to ``name``, by their public module path."""
    known = {f"{public_module(cls)}:{cls.__qualname__}" for cls in _REGISTRY.values()}
    names = {k.rpartition(":")[2] for k in known}
    close_names = difflib.get_close_matches(name, names, n=3, cutoff=0.75)
    close = [k for n in close_names for k in sorted(known) if k.rpartition(":")[2] == n]
    close = [k for k in close if k != key][:3]
    if not close:
        return ""
    return f" Did you mean {' or '.join(close)}?"


def encode_config(value: Any, *, owner: str, field: str) -> Any:
    """Turn a configuration value into JSON-ready data, or raise `ConfigError`.

    **Arguments:**

    - `value`: the value to encode.
    - `owner`, `field`: named in the error, e.g. ``"Scale"`` and ``"factor"``.
    """
    kind = type(value)
    if value is None or kind in (bool, int, str):
        return value
    if kind is float:
        if not math.isfinite(value):
            raise ConfigError(
                f"{owner}.{field} = {value!r} cannot be saved: JSON has no "
                f"non-finite floats. Store it as a string option or leave it out of "
                f"the configuration."
            )
        return value
    if kind is list:
        return [encode_config(v, owner=owner, field=f"{field}[{i}]") for i, v in enumerate(value)]
    if kind is tuple:
        return {
            _TUPLE: [
                encode_config(v, owner=owner, field=f"{field}[{i}]") for i, v in enumerate(value)
            ]
        }
    if kind is dict:
        out = {}
        for k, v in value.items():
            if type(k) is not str:
                raise ConfigError(
                    f"{owner}.{field} has a key {k!r} of type {type(k).__name__}; "
                    f"configuration dicts need str keys."
                )
            if k.startswith("$"):
                raise ConfigError(
                    f"{owner}.{field} has a key {k!r}; keys starting with '$' are "
                    f"reserved for gradpipe's tags. Rename the key."
                )
            out[k] = encode_config(v, owner=owner, field=f"{field}[{k!r}]")
        return out
    if isinstance(value, _NESTED):
        nested: Any = value  # an Operator: it has a state
        try:
            return {_OPERATOR: nested.state}
        except ConfigError as error:
            raise ConfigError(f"{owner}.{field}: {error}") from None
    raise ConfigError(
        f"{owner}.{field} = {value!r} (type {kind.__module__}.{kind.__qualname__}) cannot "
        f"be saved: configurations hold only None, bool, int, float, str, lists, "
        f"tuples, str-keyed dicts and operators. Convert it first (for example "
        f"float(x) for a NumPy scalar, x.tolist() for an array), or keep arrays in "
        f"weights."
    )


def decode_config(value: Any) -> Any:
    """Invert `encode_config`: rebuild tuples and nested operators."""
    if isinstance(value, list):
        return [decode_config(v) for v in value]
    if isinstance(value, dict):
        if set(value) == {_TUPLE}:
            return tuple(decode_config(v) for v in value[_TUPLE])
        if set(value) == {_OPERATOR}:
            return from_state(value[_OPERATOR])
        return {k: decode_config(v) for k, v in value.items()}
    return value


def from_state(state: dict) -> Any:
    """Rebuild an operator from its `state` (``{"module", "class", "config"}``)."""
    if not isinstance(state, dict) or not {"module", "class", "config"} <= set(state):
        raise ConfigError(
            "An operator state is a dict with keys 'module', 'class' and 'config'; "
            f"got {state!r:.200}."
        )
    cls = known_operator(state["module"], state["class"])
    return cls.from_config(decode_config(state["config"]))


def state_to_json(state: dict, **dumps_kwargs: Any) -> str:
    """A state as strict JSON text (no NaN, no infinities)."""
    return json.dumps(state, allow_nan=False, **dumps_kwargs)


def state_from_json(text: str) -> dict:
    """Parse JSON text written by `state_to_json`."""
    return json.loads(text)


def state_to_yaml(state: dict) -> str:
    """A state as YAML text that `state_from_yaml` reads back with the safe loader."""
    return yaml.safe_dump(state, sort_keys=False)


def state_from_yaml(text: str) -> dict:
    """Parse YAML text with the safe loader: no Python objects are constructed."""
    return yaml.safe_load(text)
