"""What gradpipe's two command lines share (``gradpipe`` in `gradpipe.cli`, ``serve``
and ``call`` in `gradpipe.serve._cli`): help that shows defaults, and importing the
object a ``MODULE:ATTR`` target names. Below both, so neither imports the other."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from typing import Any

__all__ = ["HelpFormatter", "import_hint", "import_target"]


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Help that shows each argument's default, unless its help already says it
    (``(default ...)``) or there is none to show (``None``: the help says what
    happens instead)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if "(default" in text or "%(default)" in text or action.default is None:
            return text
        return super()._get_help_string(action) or text


def import_target(target: str, app_dir: str | None, command: str) -> Any:
    """The object ``MODULE:ATTR`` names, importing MODULE with ``app_dir`` first on
    ``sys.path``. A `SystemExit` with one line that says what to do when it cannot:
    a malformed target, a module that is not found (with where it was looked for),
    a missing attribute."""
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        raise SystemExit(
            f"gradpipe {command}: the target must look like MODULE:ATTR "
            f"(e.g. mymodel:component), got {target!r}."
        )
    if app_dir is not None:
        path = os.path.abspath(app_dir)
        if path not in sys.path:
            sys.path.insert(0, path)
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as error:
        raise SystemExit(
            f"gradpipe {command}: {import_hint(module_name, app_dir, error)}"
        ) from None
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise SystemExit(f"gradpipe {command}: {module_name} has no attribute {attr!r}.")
        obj = getattr(obj, part)
    return obj


def import_hint(module_name: str, app_dir: str | None, error: ImportError) -> str:
    """What to do about ``error``, raised importing ``module_name``: when the module
    itself is not found, where Python looked and how to point it elsewhere."""
    missing = getattr(error, "name", None)
    top = module_name.split(".")[0]
    if isinstance(error, ModuleNotFoundError) and missing in (module_name, top):
        where = os.path.abspath(app_dir if app_dir is not None else os.getcwd())
        return (
            f"cannot import {module_name!r}: no {top}.py (or {top}/ package) in {where} or on "
            f"PYTHONPATH. Run from the directory that holds it, pass --app-dir DIR, or add DIR "
            f"to PYTHONPATH."
        )
    return f"importing {module_name!r} failed: {error}"
