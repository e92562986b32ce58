"""`make lint`'s module-size check: no module of src/ over 400 lines.

The modules that were over the limit when the check came in are listed below with
the size they had; each may shrink but not grow, and leaves the list (the check
says so) once it is under the limit. Every other module must stay at or under it.

    python tools/module_sizes.py          # exit status 1, with the reasons, on a breach
"""

from __future__ import annotations

import pathlib
import sys

LIMIT = 400
ROOT = pathlib.Path(__file__).resolve().parent.parent

#: Over the limit when the check came in (2026-12-03): path -> lines then.
OVERSIZE = {
    "src/gradpipe/ooc/kernels/_numpy_eval.py": 723,
    "src/gradpipe/ooc/arrays/_array.py": 618,
    "src/gradpipe/ooc/ops/_matmul.py": 609,
    "src/gradpipe/ooc/arrays/_hijax.py": 553,
    "src/gradpipe/ooc/planning/_chain.py": 525,
    "src/gradpipe/ooc/storage/_paged_file.py": 503,
    "src/gradpipe/ooc/ops/_statistics.py": 489,
    "src/gradpipe/ooc/execution/_driver.py": 478,
    "src/gradpipe/ooc/ops/_linalg_extension.py": 458,
    "src/gradpipe/component/_component.py": 450,
    "src/gradpipe/ooc/ops/_indexing.py": 446,
    "src/gradpipe/component/_schema.py": 423,
    "src/gradpipe/ooc/ops/_reduce.py": 416,
    "src/gradpipe/core/_registry.py": 405,
    "src/gradpipe/serve/_app.py": 403,
}


def breaches(root: pathlib.Path = ROOT) -> list[str]:
    """What breaks the rule, one line each (empty when it holds)."""
    found = []
    sizes = {
        str(p.relative_to(root)): len(p.read_text().splitlines())
        for p in sorted((root / "src").rglob("*.py"))
    }
    for path, lines in sizes.items():
        allowed = OVERSIZE.get(path, LIMIT)
        if lines > allowed:
            listed = path in OVERSIZE
            grown = f" (it had {allowed} when listed; it may only shrink)" if listed else ""
            found.append(f"{path}: {lines} lines, over {allowed}{grown}; split it by concept.")
        elif path in OVERSIZE and lines <= LIMIT:
            found.append(f"{path}: {lines} lines, within {LIMIT}: remove it from OVERSIZE.")
    for path in sorted(set(OVERSIZE) - set(sizes)):
        found.append(f"{path}: no longer exists: remove it from OVERSIZE.")
    return found


def main() -> int:
    problems = breaches()
    for line in problems:
        print(line, file=sys.stderr)
    listed = len(OVERSIZE)
    print(f"module sizes: {len(problems)} problem(s); {listed} modules still over {LIMIT} lines")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
