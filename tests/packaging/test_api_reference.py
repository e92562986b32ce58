"""The API reference pages (docs/reference/*.md) document every public name.

Each page lists its subpackage's names as mkdocstrings blocks (``::: gradpipe.ooc.DiskArray``);
a name added to an `__all__` without a block would be missing from the site, and a block
for a name that left `__all__` would document something no longer public.
"""

import importlib
import pathlib
import re

import pytest

pytest.importorskip("jax")
pytest.importorskip("pydantic")
pytest.importorskip("starlette")

REFERENCE = pathlib.Path(__file__).resolve().parents[2] / "docs" / "reference"
PAGES = {
    "core.md": "gradpipe",
    "jax.md": "gradpipe.jax",
    "component.md": "gradpipe.component",
    "serve.md": "gradpipe.serve",
    "ooc.md": "gradpipe.ooc",
}


@pytest.mark.parametrize("page, package", PAGES.items())
def test_reference_page_lists_exactly_the_public_names(page, package):
    public = set(importlib.import_module(package).__all__) - {"__version__"}
    text = (REFERENCE / page).read_text(encoding="utf-8")
    blocks = re.findall(rf"^::: {re.escape(package)}\.(\w+)\s*$", text, flags=re.MULTILINE)
    assert len(blocks) == len(set(blocks)), f"{page} documents a name twice"
    missing = sorted(public - set(blocks))
    assert not missing, f"docs/reference/{page} lacks a '::: {package}.NAME' block for {missing}"
    stale = sorted(set(blocks) - public)
    assert not stale, f"docs/reference/{page} documents names not in {package}.__all__: {stale}"
