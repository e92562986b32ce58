"""`make lint`'s module-size check: no module of src/ over 400 lines.

A module that outgrows the limit holds more than one concept: split it by concept
(see docs/contributing.md), in the same package and layer.

    python tools/module_sizes.py          # exit status 1, with the reasons, on a breach
"""

from __future__ import annotations

import pathlib
import sys

LIMIT = 400
ROOT = pathlib.Path(__file__).resolve().parent.parent


def breaches(root: pathlib.Path = ROOT) -> list[str]:
    """What breaks the rule, one line each (empty when it holds)."""
    found = []
    for p in sorted((root / "src").rglob("*.py")):
        lines = len(p.read_text().splitlines())
        if lines > LIMIT:
            found.append(
                f"{p.relative_to(root)}: {lines} lines, over {LIMIT}; split it by concept."
            )
    return found


def main() -> int:
    problems = breaches()
    for line in problems:
        print(line, file=sys.stderr)
    print(f"module sizes: {len(problems)} module(s) over {LIMIT} lines")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
