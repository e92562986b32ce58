"""Write the namespace part of docs/reference/ooc.md from gradpipe.ooc itself.

The array API namespace has some 200 public names; listing them by hand would drift.
This script keeps the page's hand-written sections (above the marker line) and
writes one section per family below it, placing each public name by the module that
defines it. `tests/packaging/test_api_reference.py` checks the page against
``gradpipe.ooc.__all__``; run ``python tools/write_ooc_reference.py`` after adding a name.
"""

from __future__ import annotations

import importlib
import pathlib
import types

MARKER = "<!-- the namespace, by family: written by tools/write_ooc_reference.py -->"
PAGE = pathlib.Path(__file__).resolve().parents[1] / "docs" / "reference" / "ooc.md"

# (section title, intro, defining modules) in page order
FAMILIES = [
    (
        "Data types and constants",
        "NumPy's dtype objects and Python floats, as the standard names them.",
        ("storage._constants",),
    ),
    ("Data type functions", "", ("kernels._data_types",)),
    ("Namespace inspection", "", ("_namespace_info", "arrays._device")),
    ("Creation functions", "", ("ops._creation",)),
    (
        "Elementwise functions",
        "Each is one block kernel; its gradient is JAX's VJP of that kernel.",
        ("ops._elementwise",),
    ),
    (
        "Statistical and utility functions",
        "",
        ("ops._reduce", "ops._extrema", "ops._statistics", "ops._cumulative", "ops._differences"),
    ),
    (
        "NaN-skipping reductions",
        "NumPy's names, outside the array API standard: xarray asks an array's namespace "
        "for them when it skips missing values (its default for floating data).",
        ("ops._nanreduce",),
    ),
    (
        "Quantiles and medians",
        "NumPy's names, outside the array API standard: xarray's `quantile` and `median` "
        "ask an array's namespace for them. Each element of the other axes holds its "
        "reduced axes whole in memory; those axes are cut into tiles by the budget.",
        ("ops._quantile",),
    ),
    ("Searching functions", "", ("ops._searching",)),
    ("Sorting functions", "", ("ops._sorting",)),
    ("Manipulation functions", "", ("ops._manipulation", "ops._pad")),
    ("Indexing", "", ("ops._layout", "ops._take")),
    ("Linear algebra", "", ("ops._matmul", "ops._linalg", "ops._einsum")),
    (
        "Writing",
        "In-place updates, and `persist`, which writes a fused result now.",
        ("ops._update", "ops._persist"),
    ),
    (
        "Arrays where they lie",
        "zarr arrays (any fsspec store) and HDF5 datasets computed on in place, with no copy.",
        ("storage._zarr_file", "storage._hdf5_file", "_open_in_place"),
    ),
    (
        "Extensions",
        "The standard's `linalg` and `fft` extensions, as sub-namespaces of `gradpipe.ooc`.",
        ("extension",),
    ),
]


def _module_of(ooc, name: str) -> str | None:
    obj = getattr(ooc, name)
    if isinstance(obj, types.ModuleType):  # the linalg and fft extensions
        return "extension"
    module = getattr(obj, "__module__", None)
    known = {f"gradpipe.ooc.{m}" for family in FAMILIES for m in family[2]}
    if (isinstance(obj, type) or callable(obj)) and module in known:
        return module
    for family in FAMILIES:  # constants: found by the module that binds the name
        for mod in family[2]:
            if mod != "extension" and name in vars(importlib.import_module(f"gradpipe.ooc.{mod}")):
                return f"gradpipe.ooc.{mod}"
    return None


def main() -> None:
    ooc = importlib.import_module("gradpipe.ooc")
    text = PAGE.read_text(encoding="utf-8")
    head = text.split(MARKER)[0].rstrip() + "\n\n"
    documented = {
        line.split(".")[-1].strip() for line in head.splitlines() if line.startswith("::: ")
    }
    placed: dict[str, list[str]] = {title: [] for title, _, _ in FAMILIES}
    unplaced = []
    for name in ooc.__all__:
        if name in documented or name == "__version__":
            continue
        module = _module_of(ooc, name)
        for title, _, mods in FAMILIES:
            if module in {f"gradpipe.ooc.{m}" for m in mods} or module in mods:
                placed[title].append(name)
                break
        else:
            unplaced.append(name)
    if unplaced:
        raise SystemExit(f"no family for {unplaced}: add a section above the marker or a family")
    parts = [head, MARKER, "\n"]
    for title, intro, _ in FAMILIES:
        if not placed[title]:
            continue
        parts.append(f"\n## {title}\n\n" + (f"{intro}\n\n" if intro else ""))
        options = "    options:\n      show_attribute_values: true\n"
        for name in sorted(placed[title], key=str.lower):
            constant = title == "Data types and constants"
            parts.append(f"::: gradpipe.ooc.{name}\n" + (options if constant else "") + "\n")
    PAGE.write_text("".join(parts).rstrip() + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
