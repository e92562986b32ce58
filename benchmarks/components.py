"""gradpipe.component against itself and against tesseract-core's JAX recipe.

One function of a 1e6-float32 input whose forward pass dominates (an elementwise
Newton solve with an implicit-function derivative, `peer_component_function.py`):

- (a) apply + vjp with the residual cache on, against off (the vjp then runs the
  forward pass again);
- (b) building the exact content key of the 1e6-float input, and checking a hit
  (on the device for a JAX array, on the host for a NumPy input), as fractions of
  one apply;
- (c) our in-process apply + vjp against the peer runtime's in-process JAX recipe
  (``tesseract_core.runtime.jax_recipes``), run in a subprocess with the peer's own
  virtual environment (``$PEER_PYTHON``, default ``.venv-peer/bin/python``), with
  its VJP cache off (its default) and on.

Every figure is the median of several runs, all measured in this one run, the
peer's in turns with ours so that a busy machine slows both alike. Within a round
each measurement runs ``--block`` calls in a row (a loop, as a user calls it), on
both sides alike: alternating five settings call by call in one process leaves
the allocator in a state no user's loop has, and page faults on fresh memory are
the costliest thing this VM does. Both sides
validate a dict of NumPy arrays per endpoint call and block on the results. Each
weight of the forward pass (``--newton-steps``) gets its own table.

    python benchmarks/components.py [--repeats 9] [--block 3] [--newton-steps 150 60] [--json]
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
from peer_component_function import (  # noqa: E402
    SIZE,
    inputs,
    make_simulate,
)


class In(pydantic.BaseModel):
    x: Differentiable[Array[np.float32, (None,)]]


class Out(pydantic.BaseModel):
    y: Differentiable[Array[np.float32, (None,)]]


def median_time(call, repeats: int) -> float:
    call()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(call())
        times.append(time.perf_counter() - start)
    return statistics.median(times)


class Peer:
    """The peer's recipe in its own process, timed one apply+vjp at a time."""

    def __init__(self, newton_steps: int) -> None:
        default = HERE.parent / ".venv-peer" / "bin" / "python"
        python = os.environ.get("PEER_PYTHON", str(default))
        if not pathlib.Path(python).exists():
            raise RuntimeError(f"peer Python not found at {python} (make .venv-peer/.installed)")
        self.process = subprocess.Popen(
            [python, str(HERE / "peer_component_recipe.py"), str(newton_steps)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError("the peer exited before it was ready (see its stderr above)")
        self.version = json.loads(line)["tesseract_core"]

    def __call__(self, setting: str) -> float:
        self.process.stdin.write(setting + "\n")
        self.process.stdin.flush()
        return float(self.process.stdout.readline())

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait(timeout=60)


def timed(call) -> float:
    start = time.perf_counter()
    jax.block_until_ready(call())
    return time.perf_counter() - start


def measure(repeats: int, newton_steps: int, block: int = 3) -> dict:
    """Medians of every measurement; the peer is timed in turns with ours."""
    simulate = make_simulate(newton_steps)
    x, ct = inputs()
    payload, cotangent = {"x": x}, {"y": ct}

    def fn(d):
        return {"y": simulate(d["x"])}

    on = Component(fn, inputs=In, outputs=Out)
    off = Component(fn, inputs=In, outputs=Out, residual_cache=False)

    def apply_vjp(comp):
        return lambda: (comp.apply(payload), comp.vjp(payload, ["x"], ["y"], cotangent))

    pure = jax.jit(lambda x, ct: jax.vjp(simulate, x)[1](ct))
    ours = {
        "cache_on": apply_vjp(on),
        "cache_off": apply_vjp(off),
        "apply_on": lambda: on.apply(payload),
        "apply_off": lambda: off.apply(payload),
        "pure_jax": lambda: pure(x, ct),
    }
    for call in ours.values():
        jax.block_until_ready(call())
    try:
        peer: Peer | None = Peer(newton_steps)
    except RuntimeError as error:
        print(f"(c) skipped: {error}", file=sys.stderr)
        peer = None
    times: dict[str, list[float]] = {name: [] for name in ours}
    if peer is not None:
        times.update(peer_cache_off=[], peer_cache_on=[])
    for _ in range(repeats):
        for name, call in ours.items():
            times[name].extend(timed(call) for _ in range(block))
        if peer is not None:
            for setting in ("cache_off", "cache_on"):
                times[f"peer_{setting}"].extend(peer(setting) for _ in range(block))
    result: dict = {name: statistics.median(t) for name, t in times.items()}
    if peer is not None:
        result["peer_version"] = peer.version
        peer.close()
    result["hits"] = on.residual_cache.info().hits

    device_x = jnp.asarray(x)
    copy = jnp.array(np.asarray(device_x))
    key, other = ContentKey((), (device_x,)), ContentKey((), (copy,))
    assert key == other
    result["key"] = median_time(lambda: ContentKey((), (device_x,)).digest, repeats)
    result["key_check"] = median_time(lambda: [key == other], repeats)
    # A NumPy input is compared on the host against the kept key's private copy.
    host_key = ContentKey((), (x,)).private()
    assert host_key == ContentKey((), (x,))
    result["key_check_host"] = median_time(lambda: [host_key == ContentKey((), (x,))], repeats)
    return result


def table(r: dict) -> list[tuple[str, str, str, str]]:
    ms = lambda s: f"{1e3 * s:.1f}"
    ratio = lambda a, b: f"{r[a] / r[b]:.2f}"
    rows = [
        ("(a) apply+vjp, cache off", ms(r["cache_off"]), "1.00", ""),
        ("(a) apply+vjp, cache on", ms(r["cache_on"]), ratio("cache_on", "cache_off"), "<= 0.6"),
        ("    pure JAX jit(vjp), for scale", ms(r["pure_jax"]), "", ""),
        ("(b) apply, cache off", ms(r["apply_off"]), "1.00", ""),
        ("(b) apply, cache on", ms(r["apply_on"]), ratio("apply_on", "apply_off"), ""),
        (
            f"(b) content key + fingerprint, {SIZE:.0e} float32",
            ms(r["key"]),
            f"{r['key'] / r['apply_off']:.3f}",
            "",
        ),
        (
            "(b) exact comparison on a hit, on the device",
            ms(r["key_check"]),
            f"{r['key_check'] / r['apply_off']:.3f}",
            "",
        ),
        (
            "(b) exact comparison on a hit, NumPy input on the host",
            ms(r["key_check_host"]),
            f"{r['key_check_host'] / r['apply_off']:.3f}",
            "",
        ),
    ]
    if "peer_cache_off" not in r:
        return [*rows, ("(c) peer", "not run", "", "")]
    return [
        *rows,
        ("(c) peer jax_recipes apply+vjp (its default)", ms(r["peer_cache_off"]), "1.00", ""),
        (
            "(c) peer with its VJP cache on",
            ms(r["peer_cache_on"]),
            ratio("peer_cache_on", "peer_cache_off"),
            "",
        ),
        ("(c) ours (cache on) / peer default", "", ratio("cache_on", "peer_cache_off"), "<= 0.7"),
        ("(c) ours (cache on) / peer cache on", "", ratio("cache_on", "peer_cache_on"), ""),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--block", type=int, default=3, help="calls in a row per round")
    parser.add_argument(
        "--newton-steps",
        type=int,
        nargs="+",
        default=[150, 60],
        help="weights of the forward pass (Newton steps), one table each",
    )
    parser.add_argument("--json", action="store_true", help="print the raw medians as JSON")
    args = parser.parse_args()
    results = {steps: measure(args.repeats, steps, args.block) for steps in args.newton_steps}
    if args.json:
        print(json.dumps(results))
        return
    for steps, r in results.items():
        peer = f", tesseract-core {r['peer_version']}" if "peer_version" in r else ""
        print(f"\n{steps} Newton steps; jax {jax.__version__}{peer}; medians of {args.repeats}")
        rows = [("measurement", "ms", "ratio", "target"), *table(r)]
        widths = [max(len(row[i]) for row in rows) for i in range(4)]
        for i, row in enumerate(rows):
            print("| " + " | ".join(cell.ljust(w) for cell, w in zip(row, widths)) + " |")
            if i == 0:
                print("|-" + "-|-".join("-" * w for w in widths) + "-|")


if __name__ == "__main__":
    main()
