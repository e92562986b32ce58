"""A griffe extension for the docs build: functions made by code, found by import.

mkdocstrings reads gradpipe's source without importing it, which keeps each
signature's annotations (properties included). A few public functions are not
written out in the source but made by code: `gradpipe.ooc.abs` and its siblings are
made in a loop in `gradpipe/ooc/ops/_elementwise.py` (static analysis cannot see
them, and the re-export `from ._elementwise import abs` would not resolve: a failed
build), and `DiskArray.sum` is `_forward("sum")` (static analysis sees an attribute
with no docstring). For the modules named in ``modules``, this extension imports the
module and, as inspection sees them, adds the public functions static analysis
missed and replaces the public class attributes it saw without a docstring where
they have one at run time.

Used from mkdocs.yml:

```yaml
extensions:
  - tools/griffe_generated_functions.py:
      modules: [gradpipe.ooc.ops._elementwise, gradpipe.ooc.arrays._array]
```
"""

from __future__ import annotations

import importlib
from typing import Any

import griffe


class GeneratedFunctions(griffe.Extension):
    """Complete the named modules with the functions that exist once they have run.

    **Arguments:**

    - `modules`: dotted names of the modules to complete.
    """

    def __init__(self, modules: list[str], namespaces: list[str] = ()) -> None:
        self.modules = set(modules)
        self.namespaces = list(namespaces)

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        """Give each namespace package an alias for every name of its run-time
        ``__all__`` that static analysis could not follow (a wildcard import of a
        module whose ``__all__`` is built by code), pointing where the object is
        defined."""
        for path in self.namespaces:
            if path != pkg.path and not path.startswith(pkg.path + "."):
                continue
            mod = pkg.get_member(path[len(pkg.path) + 1 :]) if path != pkg.path else pkg
            runtime = importlib.import_module(path)
            for name in runtime.__all__:
                if name in mod.members:
                    continue
                origin = getattr(getattr(runtime, name), "__module__", None)
                if origin and origin.startswith(pkg.path):
                    mod.set_member(name, griffe.Alias(name, f"{origin}.{name}", parent=mod))
            mod.exports = list(runtime.__all__)

    def on_module(self, *, mod: griffe.Module, loader: griffe.GriffeLoader, **kwargs: Any) -> None:
        if mod.path not in self.modules:
            return
        inspected = griffe.inspect(mod.path, docstring_parser=loader.docstring_parser)
        # a module whose ``__all__`` is built by code (``__all__ += [*UNARY, ...]``)
        # exports what it holds at run time, so wildcard imports of it resolve
        runtime_all = importlib.import_module(mod.path).__dict__.get("__all__")
        if runtime_all is not None:
            mod.exports = list(runtime_all)
        for name, member in inspected.members.items():
            if name.startswith("_") or name in mod.members or member.is_alias:
                continue
            if member.is_function:
                mod.set_member(name, member)
        for name, cls in mod.classes.items():
            if name.startswith("_") or name not in inspected.members:
                continue
            runtime = inspected.members[name]
            if runtime.is_alias or not runtime.is_class:
                continue
            for attr, member in runtime.members.items():
                if attr.startswith("_") or member.is_alias or not member.docstring:
                    continue
                static = cls.members.get(attr)
                if static is None or (static.is_attribute and not static.docstring):
                    cls.set_member(attr, member)
