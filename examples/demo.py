"""`make demo`: the running example of gradpipe, part by part.

1. A core pipeline: compose, inspect, save and reload (examples/core_pipeline.py).
2. The five-band retrieval under jit, vmap and grad, with learned coefficients
   (examples/retrieval.py).
3. An out-of-core least-squares gradient (examples/out_of_core.py).

Plots are written to ./out (or the folder given as the first argument).
"""

from __future__ import annotations

import importlib.util
import pathlib
import sys
import time

HERE = pathlib.Path(__file__).parent
PARTS = [
    ("core pipeline", "core_pipeline.py"),
    ("five-band retrieval under jit, vmap and grad", "retrieval.py"),
    ("out-of-core least squares", "out_of_core.py"),
]


def _load(path: pathlib.Path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    spec.loader.exec_module(module)
    return module


def main(argv: list[str]) -> int:
    outdir = pathlib.Path(argv[0] if argv else "out").resolve()
    outdir.mkdir(parents=True, exist_ok=True)
    for number, (title, filename) in enumerate(PARTS, start=1):
        path = HERE / filename
        if not path.exists():
            continue
        print(f"\n=== {number}. {title} ===\n", flush=True)
        start = time.perf_counter()
        _load(path).main(outdir)
        print(f"\n({title}: {time.perf_counter() - start:.1f} s)")
    print(f"\nAll outputs are in {outdir}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
