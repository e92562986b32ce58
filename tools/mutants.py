"""Mutation testing with hand-made, plausible one-line mutants.

Each mutants file (TOML, one per area under ``tools/mutants/``) lists edits that a
careless change could make: an off-by-one in a size limit, a length check loosened
from ``!=`` to ``<``, a temporary name dropped from an atomic write. For every mutant
this script copies the project into a temporary directory, applies the one edit,
runs the tests the mutant names, and calls it *killed* when they fail. A surviving
mutant is a behaviour no test pins down.

    python tools/mutants.py tools/mutants/serve.toml [more.toml ...] [--root DIR]

A mutants file looks like::

    area = "serve"

    [[mutant]]
    file = "src/gradpipe/serve/_app.py"
    find = "if size > limit:"          # must occur exactly once in the file
    replace = "if size >= limit:"
    tests = ["tests/serve/test_errors.py"]
    why = "off-by-one in the body-size limit"

The unmutated tree is run first on the union of the tests; a failure there stops
the run, since it would make every mutant look killed.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path

IGNORE = shutil.ignore_patterns(
    ".git", ".venv*", "__pycache__", "*.egg-info", ".hypothesis", ".pytest_cache", "out"
)


@dataclass(frozen=True)
class Mutant:
    area: str
    file: str
    find: str
    replace: str
    tests: tuple[str, ...]
    why: str


def load(paths: list[Path]) -> list[Mutant]:
    mutants = []
    for path in paths:
        data = tomllib.loads(path.read_text())
        area = data.get("area", path.stem)
        for i, entry in enumerate(data.get("mutant", [])):
            missing = {"file", "find", "replace", "tests"} - entry.keys()
            if missing:
                raise SystemExit(f"{path}: mutant[{i}] lacks {sorted(missing)}")
            mutants.append(
                Mutant(area, entry["file"], entry["find"], entry["replace"],
                       tuple(entry["tests"]), entry.get("why", ""))
            )  # fmt: skip
    return mutants


def run_tests(tree: Path, tests: tuple[str, ...], timeout: float) -> tuple[int, str]:
    env = {**os.environ, "PYTHONPATH": str(tree / "src"), "JAX_PLATFORMS": "cpu"}
    command = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *tests]
    try:
        done = subprocess.run(
            command, cwd=tree, env=env, capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        return 124, "timed out"
    tail = (done.stdout + done.stderr).strip().splitlines()
    return done.returncode, tail[-1] if tail else ""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="+", type=Path, help="mutants files (TOML)")
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[1],
                        help="project to mutate (default: this checkout)")  # fmt: skip
    parser.add_argument("--timeout", type=float, default=600, help="seconds per test run")
    args = parser.parse_args()
    mutants = load(args.files)

    with tempfile.TemporaryDirectory(prefix="gradpipe-mutants-") as tmp:
        tree = Path(tmp) / "tree"
        shutil.copytree(args.root, tree, ignore=IGNORE)
        every_test = tuple(sorted({t for m in mutants for t in m.tests}))
        code, tail = run_tests(tree, every_test, args.timeout)
        if code != 0:
            print(f"the unmutated tree fails its tests ({tail}); fix that first")
            return 2

        results: dict[str, list[tuple[Mutant, bool, str]]] = {}
        for mutant in mutants:
            target = tree / mutant.file
            original = target.read_text()
            count = original.count(mutant.find)
            if count != 1:
                raise SystemExit(f"{mutant.file}: {mutant.find!r} occurs {count} times, not once")
            target.write_text(original.replace(mutant.find, mutant.replace))
            start = time.monotonic()
            try:
                code, tail = run_tests(tree, mutant.tests, args.timeout)
            finally:
                target.write_text(original)
            killed = code != 0
            verdict = "killed" if killed else "SURVIVED"
            print(f"[{mutant.area}] {verdict:8} {time.monotonic() - start:5.1f}s  "
                  f"{mutant.file}: {mutant.why or mutant.replace}", flush=True)  # fmt: skip
            results.setdefault(mutant.area, []).append((mutant, killed, tail))

    print("\n| area | mutants | killed | kill rate |\n|---|---|---|---|")
    for area, rows in results.items():
        killed = sum(k for _, k, _ in rows)
        print(f"| {area} | {len(rows)} | {killed} | {killed / len(rows):.0%} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
