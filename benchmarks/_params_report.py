"""The tables of `ooc_params.py`, one pair per workload.

First each contender's median step and, over the rounds, the most it read, wrote and
held, with its largest difference from ``jax-memory``. Then the targets of issue 32
(PASS/MISS), each of gradpipe's ratios beside the parts it is made of: the passes
of its timed step (run under ``ooc.explain``) summed by phase, ``fwd``, ``bwd``, or
``fwd+bwd`` for a pass that computes the loss and its gradient together, and
``outside``, the step's time outside any pass; medians over the rounds, each over
the ratio's denominator (a median of sums is not the sum of medians, so they add up
near the ratio, not exactly to it). Reading and computing are one pass, which
``explain`` does not time apart: the read and written rows give the bytes.
"""

from __future__ import annotations

import statistics

import numpy as np

from _measure import rel

FLOORS = ["jax-memory", "numpy-memory"]
AGREE = 1e-4  # the largest relative difference from jax-memory that passes
OUTPUTS = ("loss", "grads", "params")
VERDICT = {None: "n/a", True: "PASS", False: "MISS"}
SHORT = {"forward": "fwd", "backward": "bwd", "value and gradient": "fwd+bwd"}
MIB = 2**20


def print_tables(results: dict[str, dict[str, list[dict]]], args) -> dict:
    """Print both tables of each workload in ``results`` (workload -> contender ->
    one record a round); return them all, the rounds included."""
    x_bytes = args.rows * args.cols * 4
    config = {k: getattr(args, k) for k in ("rows", "cols", "budget_mib", "rounds")}
    workloads = {
        wl: _workload_tables(wl, recs, x_bytes, args.budget_mib) for wl, recs in results.items()
    }
    return {"config": config, "x_bytes": x_bytes, "workloads": workloads, "rounds": results}


def _workload_tables(workload: str, results: dict[str, list[dict]], x_bytes: int, budget_mib):
    summary = _contenders(workload, results, x_bytes)
    med = {name: r["median_s"] for name, r in summary.items()}
    g = summary.get("gradpipe", {})
    floor = min((med[f] for f in FLOORS if f in med), default=None)
    parts = [rec["parts"] for rec in results.get("gradpipe", []) if "parts" in rec]

    def ratio(a, b):
        return a / b if a is not None and b else None

    seconds = lambda b: _parts(parts, "seconds", b, with_passes=True) if parts and b else ""
    rows = [
        ("gradpipe / faster floor", ratio(med.get("gradpipe"), floor), 1.2, seconds(floor)),
        (
            "gradpipe / jax-stream",
            ratio(med.get("gradpipe"), med.get("jax-stream")),
            1.0,
            seconds(med.get("jax-stream")),
        ),
        (
            "gradpipe / dask",
            ratio(med.get("gradpipe"), med.get("dask")),
            0.7,
            seconds(med.get("dask")),
        ),
        (
            "gradpipe read / X per step",
            ratio(g.get("read"), x_bytes),
            1.05,
            _parts(parts, "read", x_bytes) if parts else "",
        ),
        (
            "gradpipe written MiB per step",
            ratio(g.get("written"), MIB),
            1.0,
            _parts(parts, "written", MIB) if parts else "",
        ),
        ("gradpipe above base MiB", g.get("above_base_mib"), budget_mib + 64, ""),
    ]
    rows += [(f"gradpipe {k} vs jax-memory", g.get(f"{k}_rel_diff"), AGREE, "") for k in OUTPUTS]
    print(f"\n{workload + ' target':<34} {'measured':>9}  {'limit':<9} {'':<4}  parts")
    targets = []
    for label, value, limit, made_of in rows:
        ok = None if value is None else bool(value <= limit)
        shown = "n/a" if ok is None else f"{value:.3g}"
        print(f"{label:<34} {shown:>9}  <= {limit:<6g} {VERDICT[ok]:<4}  {made_of}".rstrip())
        targets.append(
            {"target": label, "measured": value, "limit": limit, "pass": ok, "parts": made_of}
        )
    info = [
        ("jax-stream / faster floor", ratio(med.get("jax-stream"), floor)),
        ("jax-stream read / X", ratio(summary.get("jax-stream", {}).get("read"), x_bytes)),
        ("gradpipe / numpy-mapped", ratio(med.get("gradpipe"), med.get("numpy-mapped"))),
        ("numpy-mapped / numpy-memory", ratio(med.get("numpy-mapped"), med.get("numpy-memory"))),
        ("dask / numpy-memory", ratio(med.get("dask"), med.get("numpy-memory"))),
        ("jax-memory / numpy-memory", ratio(med.get("jax-memory"), med.get("numpy-memory"))),
    ]
    for label, value in info:
        if value is not None:
            print(f"{f'(info) {label}':<34} {value:>9.3g}")
    return {"summary": summary, "targets": targets}


def _contenders(workload: str, results: dict[str, list[dict]], x_bytes: int) -> dict:
    """Print the contenders' table; return its figures by contender."""
    ran = {name: recs for name, recs in results.items() if not any("error" in r for r in recs)}
    ref = ran["jax-memory"][0] if "jax-memory" in ran else None
    print(
        f"\n{workload:<14} {'median s':>9} {'read/X':>7} {'wrote MiB':>10} {'peak MiB':>9}"
        f" {'above base':>11} {'loss diff':>10} {'grad diff':>10} {'param diff':>10}"
    )
    summary = {}
    for name, recs in results.items():
        if name not in ran:
            print(f"{name:<14} failed: {next(r['error'] for r in recs if 'error' in r)}")
            continue
        r = summary[name] = {"median_s": statistics.median(rec["time"] for rec in recs)}
        for k in ("peak_rss_mib", "above_base_mib", "read", "written"):
            r[k] = max(rec[k] for rec in recs)
        for k in OUTPUTS if ref else ():
            r[f"{k}_rel_diff"] = max(rel(rec[k], ref[k]) for rec in recs)
        diffs = "".join(f" {r.get(f'{k}_rel_diff', np.nan):>10.1e}" for k in OUTPUTS)
        print(
            f"{name:<14} {r['median_s']:>9.3f} {r['read'] / x_bytes:>7.3f} {r['written'] / MIB:>10.2f}"
            f" {r['peak_rss_mib']:>9.0f} {r['above_base_mib']:>11.0f}{diffs}"
        )
    return summary


def _parts(parts: list[dict], key: str, scale: float, with_passes: bool = False) -> str:
    """``fwd a (n) + bwd b (m) + outside c = total``: the medians over the rounds of
    each phase's ``key`` over ``scale``, with its number of passes."""
    order = {"forward": 0, "value and gradient": 1, "backward": 2, "outside": 4}
    phases = sorted({ph for p in parts for ph in p}, key=lambda ph: (order.get(ph, 3), ph))
    terms, total = [], 0.0
    for ph in phases:
        value = statistics.median(p[ph][key] for p in parts if ph in p) / scale
        if ph == "outside" and not with_passes:
            continue
        total += value
        passes = statistics.median(p[ph]["passes"] for p in parts if ph in p)
        count = f" ({passes:g})" if with_passes and ph != "outside" else ""
        terms.append(f"{SHORT.get(ph, ph)} {value:.3g}{count}")
    return " + ".join(terms) + f" = {total:.3g}"
