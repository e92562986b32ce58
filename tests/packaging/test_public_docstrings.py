"""Every public name has a docstring: the API reference is generated from them.

A public name is one in a subpackage's `__all__`: its classes and functions, and the
public methods and properties that gradpipe defines on those classes (inherited ones
from gradpipe's own base classes included; those of equinox, pydantic or the standard
library are theirs to document). Constants are left out: they have no ``__doc__`` of
their own.

`MISSING` lists the names that have none yet; it is empty, and may only shrink: the
test fails on a public name without a docstring that is not listed, and on a listed
name that has gained one (remove it from the list) or no longer exists.
"""

import importlib
import inspect

import pytest

pytest.importorskip("jax")
pytest.importorskip("pydantic")
pytest.importorskip("starlette")

PACKAGES = ("gradpipe", "gradpipe.jax", "gradpipe.component", "gradpipe.serve", "gradpipe.ooc")

MISSING: frozenset[str] = frozenset()


def _ours(obj: object) -> bool:
    return (getattr(obj, "__module__", None) or "").startswith("gradpipe")


def _has_docstring(obj: object) -> bool:
    doc = obj.__dict__.get("__doc__") if inspect.isclass(obj) else obj.__doc__
    return bool(doc and doc.strip())


def _members(cls: type):
    """Public callables and properties gradpipe defines on `cls` or its gradpipe bases."""
    seen = set()
    for klass in cls.__mro__:
        if not _ours(klass):
            continue
        for name, raw in vars(klass).items():
            if name.startswith("_") or name in seen:
                continue
            seen.add(name)
            if isinstance(raw, property):
                target = raw.fget
            elif isinstance(raw, staticmethod | classmethod):
                target = raw.__func__
            elif inspect.isfunction(raw):
                target = raw
            else:
                continue
            if target is not None and _ours(target):
                yield name, target


def public_objects() -> dict[str, object]:
    """Each public class, function and method, by the first public name that reaches it."""
    found: dict[str, object] = {}
    ids: set[int] = set()

    def add(name: str, obj: object) -> None:
        if id(obj) not in ids:
            ids.add(id(obj))
            found[name] = obj

    for package in PACKAGES:
        module = importlib.import_module(package)
        for name in module.__all__:
            obj = getattr(module, name)
            if inspect.isclass(obj):
                add(f"{package}.{name}", obj)
                for member, target in _members(obj):
                    add(f"{package}.{name}.{member}", target)
            elif callable(obj):
                add(f"{package}.{name}", obj)
    return found


def test_every_public_name_has_a_docstring():
    objects = public_objects()
    undocumented = {name for name, obj in objects.items() if not _has_docstring(obj)}
    new = sorted(undocumented - MISSING)
    assert not new, (
        "These public names have no docstring; write one (equinox style: what it is "
        f"for, then **Arguments:** / **Returns:**) or make the name private: {new}"
    )
    fixed = sorted(MISSING - undocumented)
    assert not fixed, (
        f"These names now have a docstring or are gone; remove them from MISSING: {fixed}"
    )
