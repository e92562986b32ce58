"""xarray out of core: a monthly-climatology anomaly and its area-weighted mean, on gradpipe, dask, cubed and NumPy.

The workload: a float32 ``t(time, lat, lon)`` of daily values over four years (time
1461, 2001-2004, lat 180 at 1 degree, lon 1024: 1.0 GiB), written once by xarray as
NetCDF-4 through ``h5netcdf`` (uncompressed; HDF5 chunks of whole lat-lon fields,
as many time steps as make about budget/8 bytes: 45 x 180 x 1024 = 31.6 MiB for a
256 MiB budget, one chunk well within it), then, on
``ds = xr.open_dataset(...)`` and ``t = ds["t"]``::

    clim = t.groupby("time.month").mean()                      # 12 x lat x lon
    anom = t.groupby("time.month") - clim                      # time x lat x lon
    series = anom.weighted(np.cos(np.deg2rad(ds["lat"]))).mean(("lat", "lon"))
    series.compute().values                                    # NumPy, length time

timed from the opened dataset to the NumPy array (building the graph included),
under ``xr.set_options(use_flox=False)`` for every contender: with ``flox`` installed
xarray would hand the groupby reduction to it for dask, cubed and NumPy (not for
gradpipe); without it the option changes nothing, and all take xarray's own path
(a reduction per month, stacked; the anomaly subtracts ``clim`` indexed by each day's
month). The run prints whether flox is installed.

    .venv/bin/python benchmarks/ooc_xarray.py            # 1 GiB, 256 MiB, 3 rounds: the recorded run
    .venv/bin/python benchmarks/ooc_xarray.py --quick    # lat 45 x lon 128 (32 MiB), 8 MiB, 2 rounds
    .venv/bin/python benchmarks/ooc_xarray.py --lon 256 --budget-mib 64 --rounds 1 --json x.json
    .venv/bin/python benchmarks/ooc_xarray.py --format zarr   # the same from an uncompressed zarr v3 store

Why NetCDF-4 by default: it is what most climate data comes as and the first thing
the chunk manager's docstring shows (``open_dataset(..., engine="h5netcdf", chunks={},
chunked_array_type="gradpipe")``), and every contender reads it through the same
file (HDF5 chunks, no codec); gradpipe reads the HDF5 chunks in place, the others
through xarray's h5netcdf backend. ``--format zarr`` writes an uncompressed zarr v3
store instead (``open_zarr``), cubed's native input.

Contenders (each in its own subprocess, once a round, the rounds interleaving them;
each first runs the workload untimed on the first three months of the same file,
so imports, thread pools and first dispatches stay out of the timing):

- ``gradpipe``: ``open_dataset(..., chunks={}, chunked_array_type="gradpipe")``
  (the file's chunks), under ``ooc.MemoryBudget(budget)`` (also the default budget),
  scratch files in the temporary directory.
- ``dask``: ``open_dataset(..., chunks={"time": T})`` with ``T`` the file's chunk
  (about budget/8 bytes: dask holds a few chunks per thread), threaded scheduler.
- ``cubed``: cubed-xarray, ``open_dataset(..., chunks={"time": T},
  chunked_array_type="cubed", from_array_kwargs={"spec": spec})`` with the spec set
  through ``cubed.config`` (``work_dir`` in the temporary directory, ``allowed_mem``
  the budget, ``reserved_mem`` 0: cubed's default reserves 100 MB of it for the
  interpreter), so that the arrays xarray makes without a spec (NumPy operands it
  chunks) get the same one (cubed refuses to mix specs in one computation); its
  default threads executor (one task per core; ``allowed_mem`` bounds each task, not
  the process), intermediates in the work dir (zarr, zarr's default codec). With
  cubed-xarray 0.0.9 and cubed 0.27 it fails at ``weighted(...).mean``: xarray's
  weighted reductions call ``einsum`` (through opt_einsum, or the array namespace
  with ``use_opt_einsum=False``), which cubed does not provide.
- ``numpy`` (the floor): ``xr.open_dataset(...).load()`` before the timing (the load
  is not timed), the same code on NumPy-backed variables.

Every contender's series is compared with the floor's (max absolute difference over
the largest entry of the floor's series), so a fast wrong answer shows; the data have
a seasonal cycle, a trend and a daily global signal, so the series is far from zero.
A contender that fails (cubed refusing a plan, say) shows its error in the table;
the others go on.

I/O: gradpipe's ``ooc.io_stats()`` around the timed run (every tile of an array
file, the input read in place and its scratch files); for the others ``rchar`` and
``wchar`` of ``/proc/self/io`` (bytes through read/write system calls: HDF5's reads
of the file, cubed's writes and reads of its work dir, page-cache hits included;
gradpipe's own are shown beside, as information). Peak RSS: VmHWM over the timed
run, reset through ``/proc/self/clear_refs`` just before it; "above base" subtracts
the RSS there (after imports, opening the file and the warm-up; for ``numpy``, after
the load), "above start" the RSS at the worker's start (before xarray, JAX or dask
are imported).

The targets: gradpipe at most 1.0x dask's time and 1.5x the floor's; gradpipe's
bytes read at most 2.1x the data; gradpipe's peak RSS at most budget + 96 MiB above
base; every series within 1e-4 of the floor's.

After the rounds, gradpipe's workload runs once more (not timed among the rounds), a
step at a time (``clim``, ``anom``, the weighted mean, ``.compute()``), each step
under ``ooc.explain`` and between ``ooc.io_stats()`` snapshots: the passes each made
(tile, bytes read and written, time) and, beside them, the step's own time and I/O,
so that work outside explain's passes shows as the difference (``--no-explain``
skips it).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from _measure import dir_bytes, measured, rel, status_mib, write_report

CONTENDERS = ["gradpipe", "dask", "cubed", "numpy"]
MIB = 2**20
N_TIME = 1461  # 2001-01-01 .. 2004-12-31, daily
AGREE = 1e-4  # the largest difference from the floor's series (over its largest entry)
VERDICT = {None: "n/a", True: "PASS", False: "MISS"}
WARM = {"time": slice(0, 90)}  # the warm-up: the first three months


# ---------------------------------------------------------------- process counters


# ---------------------------------------------------------------- the workload
def steps(ds):
    """The workload's steps, in order, as (label, function of the previous results)."""
    return [
        ("clim = t.groupby('time.month').mean()", lambda r: ds["t"].groupby("time.month").mean()),
        ("anom = t.groupby('time.month') - clim", lambda r: ds["t"].groupby("time.month") - r[0]),
        (
            "anom.weighted(cos(lat)).mean(('lat', 'lon'))",
            lambda r: r[1].weighted(np.cos(np.deg2rad(ds["lat"]))).mean(("lat", "lon")),
        ),
        (".compute().values", lambda r: np.asarray(r[2].compute().values)),
    ]


def workload(ds) -> np.ndarray:
    """The anomaly from the monthly climatology, cos(lat)-weighted over lat and lon,
    in memory: ``steps`` one after the other."""
    results: list = []
    for _, step in steps(ds):
        results.append(step(results))
    return results[-1]


def _open(name: str, path: Path, fmt: str, t_chunk: int, budget_mib: int, d: Path):
    """The dataset as contender ``name`` opens it (and its budget context)."""
    import xarray as xr

    kw = {"engine": "h5netcdf"} if fmt == "netcdf" else {"engine": "zarr", "consolidated": False}
    if name == "numpy":
        return xr.open_dataset(path, **kw).load(), contextlib.nullcontext()
    if name == "gradpipe":
        from gradpipe import ooc

        budget = ooc.MemoryBudget(budget_mib * MIB)
        ooc.set_default_budget(budget)
        ooc.set_scratch_dir(d / "scratch")
        ds = xr.open_dataset(path, chunks={}, chunked_array_type="gradpipe", **kw)
        return ds, budget
    chunks = {"time": t_chunk, "lat": -1, "lon": -1}
    if name == "dask":
        import dask

        ds = xr.open_dataset(path, chunks=chunks, chunked_array_type="dask", **kw)
        return ds, dask.config.set(scheduler="threads")
    if name == "cubed":
        import cubed
        from cubed.spec import spec_from_config

        # through cubed's config, so that the arrays xarray makes without a spec (NumPy
        # operands it chunks) get the same one: cubed refuses to mix specs
        work, mem = str(d / "cubed-work"), budget_mib * MIB
        cubed.config.set({"spec.work_dir": work, "spec.allowed_mem": mem, "spec.reserved_mem": 0})
        spec = spec_from_config(cubed.config)
        ds = xr.open_dataset(
            path, chunks=chunks, chunked_array_type="cubed", from_array_kwargs={"spec": spec}, **kw
        )
        return ds, contextlib.nullcontext()
    raise SystemExit(f"unknown contender {name!r}; choose from {CONTENDERS}")


def worker(name: str, d: Path, fmt: str, t_chunk: int, budget_mib: int) -> dict:
    """Contender ``name``: the workload once on three months (untimed), then timed."""
    start = status_mib("VmRSS")
    import xarray as xr

    xr.set_options(use_flox=False)
    ds, ctx = _open(
        name, d / f"data.{'nc' if fmt == 'netcdf' else 'zarr'}", fmt, t_chunk, budget_mib, d
    )
    with ctx:
        t = time.perf_counter()
        workload(ds.isel(WARM))  # one-time costs, untimed
        warm = time.perf_counter() - t
        if name == "gradpipe":
            from gradpipe import ooc

            io0 = ooc.io_stats()
        rec, out = measured(lambda: workload(ds))
        if name == "gradpipe":
            io = ooc.io_stats() - io0
            rec["read"], rec["written"] = io.bytes_read, io.bytes_written
        else:
            rec["read"], rec["written"] = rec["proc_read"], rec["proc_written"]
    if name == "cubed":
        rec["workdir_bytes"] = dir_bytes(d / "cubed-work")
        rec["written"] = max(rec["written"], rec["workdir_bytes"])
    rec.update(name=name, warm_s=warm, start_rss_mib=start)
    rec["above_start_mib"] = rec["peak_rss_mib"] - start
    rec["series"] = [float(v) for v in np.asarray(out, np.float64)]
    return rec


def explain_worker(d: Path, fmt: str, t_chunk: int, budget_mib: int) -> dict:
    """gradpipe's workload a step at a time, each under ``ooc.explain`` and between
    ``ooc.io_stats()`` snapshots (I/O outside explain's passes shows as the difference)."""
    import xarray as xr

    from gradpipe import ooc

    xr.set_options(use_flox=False)
    ds, budget = _open(
        "gradpipe", d / f"data.{'nc' if fmt == 'netcdf' else 'zarr'}", fmt, t_chunk, budget_mib, d
    )
    out, results = [], []
    with budget:
        workload(ds.isel(WARM))  # the same warm-up as the timed worker
        for label, step in steps(ds):
            io0, t = ooc.io_stats(), time.perf_counter()
            plan = ooc.explain(step, results)
            seconds, io = time.perf_counter() - t, ooc.io_stats() - io0
            results.append(plan.result)
            stages = [
                {
                    "stage": s.name if s.phase == "forward" else f"{s.name} {s.phase}",
                    "tile": list(s.tile),
                    "tiles": s.tiles,
                    "seconds": s.seconds,
                    "read": s.io.bytes_read,
                    "written": s.io.bytes_written,
                    "reads": [str(r) for r in s.reads],
                }
                for s in plan.stages
            ]
            out.append(
                {
                    "step": label,
                    "seconds": seconds,
                    "read": io.bytes_read,
                    "written": io.bytes_written,
                    "passes_s": sum(s["seconds"] for s in stages),
                    "passes_read": plan.io.bytes_read,
                    "passes_written": plan.io.bytes_written,
                    "text": str(plan),
                    "stages": stages,
                }
            )
    return {"steps": out}


def print_explain(explained: dict, size: int) -> None:
    """Per step: its passes (as ``print(ooc.explain(...))`` shows them), then its time
    and I/O against what the passes account for."""
    if "error" in explained:
        print(f"  failed: {explained['error']}")
        return
    mib = lambda b: f"{b / MIB:.1f} MiB ({b / size:.2f}x data)"
    for st in explained["steps"]:
        print(f"\n-- {st['step']}")
        print(st["text"])
        print(
            f"step: {st['seconds']:.2f} s (passes {st['passes_s']:.2f} s); read {mib(st['read'])},"
            f" passes {mib(st['passes_read'])}; wrote {mib(st['written'])}, passes {mib(st['passes_written'])}"
        )
    tot = {
        k: sum(st[k] for st in explained["steps"])
        for k in ("seconds", "passes_s", "read", "passes_read", "written", "passes_written")
    }
    print(
        f"\nall steps: {tot['seconds']:.2f} s, {tot['passes_s']:.2f} s in explain's passes;"
        f" read {mib(tot['read'])}, {mib(tot['passes_read'])} in the passes;"
        f" wrote {mib(tot['written'])}, {mib(tot['passes_written'])} in the passes"
    )


# ---------------------------------------------------------------- setup and rounds
def make_inputs(path: Path, fmt: str, n_lat: int, n_lon: int, t_chunk: int) -> None:
    """``t`` (K): a zonal and seasonal climate, a trend, a daily global signal and
    weather noise; written by xarray (``to_netcdf``/``to_zarr``) from a dask array made
    a chunk at a time, so it is never whole in memory."""
    import dask
    import dask.array as da
    import pandas as pd
    import xarray as xr

    time_ = pd.date_range("2001-01-01", periods=N_TIME, freq="D")
    lat = np.linspace(-90, 90, n_lat + 1)[:-1] + 90 / n_lat  # cell centres, degrees
    lon = np.arange(n_lon) * (360.0 / n_lon)
    phi = np.deg2rad(lat)[:, None]
    base = (288 - 30 * np.sin(phi) ** 2 + 3 * np.cos(np.deg2rad(lon))[None, :]).astype(np.float32)
    doy = time_.day_of_year.to_numpy()
    season = 12 * np.cos(2 * np.pi * (doy - 15) / 365.25)  # * sin(lat): opposite hemispheres
    trend = 0.5 * np.arange(N_TIME) / 365.25
    daily = 0.8 * np.random.default_rng(1).standard_normal(N_TIME)  # a global signal per day

    def block(block_info=None):
        (a, b), _, _ = block_info[None]["array-location"]
        rng = np.random.default_rng([7, a])
        out = rng.standard_normal((b - a, n_lat, n_lon), np.float32) * 2
        out += base
        out -= (season[a:b, None, None] * np.sin(phi)[None]).astype(np.float32)
        out += (trend[a:b] + daily[a:b]).astype(np.float32)[:, None, None]
        return out

    data = da.map_blocks(
        block,
        chunks=(
            (t_chunk,) * (N_TIME // t_chunk) + ((N_TIME % t_chunk,) if N_TIME % t_chunk else ()),
            (n_lat,),
            (n_lon,),
        ),
        dtype=np.float32,
    )
    ds = xr.Dataset(
        {"t": (("time", "lat", "lon"), data, {"units": "K", "long_name": "air temperature"})},
        coords={
            "time": time_,
            "lat": ("lat", lat, {"units": "degrees_north"}),
            "lon": ("lon", lon, {"units": "degrees_east"}),
        },
    )
    with dask.config.set(scheduler="threads"):
        if fmt == "netcdf":
            enc = {"t": {"chunksizes": (t_chunk, n_lat, n_lon)}}
            ds.to_netcdf(path, engine="h5netcdf", encoding=enc)
        else:
            enc = {"t": {"chunks": (t_chunk, n_lat, n_lon), "compressors": None}}
            ds.to_zarr(path, zarr_format=3, consolidated=False, encoding=enc)


def _run(cmd: list[str], timeout: float | None = None) -> dict:
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:g} s"}
    if out.returncode != 0:
        lines = [ln for ln in out.stderr.strip().splitlines() if ln.strip()]
        return {"error": lines[-1][:300] if lines else f"exit status {out.returncode}"}
    return json.loads(out.stdout.strip().splitlines()[-1])


def _worker_cmd(d: Path, args) -> list[str]:
    cmd = [sys.executable, __file__, "--data", str(d), "--format", args.format]
    return [*cmd, "--t-chunk", str(args.t_chunk), "--budget-mib", str(args.budget_mib)]


def run_contender(name: str, d: Path, args) -> dict:
    r = _run([*_worker_cmd(d, args), "--worker", name], args.timeout)
    for leftover in ("scratch", "cubed-work"):  # this worker's, if any
        shutil.rmtree(d / leftover, ignore_errors=True)
    return dict(r, name=name)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--lat", type=int, default=180)
    p.add_argument("--lon", type=int, default=1024)
    p.add_argument("--budget-mib", type=int, default=256)
    p.add_argument("--t-chunk", type=int, help="time steps a chunk (default: about budget/8 bytes)")
    p.add_argument("--format", choices=["netcdf", "zarr"], default="netcdf")
    p.add_argument("--rounds", type=int, help="rounds, each contender once a round (default 3)")
    p.add_argument("--contenders", nargs="+", default=CONTENDERS, choices=CONTENDERS)
    p.add_argument("--quick", action="store_true", help="lat 45 x lon 128, 8 MiB, 2 rounds")
    p.add_argument("--no-explain", action="store_true", help="skip gradpipe's explain")
    p.add_argument("--dir", default="/tmp", help="where the temporary directory goes")
    p.add_argument("--timeout", type=float, default=1200, help="seconds a worker may take")
    p.add_argument("--json", metavar="PATH", help="also write the results as JSON ('-': stdout)")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--explain-worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--data", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker or args.explain_worker:
        d = Path(args.data)
        if args.worker:
            rec = worker(args.worker, d, args.format, args.t_chunk, args.budget_mib)
        else:
            rec = explain_worker(d, args.format, args.t_chunk, args.budget_mib)
        print(json.dumps(rec))
        return
    if args.quick:
        args.lat, args.lon, args.budget_mib = 45, 128, 8
    args.rounds = args.rounds or (2 if args.quick else 3)
    step_bytes = args.lat * args.lon * 4
    args.t_chunk = args.t_chunk or max(1, min(N_TIME, args.budget_mib * MIB // 8 // step_bytes))
    try:
        import flox  # noqa: F401

        flox_note = "flox installed: every contender runs with use_flox=False"
    except ImportError:
        flox_note = (
            "flox not installed (use_flox=False set anyway): xarray's own groupby path for all"
        )

    d = Path(tempfile.mkdtemp(prefix="gradpipe-bench-xarray-", dir=args.dir))
    results: dict[str, list[dict]] = {name: [] for name in args.contenders}
    explained = None
    try:
        t = time.perf_counter()
        path = d / f"data.{'nc' if args.format == 'netcdf' else 'zarr'}"
        make_inputs(path, args.format, args.lat, args.lon, args.t_chunk)
        size = N_TIME * step_bytes
        chunk_mib = args.t_chunk * step_bytes / MIB
        print(
            f"t {N_TIME}x{args.lat}x{args.lon} float32 ({size / MIB:.1f} MiB), {args.format},"
            f" chunks of {args.t_chunk} time steps ({chunk_mib:.2f} MiB), in {d}"
            f" ({time.perf_counter() - t:.1f} s)"
        )
        print(f"budget {args.budget_mib} MiB, {args.rounds} rounds; {flox_note}")
        print(
            f"load {os.getloadavg()}, {os.cpu_count()} cpus, {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}"
        )
        # Rounds interleave the contenders, so load from other processes falls on all alike.
        for i in range(args.rounds):
            for name in args.contenders:
                r = run_contender(name, d, args)
                results[name].append(r)
                print(f"  round {i + 1} {name}: {r.get('time', r.get('error'))}", flush=True)
        if "gradpipe" in args.contenders and not args.no_explain:
            explained = _run([*_worker_cmd(d, args), "--explain-worker"], args.timeout)
            shutil.rmtree(d / "scratch", ignore_errors=True)
    finally:
        shutil.rmtree(d, ignore_errors=True)
    print(f"load after: {os.getloadavg()}")
    report = print_table(results, args, size)
    if explained is not None:
        print("\ngradpipe a step at a time under ooc.explain (one more run, not among the rounds):")
        print_explain(explained, size)
        report["explain"] = explained
    write_report(report, args.json)


# ---------------------------------------------------------------- report


def print_table(results: dict[str, list[dict]], args, size: int) -> dict:
    """Print the table (medians and maxima over the rounds), the differences from
    the floor and the targets; return it all."""
    summary: dict[str, dict] = {}
    ran = {name: recs for name, recs in results.items() if not any("error" in r for r in recs)}
    ref = ran["numpy"][0]["series"] if "numpy" in ran else None
    print(
        f"\n{'contender':<10} {'median s':>9} {'warm s':>7} {'read/data':>10} {'wrote MiB':>10}"
        f" {'peak MiB':>9} {'above base':>11} {'above start':>12} {'diff':>8}"
    )
    for name, recs in results.items():
        if name not in ran:
            print(f"{name:<10} failed: {next(r['error'] for r in recs if 'error' in r)}")
            continue
        r = summary[name] = {"median_s": statistics.median(rec["time"] for rec in recs)}
        r["times"] = [rec["time"] for rec in recs]
        r["warm_s"] = statistics.median(rec["warm_s"] for rec in recs)
        for k in ("peak_rss_mib", "above_base_mib", "above_start_mib", "read", "written"):
            r[k] = max(rec[k] for rec in recs)
        r["proc_read"] = max(rec["proc_read"] for rec in recs)
        if ref is not None:
            r["rel_diff"] = max(rel(rec["series"], ref) for rec in recs)
        print(
            f"{name:<10} {r['median_s']:>9.2f} {r['warm_s']:>7.2f} {r['read'] / size:>10.3f}"
            f" {r['written'] / MIB:>10.1f} {r['peak_rss_mib']:>9.0f} {r['above_base_mib']:>11.0f}"
            f" {r['above_start_mib']:>12.0f} {r.get('rel_diff', np.nan):>8.1e}"
        )
    if "gradpipe" in summary:
        g = summary["gradpipe"]
        print(f"(info) gradpipe's rchar from /proc/self/io: {g['proc_read'] / size:.3f} x the data")
    med = {name: r["median_s"] for name, r in summary.items()}
    g = summary.get("gradpipe", {})

    def ratio(a, b):
        return a / b if a is not None and b else None

    rows = [
        ("gradpipe / dask", ratio(med.get("gradpipe"), med.get("dask")), 1.0),
        ("gradpipe / numpy in memory (floor)", ratio(med.get("gradpipe"), med.get("numpy")), 1.5),
        ("gradpipe bytes read / data", ratio(g.get("read"), size), 2.1),
        ("gradpipe peak RSS above base MiB", g.get("above_base_mib"), args.budget_mib + 96),
    ]
    rows += [
        (f"{name} series vs numpy", summary.get(name, {}).get("rel_diff"), AGREE)
        for name in ("gradpipe", "dask", "cubed")
    ]
    print(f"\n{'target':<38} {'measured':>9}  {'limit':>8}")
    targets = []
    for label, value, limit in rows:
        ok = None if value is None else bool(value <= limit)
        shown = "n/a" if ok is None else f"{value:.3g}"
        print(f"{label:<38} {shown:>9}  <= {limit:<6g} {VERDICT[ok]}")
        targets.append({"target": label, "measured": value, "limit": limit, "pass": ok})
    if g:
        print(f"{'(info) gradpipe peak RSS above start MiB':<38} {g['above_start_mib']:>9.0f}")
    for a, b in [("dask", "numpy"), ("cubed", "numpy"), ("gradpipe", "cubed")]:
        if a in med and b in med:
            print(f"{f'(info) {a} / {b}':<38} {med[a] / med[b]:>9.3g}")
    config = {
        k: getattr(args, k) for k in ("lat", "lon", "budget_mib", "t_chunk", "format", "rounds")
    }
    config["time"], config["data_bytes"] = N_TIME, size
    for recs in results.values():
        for rec in recs:
            rec.pop("series", None)
    return {"config": config, "summary": summary, "targets": targets, "rounds": results}


if __name__ == "__main__":
    main()
