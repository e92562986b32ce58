"""Run every benchmark script in this folder, one after the other (`make bench`).

Each script measures gradpipe against its peer in the same run and prints a table
of ratios; docs/benchmarks.md records the figures.
"""

from __future__ import annotations

import pathlib
import subprocess
import sys

HERE = pathlib.Path(__file__).parent
ORDER = [
    "core_overhead.py",
    "components.py",
    "serve.py",
    "ooc_matmul.py",
    "ooc_chain.py",
    "ooc_params.py",
    "ooc_xarray.py",
    "ooc_cluster.py",
]


def main() -> int:
    failures = []
    for name in ORDER:
        script = HERE / name
        if not script.exists():
            print(f"== {name}: not present, skipped")
            continue
        print(f"== {name}", flush=True)
        if subprocess.run([sys.executable, str(script)]).returncode != 0:
            failures.append(name)
    if failures:
        print(f"failed: {', '.join(failures)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
