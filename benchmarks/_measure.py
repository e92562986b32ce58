"""What the out-of-core benchmarks measure in each worker process: time, peak RSS
(VmHWM, reset just before), the process's I/O counters, mapped and stored bytes;
and how they compare and report results."""

from __future__ import annotations

import json
import resource
import time
from pathlib import Path

import numpy as np


def status_mib(key: str) -> float:
    """``key`` of /proc/self/status (``VmRSS``, ``VmHWM``) in MiB; elsewhere the
    process's maximum RSS."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def reset_peak() -> float:
    """Reset VmHWM to the current RSS (Linux >= 4.0) and return that RSS in MiB.
    VmHWM, not ru_maxrss: ru_maxrss survives fork and exec and cannot be reset."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
    except OSError:
        pass
    return status_mib("VmRSS")


def proc_io() -> dict[str, int]:
    """The process's I/O counters (``rchar``, ``wchar``, ...), zeros where unknown."""
    try:
        with open("/proc/self/io") as fh:
            return {k: int(v) for k, v in (line.split(":") for line in fh)}
    except OSError:
        return {"rchar": 0, "wchar": 0}


def mapped_bytes(*paths: Path) -> int:
    """Resident bytes of this process's mappings of ``paths`` (reading a memory map
    makes no system call, so /proc/self/io does not see it)."""
    total, inside, targets = 0, False, {str(Path(p).resolve()) for p in paths}
    try:
        with open("/proc/self/smaps") as fh:
            for line in fh:
                head = line.split(maxsplit=5)
                if "-" in head[0] and len(head) >= 5:
                    inside = len(head) == 6 and head[5].strip() in targets
                elif inside and head[0] == "Rss:":
                    total += int(head[1]) * 1024
    except OSError:
        pass
    return total


def dir_bytes(path: Path) -> int:
    """The bytes of the files below ``path``."""
    return sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file())


def measured(fn):
    """``fn()`` once: its record (``time``, ``base_rss_mib``, ``peak_rss_mib``,
    ``above_base_mib``, ``proc_read``, ``proc_written``) and its result."""
    base = reset_peak()
    io0 = proc_io()
    t = time.perf_counter()
    out = fn()
    rec = {"time": time.perf_counter() - t, "base_rss_mib": base}
    io1 = proc_io()
    rec["peak_rss_mib"] = status_mib("VmHWM")
    rec["above_base_mib"] = rec["peak_rss_mib"] - base
    rec["proc_read"] = io1["rchar"] - io0["rchar"]
    rec["proc_written"] = io1["wchar"] - io0["wchar"]
    return rec, out


def rel(got, want) -> float:
    """The largest absolute difference over the largest reference entry (inf for
    a result of another shape)."""
    got, want = np.atleast_1d(got), np.atleast_1d(want)
    if got.shape != want.shape:
        return float("inf")
    return float(np.max(np.abs(got - want)) / max(np.max(np.abs(want)), 1e-30))


def write_report(report: dict, dest: str | None) -> None:
    """``report`` as JSON: printed for ``-``, written to the file ``dest`` else."""
    if dest == "-":
        print(json.dumps(report, indent=1))
    elif dest:
        Path(dest).write_text(json.dumps(report, indent=1) + "\n")
