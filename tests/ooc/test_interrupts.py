"""Ctrl-C at any step of a write or a pass: the handles and the file agree, all old
or all new, and the next write starts from what they hold.

Python delivers Ctrl-C to the main thread as a `KeyboardInterrupt` between two
lines. `interrupted` raises one at the k-th line gradpipe.ooc runs during an
operation (its own lines and those of every function it calls: storage, the
driver, the tile loop, the rename), for k = 1, 2, ... until the operation ends
before the k-th line. Then it checks what a user relies on after Ctrl-C:

- a named file holds its old values or its new ones, never a mix;
- every handle of it (the one written, a second one opened on the path) reads what
  the file holds, by `to_numpy` and by a pass (which reads through the file map);
- results asked for before the write keep the values they were asked for;
- ``update_(x, x + 1)`` afterwards writes one plus what the file held;
- no temporary file is left next to it, and no scratch file once collected.

`make test` interrupts at the first run of each line of the modules where the
operation changes state (`FOCUS`: storage and the writes for a write; the driver,
chains and waiting results for a pass), for the `EVERY_DAY` operations. With
``GRADPIPE_INTERRUPT_EVERYWHERE=1`` (or ``GRADPIPE_PROGRAMS_PER_SHARD`` above 100,
as `make fuzz` sets) every operation is interrupted at every line of gradpipe.ooc;
``GRADPIPE_INTERRUPT_VISITS`` interrupts at the first that many runs of each line
(0: every run; loops over pages and tiles repeat the same states).
"""

from __future__ import annotations

import collections
import copy
import dataclasses
import dis
import functools
import gc
import os
import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import gradpipe.ooc
from gradpipe import ooc

ROOT = os.path.dirname(gradpipe.ooc.__file__) + os.sep
VISITS = int(os.environ.get("GRADPIPE_INTERRUPT_VISITS", "1"))
EVERYWHERE = os.environ.get("GRADPIPE_INTERRUPT_EVERYWHERE") == "1" or (
    int(os.environ.get("GRADPIPE_PROGRAMS_PER_SHARD", "0")) > 100
)
SHAPE = (64, 64)  # 16 KiB of float32, in pages of whole rows (read through the file
PAGE = (16, 64)  # map), a few tiles under the budget
BUDGET = 32768
MAX_STEPS = 1_000_000

#: Where a write and a pass change state (folders and modules of gradpipe.ooc); a
#: line of `PURE` (bytes moved, shapes computed) leaves no state a line before it
#: did not.
FOCUS = {
    "write": ("storage/", "ops/_update.py", "ops/_setitem.py"),
    "pass": (
        "execution/_pending.py",
        "execution/_held_results.py",
        "execution/_store.py",
        "planning/_chain.py",
        "planning/_chain_readers.py",
        "storage/_file_map.py",
        "storage/_paged_file.py",
    ),
}
PURE = (
    "storage/_pieces.py",
    "storage/_page_layout.py",
    "storage/_header.py",
    "storage/_iostats.py",
    "storage/_debris.py",
    "storage/_scratch.py",
)


def data(k: int) -> np.ndarray:
    return np.random.default_rng(k).standard_normal(SHAPE).astype(np.float32)


# ---------------------------------------------------------------- the interrupt


class _Interrupter:
    """A trace function raising `KeyboardInterrupt` at the ``at``-th line of
    gradpipe.ooc that runs (counting a line in ``focus`` only, and only its first
    ``visits`` runs when ``visits`` is not 0). Never inside a finalizer, where
    Python prints and ignores an exception (a Ctrl-C there goes to the next line)."""

    def __init__(
        self,
        at: int,
        focus: tuple[str, ...] | None,
        visits: int = VISITS,
        armed: Callable[[], bool] = lambda: True,
    ) -> None:
        self.at, self.focus, self.visits, self.armed = at, focus, visits, armed
        self.count = 0
        self.runs: collections.Counter[tuple[str, int]] = collections.Counter()
        self.where: str | None = None

    def __call__(self, frame: Any, event: str, arg: Any) -> Any:
        return self._line if frame.f_code.co_filename.startswith(ROOT) else None

    def _line(self, frame: Any, event: str, arg: Any) -> Any:
        if event != "line" or self.where is not None or not self.armed():
            return self._line
        name = frame.f_code.co_filename[len(ROOT) :].replace(os.sep, "/")
        if self.focus is not None and (not name.startswith(self.focus) or name.startswith(PURE)):
            return self._line
        if frame.f_lasti != _line_starts(frame.f_code).get(frame.f_lineno):
            # a line run again part-way, as a `with` line is when its block ends: an
            # exception there skips ``__exit__`` (a lock stays held), where Ctrl-C
            # is not delivered
            return self._line
        key = (name, frame.f_lineno)
        self.runs[key] += 1
        if self.visits and self.runs[key] > self.visits:
            return self._line
        if self.count + 1 == self.at and _finalizing(frame):
            return self._line
        self.count += 1
        if self.count == self.at:
            self.where = f"{name}:{frame.f_lineno} ({frame.f_code.co_name})"
            sys.settrace(None)
            raise KeyboardInterrupt(f"injected at {self.where}")
        return self._line


@functools.cache
def _line_starts(code: Any) -> dict[int, int]:
    """The offset of the first instruction of each line of ``code``."""
    starts: dict[int, int] = {}
    for offset, line in dis.findlinestarts(code):
        starts.setdefault(line, offset)
    return starts


def _finalizing(frame: Any) -> bool:
    while frame is not None:
        if frame.f_code.co_filename.endswith("weakref.py") or frame.f_code.co_name == "__del__":
            return True
        frame = frame.f_back
    return False


def interrupted(
    operation: Callable[[], Any],
    at: int,
    focus: tuple[str, ...] | None,
    **when: Any,
) -> str | None:
    """Run ``operation`` with a Ctrl-C at its ``at``-th line (of ``focus``; None:
    any; counted as `_Interrupter` is told by ``when``); where it was interrupted,
    or None when it ended first. An exception the interrupt turned into stops the
    operation as Ctrl-C would."""
    tracer = _Interrupter(at, focus, **when)
    before = sys.gettrace()
    sys.settrace(tracer)
    try:
        operation()
    except BaseException as e:
        if tracer.where is None:
            raise  # the operation failed on its own
        if not isinstance(e, KeyboardInterrupt):
            return f"{tracer.where}, raised as {type(e).__name__}"
    finally:
        sys.settrace(before)
    return tracer.where


def _each_interrupt(
    setup: Callable[[int], Any],
    operation: Callable[[Any], Any],
    check: Callable[[Any], Iterator[str]],
    focus: tuple[str, ...],
) -> tuple[int, dict[str, list[str]]]:
    """Interrupt ``operation(setup(k))`` at k = 1, 2, ... until it ends first; how
    many places were tried, and each problem `check` (or a scratch file left once
    collected) found, with where it was interrupted."""
    problems: dict[str, list[str]] = collections.defaultdict(list)
    scratch = ooc.get_scratch_dir()
    made: dict[str, str] = {}  # scratch file: where the interrupt was when it appeared
    for at in range(1, MAX_STEPS):
        before = set(os.listdir(scratch))
        state = setup(at)
        where = interrupted(functools.partial(operation, state), at, None if EVERYWHERE else focus)
        try:
            found = list(check(state))
        except Exception as e:  # a handle left unusable
            found = [f"{type(e).__name__} afterwards: " + re.sub(r"'[^']*\.gpa'", "<file>", str(e))]
        for p in found:
            problems[p].append(where or "not interrupted")
        del state
        made.update(dict.fromkeys(set(os.listdir(scratch)) - before, where or "not interrupted"))
        if where is None:
            break
    else:
        raise AssertionError(f"the operation still ran after {MAX_STEPS} lines")
    gc.collect()
    for name in sorted(set(os.listdir(scratch)) & set(made)):
        problems["a scratch file is left once collected"].append(made[name])
        (scratch / name).unlink()  # reported here, not by the session's check
    return at, problems


def _report(problems: dict[str, list[str]], tried: int) -> str:
    lines = [f"{len(problems)} kinds of disagreement over {tried} interrupts:"]
    for p, places in problems.items():
        lines.append(f"- {p}: {len(places)} times, at " + "; ".join(places[:4]))
    return "\n".join(lines)


def _same(got: Any, want: np.ndarray) -> bool:
    got = got.to_numpy(force=True) if isinstance(got, ooc.DiskArray) else np.asarray(got)
    return got.shape == want.shape and np.allclose(got, want, rtol=1e-5, atol=1e-4)


def _rows(old: np.ndarray, lo: int, hi: int, value: float) -> np.ndarray:
    new = old.copy()
    new[lo:hi] = value
    return new


# ---------------------------------------------------------------- named files


@dataclasses.dataclass
class Named:
    """A named file with two handles, mapped, and results asked before a write."""

    path: Path
    x: Any  # DiskArray.open(path, writable=True): the handle written
    other: Any  # DiskArray.open(path): a second handle
    asked: dict[str, tuple[Any, np.ndarray]]  # results asked before, with their values


def named(folder: Path, old: np.ndarray) -> Named:
    path = folder / "x.gpa"
    ooc.DiskArray.from_numpy(old, path=path, page_shape=PAGE)
    x = ooc.DiskArray.open(path, writable=True)
    other = ooc.DiskArray.open(path)
    ooc.sum(x, axis=0).to_numpy()  # maps the file
    asked = {
        "x * 2.0": (x * 2.0, old * np.float32(2.0)),
        "ooc.sum(other, axis=0)": (ooc.sum(other, axis=0), old.sum(0)),
    }
    return Named(path, x, other, asked)


#: name: (the write, given the set-up and the new values; the new values, from the old)
WRITES: dict[str, tuple[Callable[[Named, np.ndarray], Any], Callable[[np.ndarray], np.ndarray]]] = {
    "update_(x, x + 1.0)": (
        lambda n, new: ooc.update_(n.x, n.x + 1.0),
        lambda old: old + np.float32(1.0),
    ),
    "x[10:50] = -4.0": (
        lambda n, new: n.x.__setitem__(slice(10, 50), -4.0),
        lambda old: _rows(old, 10, 50, -4.0),
    ),
    "from_numpy(new, path=path)": (
        lambda n, new: ooc.DiskArray.from_numpy(new, path=n.path, page_shape=PAGE),
        lambda old: data(1),
    ),
    "update_(x, 2.0)": (lambda n, new: ooc.update_(n.x, 2.0), lambda old: np.full_like(old, 2.0)),
    "update_(x, other * 2.0)": (
        lambda n, new: ooc.update_(n.x, n.other * 2.0),
        lambda old: old * np.float32(2.0),
    ),
    "x[...] = 5.0": (
        lambda n, new: n.x.__setitem__(Ellipsis, 5.0),
        lambda old: np.full_like(old, 5.0),
    ),
    "scratch.save(path)": (
        lambda n, new: ooc.DiskArray.from_numpy(new, page_shape=PAGE).save(n.path),
        lambda old: data(1),
    ),
}
EVERY_DAY = ("update_(x, x + 1.0)", "x[10:50] = -4.0", "from_numpy(new, path=path)")


def _named_problems(n: Named, old: np.ndarray, new: np.ndarray) -> Iterator[str]:
    """What disagrees after an interrupted (or finished) write of ``n``."""
    held = ooc.DiskArray.open(n.path).to_numpy(force=True)
    if not (np.array_equal(held, old) or np.array_equal(held, new)):
        yield "the file is neither old nor new"
    for name, handle in (("x", n.x), ("the other handle", n.other)):
        if not _same(handle, held):
            yield f"{name} reads other values than the file"
        if not _same(ooc.sum(handle, axis=0), held.sum(0)):
            yield f"a pass over {name} reads other values than the file"
    for name, (result, want) in n.asked.items():
        if not _same(result, want):
            yield f"{name}, asked before the write, changed"
    if list(n.path.parent.glob("*.partial-*")):
        yield "a temporary file is left next to the file"
    ooc.update_(n.x, n.x + 1.0)
    if not np.array_equal(ooc.DiskArray.open(n.path).to_numpy(force=True), held + np.float32(1)):
        yield "update_(x, x + 1.0) then does not write what the file held plus one"
    if not (_same(n.x, held + 1) and _same(n.other, held + 1)):
        yield "after update_(x, x + 1.0) the handles read other values than the file"


@pytest.mark.parametrize("write", list(WRITES) if EVERYWHERE else EVERY_DAY)
def test_a_named_file_interrupted_anywhere_in_a_write_is_old_or_new_everywhere(write, tmp_path):
    operation, new_of = WRITES[write]
    old, new = data(0), new_of(data(0))

    def setup(at: int) -> Named:
        folder = tmp_path / str(at)
        folder.mkdir()
        return named(folder, old)

    with ooc.MemoryBudget(BUDGET):
        tried, problems = _each_interrupt(
            setup,
            lambda n: operation(n, new),
            lambda n: _named_problems(n, old, new),
            FOCUS["write"],
        )
    assert tried > 20  # the interrupt reached into the operation
    assert not problems, _report(problems, tried)


# ---------------------------------------------------------------- passes and scratch writes


@dataclasses.dataclass
class Scratch:
    """A scratch array, another DiskArray of its file, and results asked of it."""

    x: Any
    alias: Any  # copy.copy(x)
    values: np.ndarray
    asked: dict[str, tuple[Any, np.ndarray]]


def scratch(old: np.ndarray) -> Scratch:
    x = ooc.DiskArray.from_numpy(old, page_shape=PAGE)
    ooc.sum(x, axis=0).to_numpy()  # maps the file
    asked = {
        "ooc.sum(x, axis=0)": (ooc.sum(x, axis=0), old.sum(0)),  # joined with the next
        "ooc.sum(x * x, axis=0)": (ooc.sum(x * x, axis=0), (old * old).sum(0)),
        "x * 2.0": (x * 2.0, old * np.float32(2.0)),
    }
    return Scratch(x, copy.copy(x), old, asked)


PASSES: dict[str, Callable[[Scratch], Any]] = {
    "ooc.sum(x, axis=0).to_numpy()": lambda s: s.asked["ooc.sum(x, axis=0)"][0].to_numpy(),
    "ooc.persist(x * 2.0)": lambda s: ooc.persist(s.asked["x * 2.0"][0]),
    "update_(x, x + 1.0) of a scratch array": lambda s: ooc.update_(s.x, s.x + 1.0),
    "ooc.sum(x, axis=1).to_numpy()": lambda s: ooc.sum(s.x, axis=1).to_numpy(),
    "x[10:50] = -4.0 of a scratch array": lambda s: s.x.__setitem__(slice(10, 50), -4.0),
}
EVERY_DAY_PASSES = (
    "ooc.sum(x, axis=0).to_numpy()",
    "ooc.persist(x * 2.0)",
    "update_(x, x + 1.0) of a scratch array",
)


def _scratch_problems(s: Scratch, operation: str) -> Iterator[str]:
    """What disagrees after an interrupted pass (or in-place write) over ``s``. A
    scratch array is written in place: after Ctrl-C each row is old or new."""
    held = s.x.to_numpy(force=True)
    if "update_" in operation:
        new = s.values + np.float32(1.0)
    elif "=" in operation:
        new = _rows(s.values, 10, 50, -4.0)
    else:
        new = s.values
    if not np.all((held == s.values) | (held == new), axis=1).all():
        yield "a row of x is neither old nor new"
    if not _same(s.alias, held):
        yield "another DiskArray of x's file reads other values"
    if not _same(ooc.sum(s.x, axis=0), held.sum(0)):
        yield "a pass over x reads other values than x"
    for name, (result, want) in s.asked.items():
        if not _same(result, want):
            yield f"{name}, asked before, has other values"
    ooc.update_(s.x, s.x + 1.0)
    if not _same(s.x, held + 1):
        yield "update_(x, x + 1.0) then does not write what x held plus one"


@pytest.mark.parametrize("operation", list(PASSES) if EVERYWHERE else EVERY_DAY_PASSES)
def test_a_pass_or_a_scratch_write_interrupted_anywhere_leaves_every_reader_right(operation):
    old = data(0)
    with ooc.MemoryBudget(BUDGET):
        tried, problems = _each_interrupt(
            lambda at: scratch(old),
            PASSES[operation],
            lambda s: _scratch_problems(s, operation),
            FOCUS["pass" if operation.startswith("ooc.") else "write"],
        )
    assert tried > 20
    assert not problems, _report(problems, tried)


# ---------------------------------------------------------------- found by the tests above
#
# Each interrupts at each of the first lines gradpipe.ooc runs (every run of a line
# counted) after a system call that changes what is on disk: where a Ctrl-C most
# likely leaves a name, its handles and the files out of step.


def _after_call(
    monkeypatch: pytest.MonkeyPatch, name: str, hit: Callable[..., bool]
) -> Callable[[], bool]:
    """Whether ``os.<name>(*args)`` has returned for arguments ``hit(*args)`` names."""
    calls: list[Any] = []
    real = getattr(os, name)

    def call(*args: Any, **kwargs: Any) -> Any:
        out = real(*args, **kwargs)
        if hit(*args):
            calls.append(args)
        return out

    monkeypatch.setattr(os, name, call)
    return lambda: bool(calls)


def _after_each_of_the_first_lines(
    lines: int,
    setup: Callable[[], Any],
    operation: Callable[[Any], Any],
    arm: Callable[[pytest.MonkeyPatch, Any], Callable[[], bool]],
    check: Callable[[Any], Iterator[str]],
) -> list[str]:
    """Interrupt ``operation(setup())`` at each of the first ``lines`` lines after
    ``arm`` says; the problems ``check`` finds, each with where."""
    found = []
    for at in range(1, lines + 1):
        state = setup()
        with pytest.MonkeyPatch.context() as mp:
            armed = arm(mp, state)
            where = interrupted(
                functools.partial(operation, state), at, None, visits=0, armed=armed
            )
        if where is None:
            break  # the operation ended
        try:
            found += [f"{p} (interrupted at {where})" for p in check(state)]
        except Exception as e:
            found.append(f"{type(e).__name__} afterwards (interrupted at {where}): {e}")
        del state  # no array outlives the test in its traceback
    return found


NAMED_WRITES = ["update_(x, x + 1.0)", "x[10:50] = -4.0", "from_numpy(new, path=path)"]


@pytest.mark.parametrize("write", NAMED_WRITES)
def test_ctrl_c_just_after_the_rename_leaves_every_handle_on_the_new_file(write, tmp_path):
    # issue 31, case 3, at the granularity Python delivers Ctrl-C: after the rename,
    # the bookkeeping that sends the other handles to the new file (the name's
    # generation) ran in a `finally` that an interrupt at its first line skips, and
    # the other handles kept reading the old file
    operation, new_of = WRITES[write]
    old, new = data(0), new_of(data(0))
    folders = iter(range(10**6))

    def setup() -> Named:
        folder = tmp_path / str(next(folders))
        folder.mkdir()
        return named(folder, old)

    def arm(mp: pytest.MonkeyPatch, n: Named) -> Callable[[], bool]:
        target = os.path.realpath(n.path)
        return _after_call(mp, "replace", lambda src, dst: os.path.realpath(dst) == target)

    def check(n: Named) -> Iterator[str]:
        if not np.array_equal(ooc.DiskArray.open(n.path).to_numpy(force=True), new):
            yield "the file is not the new one"
        yield from _named_problems(n, old, new)

    with ooc.MemoryBudget(BUDGET):
        found = _after_each_of_the_first_lines(16, setup, lambda n: operation(n, new), arm, check)
    assert not found, "\n".join(found)


@pytest.mark.parametrize("write", NAMED_WRITES)
def test_ctrl_c_just_after_a_temporary_file_is_made_leaves_none_behind(write, tmp_path):
    # the shadow of a rewrite (and the .partial- file of a new named file) was
    # opened before the `try` that removes it on an error: a Ctrl-C between the two
    # left it next to the user's file for as long as the process lived
    operation, new_of = WRITES[write]
    old, new = data(0), new_of(data(0))
    folders = iter(range(10**6))

    def setup() -> Named:
        folder = tmp_path / str(next(folders))
        folder.mkdir()
        return named(folder, old)

    def arm(mp: pytest.MonkeyPatch, n: Named) -> Callable[[], bool]:
        return _after_call(
            mp, "open", lambda p, *a: ".partial-" in str(p) and Path(p).parent == n.path.parent
        )

    def check(n: Named) -> Iterator[str]:
        if list(n.path.parent.glob("*.partial-*")):
            yield "a temporary file is left next to the file"

    with ooc.MemoryBudget(BUDGET):
        found = _after_each_of_the_first_lines(8, setup, lambda n: operation(n, new), arm, check)
    assert not found, "\n".join(found)


def test_ctrl_c_just_after_a_scratch_file_is_made_leaves_none_once_collected():
    # a scratch file's descriptor and name were handed to the finalizer that removes
    # them lines after the file was opened: a Ctrl-C between left the file in the
    # scratch directory until the process exits
    scratch = ooc.get_scratch_dir()
    before = set(os.listdir(scratch))

    def arm(mp: pytest.MonkeyPatch, state: Any) -> Callable[[], bool]:
        return _after_call(mp, "open", lambda p, *a: Path(p).parent == scratch)

    def check(state: Any) -> Iterator[str]:
        gc.collect()
        left = set(os.listdir(scratch)) - before
        for name in left:
            (scratch / name).unlink()  # reported here, not by the session's check
        if left:
            yield "a scratch file is left once collected"

    with ooc.MemoryBudget(BUDGET):
        found = _after_each_of_the_first_lines(
            12, lambda: None, lambda _: ooc.DiskArray.from_numpy(data(0)), arm, check
        )
    assert not found, "\n".join(found)
