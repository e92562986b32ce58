"""What dropping a block's mapped pages costs on an accelerator's host (issue 33).

A diagnostic, not a benchmark: a device pass drops each piece's pages of its map
once the piece's program ran (`_tile_program.Tile.release_views`), and on the
sandboxed TPU host that took 3 ms per 64 MiB, as long as the piece's transfer.
Each mode times ``madvise(MADV_DONTNEED)`` of 64 MiB blocks of ``size`` GiB sent
to the device, medians:

- ``--use``: by how the block was used (sent; sent and run by a jitted step; with
  its target; with five more queued), on the benchmark's ``X`` (written by
  gradpipe, `benchmarks/ooc_device.py`) through ``np.memmap`` and gradpipe's map;
- ``--files``: by how a file of random floats was made (preallocated or not) and
  where the blocks start (4 KiB in: an array file's header), mapped once or twice;
- ``--copy``: gradpipe's ``X`` against a copy of it written in 32 MiB writes;
- ``--sync``: a file of random floats as written, after ``fsync``, after a rename,
  and after both (as gradpipe commits a named array: `PagedFile.commit`);
- ``--writes [HOW ...]``: a file of 32 MiB pages, each a new array, written with
  ``pwrite``, with ``pwritev`` of one buffer or of 1024 rows, with temporaries made
  between the writes (as the benchmark's rows are), by gradpipe
  (`DiskArray.from_row_blocks`), and each page copied into one buffer used for every
  page ("pwrite from a reused buffer"); the names after the flag pick some;
- ``--steps``: the least-squares and MLP training steps of `ooc_device.py` on
  gradpipe's ``X`` and on that copy.

    python3 tools/device_drops.py 2 --copy    # on the accelerator (tools/on_device.sh's set-up)
"""

from __future__ import annotations

import contextlib
import ctypes
import io
import mmap
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import ooc_device as od
from _params_workloads import WORKLOADS
from gradpipe import ooc
from gradpipe.ooc.storage import _file_map

K, BUDGET, BLOCK, HEADER = 256, 512 * 2**20, 64 * 2**20, 4096
_madvise = _file_map._libc_madvise()  # (the C library's, as gradpipe's release calls it)


def _drop(block: np.ndarray) -> float:
    start = time.perf_counter()
    if _madvise(block.ctypes.data, block.nbytes, mmap.MADV_DONTNEED) != 0:
        raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
    return time.perf_counter() - start


def _drops_after_sends(fmap: _file_map.FileMap, size: int, shift: int) -> float:
    """The median drop of the 64 MiB blocks ``shift`` bytes in, each sent first."""
    drops = []
    for off in range(0, size - BLOCK, BLOCK):
        block = fmap.view(off + shift, (BLOCK // 4,), np.float32)
        jax.block_until_ready(jax.device_put(block))
        drops.append(_drop(block))
    return statistics.median(drops)


def _x(d: Path, size_gib: float):
    rows = int(size_gib * 2**30) // (4 * K)
    start = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):
        X, mapped, targets, disk = od._inputs(d, rows, BUDGET)
    print(f"X ({size_gib} GiB) written by gradpipe in {time.perf_counter() - start:.1f} s")
    return X, mapped, targets, disk


def _copy_of(d: Path) -> tuple[int, int, int]:
    """gradpipe's X and its copy in 32 MiB writes: their descriptors and size."""
    src = os.open(d / "X.gpa", os.O_RDONLY)
    size = os.fstat(src).st_size
    dst = os.open(d / "copy.gpa", os.O_RDWR | os.O_CREAT)
    start = time.perf_counter()
    for off in range(0, size, 32 * 2**20):
        os.pwrite(dst, os.pread(src, 32 * 2**20, off), off)
    print(f"copied in 32 MiB writes in {time.perf_counter() - start:.1f} s", flush=True)
    return src, dst, size


def use(d: Path, size_gib: float) -> None:
    X, mapped, targets, _ = _x(d, size_gib)
    rows, b = X.shape[0], BLOCK // (4 * K)
    fd = os.open(d / "X.gpa", os.O_RDONLY)
    fmap = _file_map.FileMap(fd, os.fstat(fd).st_size)
    w, y = WORKLOADS["lsq"], targets["y"]
    params = jax.device_put(w.init(K))

    @jax.jit
    def share(p, xb, tb):
        return jax.value_and_grad(lambda p: jnp.sum(w.row_loss(jnp, p, xb, tb)) / rows)(p)

    maps = {
        "memmap": lambda i: mapped[i * b : (i + 1) * b],
        "FileMap": lambda i: fmap.view(HEADER + i * BLOCK, (b, K), np.float32),
    }
    for depth in (0, 5):
        for name, get in maps.items():
            for how in ("sent", "run", "run+y"):
                drops, queue = [], []
                start = time.perf_counter()
                for i in range(rows // b):
                    block = get(i)
                    if how == "sent":
                        out = jax.device_put(block)
                    elif how == "run":
                        out = share(params, jax.device_put(block), jnp.zeros(b, np.float32))
                    else:
                        out = share(params, *jax.device_put((block, y[i * b : (i + 1) * b])))
                    queue.append((block, out))
                    while len(queue) > depth:
                        b0, o0 = queue.pop(0)
                        jax.block_until_ready(o0)
                        drops.append(_drop(b0))
                for b0, o0 in queue:
                    jax.block_until_ready(o0)
                    drops.append(_drop(b0))
                each = (time.perf_counter() - start) / (rows // b) * 1e3
                ms = statistics.median(drops) * 1e3
                print(f"{name:8} {how:6} {depth} queued: drop {ms:5.2f} ms, {each:6.2f} ms a block")
    os.close(fd)


def files(d: Path, size_gib: float) -> None:
    size, chunk = int(size_gib * 2**30), 32 * 2**20
    data = np.random.default_rng(0).standard_normal(chunk // 4, np.float32).tobytes()
    cases = [("written", 0, False), ("posix_fallocate", 0, False)]
    cases += [("posix_fallocate", HEADER, False), ("posix_fallocate", HEADER, True)]
    cases += [("ftruncate", HEADER, False)]
    for how, shift, twice in cases:
        path = d / "made.bin"
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC)
        if how == "posix_fallocate":
            os.posix_fallocate(fd, 0, size)
        elif how == "ftruncate":
            os.ftruncate(fd, size)
        for off in range(0, size, chunk):
            os.pwrite(fd, data, off)
        fmap = _file_map.FileMap(fd, size)
        other = np.memmap(path, np.float32, "r") if twice else None
        if other is not None:
            float(other[:1024].sum())
        ms = _drops_after_sends(fmap, size, shift) * 1e3
        print(f"{how:16} {shift:5} bytes in, mapped twice: {twice!s:5}  drop {ms:5.2f} ms")
        del fmap, other
        os.close(fd)


def sync(d: Path, size_gib: float) -> None:
    size, chunk = int(size_gib * 2**30), 32 * 2**20
    data = np.random.default_rng(0).standard_normal(chunk // 4, np.float32).tobytes()
    for synced, renamed in ((False, False), (True, False), (False, True), (True, True)):
        path, final = d / "made.part", d / "made.bin"
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC)
        os.posix_fallocate(fd, 0, size)
        start = time.perf_counter()
        for off in range(0, size, chunk):
            os.pwrite(fd, data, off)
        wrote = time.perf_counter() - start
        start = time.perf_counter()
        if synced:
            os.fsync(fd)
        if renamed:
            os.replace(path, final)
        took = time.perf_counter() - start
        ms = _drops_after_sends(_file_map.FileMap(fd, size), size, HEADER) * 1e3
        print(
            f"fsync {synced!s:5} renamed {renamed!s:5}  drop {ms:5.2f} ms "
            f"(written in {wrote:.1f} s, fsync/rename {took:.1f} s)",
            flush=True,
        )
        os.close(fd)
        for q in (path, final):
            q.unlink(missing_ok=True)


def writes(d: Path, size_gib: float) -> None:
    size, chunk = int(size_gib * 2**30), 32 * 2**20
    rows = chunk // (4 * K)
    base = np.random.default_rng(0).standard_normal((rows, K), np.float32)
    teacher = np.random.default_rng(1).standard_normal((K, 16), np.float32)

    reused = np.empty_like(base)

    def page(i: int, temporaries: bool, into: np.ndarray | None = None) -> np.ndarray:
        if into is not None:  # (no new array a page: one buffer filled again)
            np.add(np.roll(base, i % 7919, axis=1), np.float32(i % 13 / 13), out=into)
            return into
        block = np.roll(base, i % 7919, axis=1) + np.float32(i % 13 / 13)
        if temporaries:  # (as `ooc_device._inputs` makes each page's targets)
            block @ teacher[:, 0], np.argmax(block @ teacher, axis=1)
        return block

    def written(how: str) -> int:
        path = d / "made.bin"
        if how == "gradpipe":
            ooc.DiskArray.from_row_blocks(
                (size // (4 * K), K),
                np.float32,
                lambda a, b: page(a // rows, True)[: b - a],
                path=path,
                page_shape=(rows, K),
            )
            return os.open(path, os.O_RDONLY)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC)
        os.posix_fallocate(fd, 0, size + HEADER)
        for i, off in enumerate(range(HEADER, size + HEADER - chunk + 1, chunk)):
            block = page(i, how.endswith("temporaries"), reused if "reused" in how else None)
            if how.startswith("pwritev 1024"):  # (as gradpipe wrote a page of rows before)
                for r in range(0, rows, 1024):
                    os.pwritev(fd, list(block[r : r + 1024]), off + r * 4 * K)
            elif how.startswith("pwritev"):
                os.pwritev(fd, [block], off)
            else:
                os.pwrite(fd, block, off)
        return fd

    after = sys.argv[sys.argv.index("--writes") + 1 :]
    picked = after[: next((i for i, a in enumerate(after) if a.startswith("--")), len(after))]
    hows = picked or [
        "pwrite",
        "pwritev 1",
        "pwritev 1024",
        "pwrite, temporaries",
        "pwritev 1, temporaries",
        "gradpipe",
        "pwrite from a reused buffer",
        "pwrite",
    ]
    for how in hows:
        start = time.perf_counter()
        fd = written(how)
        took = time.perf_counter() - start
        ms = _drops_after_sends(_file_map.FileMap(fd, size + HEADER), size, HEADER) * 1e3
        print(f"{how:24} drop {ms:5.2f} ms a 64 MiB block (written in {took:.1f} s)", flush=True)
        os.close(fd)
        (d / "made.bin").unlink()


def copy(d: Path, size_gib: float) -> None:
    _x(d, size_gib)
    src, dst, size = _copy_of(d)
    for name, fd in (("gradpipe's X", src), ("its copy", dst), ("gradpipe's X again", src)):
        ms = _drops_after_sends(_file_map.FileMap(fd, size), size, HEADER) * 1e3
        print(f"{name:20} drop {ms:5.2f} ms a 64 MiB block", flush=True)


def steps(d: Path, size_gib: float) -> None:
    X, _, _, disk = _x(d, size_gib)
    _copy_of(d)
    C = ooc.DiskArray.open(d / "copy.gpa")
    for name, w in WORKLOADS.items():
        params = jax.device_put(w.init(K))
        for label, A in (("gradpipe's X", X), ("its copy", C), ("gradpipe's X again", X)):
            t = disk[w.target]
            fn = jax.value_and_grad(lambda p, A=A, w=w, t=t: ooc.mean(w.row_loss(ooc, p, A, t)))
            times = []
            for _ in range(4):
                start = time.perf_counter()
                with ooc.MemoryBudget(BUDGET):
                    jax.block_until_ready(fn(params))
                times.append(time.perf_counter() - start)
            ms = statistics.median(times[1:]) * 1e3
            print(f"{name} {label:20} {ms:7.1f} ms a step", flush=True)


def main() -> None:
    size = float(sys.argv[1]) if len(sys.argv) > 1 else 2.0
    modes = {
        "--use": use,
        "--files": files,
        "--copy": copy,
        "--sync": sync,
        "--writes": writes,
        "--steps": steps,
    }
    print(jax.devices(), flush=True)
    d = Path(tempfile.mkdtemp(prefix="gradpipe-drops-"))
    ooc.set_scratch_dir(d / "scratch")
    try:
        for flag, run in modes.items():
            if flag in sys.argv:
                run(d, size)
    finally:
        ooc.set_scratch_dir(None)
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
