"""gradpipe.component against itself and against tesseract-core's JAX recipe.

One function of a 1e6-float32 input whose forward pass dominates (an elementwise
Newton solve with an implicit-function derivative, `peer_component_function.py`):

- (a) apply + vjp with the residual cache on, against off (the vjp then runs the
  forward pass again);
- (b) building the exact content key of the 1e6-float input, and checking a hit,
  as fractions of one apply;
- (c) our in-process apply + vjp against the peer runtime's in-process JAX recipe
  (``tesseract_core.runtime.jax_recipes``), run in a subprocess with the peer's own
  virtual environment (``$PEER_PYTHON``, default ``.venv-peer/bin/python``), with
  its VJP cache off (its default) and on.

Every figure is the median of several runs, measured in this one run; both sides
validate a dict input per endpoint call and block on the results.

    python benchmarks/components.py [--repeats 9] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import pydantic

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from gradpipe.component import Array, Component, ContentKey, Differentiable  # noqa: E402
from peer_component_function import SIZE, inputs, simulate  # noqa: E402


class In(pydantic.BaseModel):
    x: Differentiable[Array[np.float32, (None,)]]


class Out(pydantic.BaseModel):
    y: Differentiable[Array[np.float32, (None,)]]


def fn(d):
    return {"y": simulate(d["x"])}


def median_time(call, repeats: int) -> float:
    call()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(call())
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def interleaved(calls: dict, repeats: int) -> dict[str, float]:
    """Median seconds of each call, run in turns so that drift hits all alike."""
    for call in calls.values():
        jax.block_until_ready(call())
    times: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(repeats):
        for name, call in calls.items():
            start = time.perf_counter()
            jax.block_until_ready(call())
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) for name, t in times.items()}


def run_peer(repeats: int) -> dict | str:
    python = os.environ.get("PEER_PYTHON", str(HERE.parent / ".venv-peer" / "bin" / "python"))
    if not pathlib.Path(python).exists():
        return f"peer Python not found at {python} (make .venv-peer/.installed)"
    done = subprocess.run(
        [python, str(HERE / "peer_component_recipe.py"), str(repeats)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if done.returncode != 0:
        return f"peer failed: {done.stderr.strip().splitlines()[-1:]}"
    return json.loads(done.stdout.strip().splitlines()[-1])


def measure(repeats: int) -> dict:
    x, ct = inputs()
    payload, cotangent = {"x": x}, {"y": ct}
    on = Component(fn, inputs=In, outputs=Out)
    off = Component(fn, inputs=In, outputs=Out, residual_cache=False)

    def apply_vjp(comp):
        return lambda: (comp.apply(payload), comp.vjp(payload, ["x"], ["y"], cotangent))

    pure = jax.jit(lambda x, ct: jax.vjp(simulate, x)[1](ct))
    a = interleaved(
        {
            "cache_on": apply_vjp(on),
            "cache_off": apply_vjp(off),
            "apply_on": lambda: on.apply(payload),
            "apply_off": lambda: off.apply(payload),
            "pure_jax": lambda: pure(x, ct),
        },
        repeats,
    )
    device_x = jnp.asarray(x)
    jax.block_until_ready(device_x)
    copy = jnp.array(np.asarray(device_x))
    key, other = ContentKey((), (device_x,)), ContentKey((), (copy,))
    assert key == other
    a["key"] = median_time(lambda: ContentKey((), (device_x,)).digest, repeats)
    a["key_check"] = median_time(lambda: [key == other], repeats)
    return a


def table(ours: dict, peer: dict | str) -> list[tuple[str, str, str, str]]:
    ms = lambda s: f"{1e3 * s:.1f}"
    rows = [
        ("(a) apply+vjp, cache off", ms(ours["cache_off"]), "1.00", ""),
        (
            "(a) apply+vjp, cache on",
            ms(ours["cache_on"]),
            f"{ours['cache_on'] / ours['cache_off']:.2f}",
            "<= 0.6",
        ),
        ("    pure JAX jit(vjp), for scale", ms(ours["pure_jax"]), "", ""),
        ("(b) apply, cache off", ms(ours["apply_off"]), "1.00", ""),
        (
            "(b) apply, cache on",
            ms(ours["apply_on"]),
            f"{ours['apply_on'] / ours['apply_off']:.2f}",
            "",
        ),
        (
            f"(b) content key + fingerprint, {SIZE:.0e} float32",
            ms(ours["key"]),
            f"{ours['key'] / ours['apply_off']:.3f}",
            "",
        ),
        (
            "(b) exact comparison on a hit",
            ms(ours["key_check"]),
            f"{ours['key_check'] / ours['apply_off']:.3f}",
            "",
        ),
    ]
    if isinstance(peer, str):
        rows.append(("(c) peer", peer, "", ""))
        return rows
    rows += [
        ("(c) peer jax_recipes apply+vjp (default)", ms(peer["cache_off"]), "1.00", ""),
        (
            "(c) peer with its VJP cache on",
            ms(peer["cache_on"]),
            f"{peer['cache_on'] / peer['cache_off']:.2f}",
            "",
        ),
        (
            "(c) ours (cache on) vs peer default",
            "",
            f"{ours['cache_on'] / peer['cache_off']:.2f}",
            "<= 0.7",
        ),
        (
            "(c) ours (cache on) vs peer cache on",
            "",
            f"{ours['cache_on'] / peer['cache_on']:.2f}",
            "",
        ),
    ]
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--json", action="store_true", help="print the raw medians as JSON")
    args = parser.parse_args()
    ours = measure(args.repeats)
    peer = run_peer(args.repeats)
    if args.json:
        print(json.dumps({"ours": ours, "peer": peer}))
        return
    versions = "" if isinstance(peer, str) else f", peer tesseract-core {peer['tesseract_core']}"
    print(f"gradpipe.component, jax {jax.__version__}{versions}, medians of {args.repeats}")
    rows = [("measurement", "ms", "ratio", "target"), *table(ours, peer)]
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    for i, row in enumerate(rows):
        print(" | ".join(cell.ljust(w) for cell, w in zip(row, widths)))
        if i == 0:
            print("-+-".join("-" * w for w in widths))


if __name__ == "__main__":
    main()
