"""Random programs that write between asking for results and reading them, each
judged against a NumPy model of the same program.

A program opens named files (several handles of one path, read-only ones too),
makes scratch arrays, asks for results that are computed later (fused maps, sums
that wait until read, slices, persisted copies), and writes: ``update_`` (eagerly
and under `jax.jit`), ``x[key] = value``, ``from_numpy`` and ``save`` over a path.
Between the steps it drops references and collects garbage, so that descriptor
numbers are freed and reused at different points in different programs (garbage
collection is otherwise off while a program runs: the same program frees the same
descriptors at the same steps every time, and a failure repeats).

The model is the promise of the guide. Every handle of a named file, however
opened, reads what the name holds now; an array shared with a written one (its
copy, ``update_``'s return, ``persist``'s) reads the written values; a result keeps
the values it was asked for, whatever is written after into what it reads (and so
does a gradient's pullback: it differentiates the values its forward pass saw, or
is refused where they were written after it first ran); a write
into a result changes that result alone (a slice of a whole array is that array,
as NumPy's ``x[...]`` is). Every read, by any handle and by any
later pass over it, must equal the model's.

`make test` runs a fixed few dozen (`PROGRAMS_PER_SHARD` per shard, the same on
every machine); ``GRADPIPE_PROGRAMS_PER_SHARD`` and ``GRADPIPE_FUZZ_SEED`` scale
and reseed them as for `tests/ooc/test_programs.py`. A failure prints the program
as Python to paste into a test: the named tests at the end of this file are such
programs, minimised.
"""

from __future__ import annotations

import copy
import dataclasses
import gc
import itertools
import os
import tempfile
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st

from gradpipe import ooc

SHARDS = 4
PROGRAMS_PER_SHARD = int(os.environ.get("GRADPIPE_PROGRAMS_PER_SHARD", "10"))
FUZZ_SEED = os.environ.get("GRADPIPE_FUZZ_SEED")

SHAPES = ((300, 64), (1000, 64), (37, 11), (64, 1), (5, 16))
BUDGETS = (2**20, 65536, 8192)
MAX_STEPS = 30

#: One abstract step: the op (a method of `Program`) and three numbers that pick its
#: operands and variant.
Step = tuple[Callable[..., None], int, int, int]


def data(k: int, shape: tuple[int, ...]) -> np.ndarray:
    """The ``k``-th array a program writes: standard normal float32 (the issue's ``A``)."""
    return np.random.default_rng(k).standard_normal(shape).astype(np.float32)


def _agree(got: Any, want: np.ndarray, what: str) -> None:
    got = got.to_numpy(force=True) if isinstance(got, ooc.DiskArray) else np.asarray(got)
    assert got.shape == want.shape, f"{what}: shape {got.shape}, the model has {want.shape}"
    scale = 1.0 + (float(np.abs(want).max()) if want.size else 0.0)
    # sums add in another order than NumPy's; a stale value is off by far more
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * scale, err_msg=what)


# ---------------------------------------------------------------- the model


@dataclasses.dataclass
class Cell:
    """What one array holds now, in the model; shared by every handle of it."""

    value: np.ndarray


@dataclasses.dataclass
class Value:
    """One name of the program: the gradpipe value, its model cell, and whether it
    may be written (a read-only handle or a 0-d JAX result may not)."""

    name: str
    array: Any
    cell: Cell
    writable: bool


@dataclasses.dataclass
class Pullback:
    """A ``jax.vjp`` pullback not yet run (or run): the values ``x`` and ``w`` its
    forward pass saw, the cell of its array and the cell's value it last saw."""

    name: str
    pull: Callable[..., Any]
    x: np.ndarray
    w: np.ndarray
    cell: Cell
    seen: np.ndarray
    ran: bool = False
    copied: bool = False  # its array was written before its first run: it kept a copy


class Program:
    """Runs abstract steps ``(op, a, b, c)`` on gradpipe.ooc and on the model,
    writing each step as a line of Python (`text`). Each op picks its operands
    among the live values by ``a``, ``b``, ``c`` modulo their count, so a step
    shrunk or left out by hypothesis still means something."""

    def __init__(self, shape: tuple[int, int], budget: int, folder: Path) -> None:
        self.shape, self.budget = shape, budget
        self.paths = {f"p{i}": str(folder / f"p{i}.gpa") for i in range(2)}
        self.files: dict[str, Cell] = {}
        self.values: list[Value] = []
        self.lines = [f"shape, budget = {shape}, {budget}  # data(k) = data(k, shape)"]
        self._names = itertools.count()
        self._data = itertools.count()
        self.pullbacks: list[Pullback] = []

    @property
    def text(self) -> str:
        return "\n".join(self.lines)

    # -- helpers -------------------------------------------------------------

    def _new(self, array: Any, cell: Cell, writable: bool, code: str) -> Value:
        v = Value(f"v{next(self._names)}", array, cell, writable)
        self.values.append(v)
        self.lines.append(f"{v.name} = {code}")
        return v

    def _pick(self, k: int, ok: Callable[[Value], bool] = lambda v: True) -> Value | None:
        choices = [v for v in self.values if ok(v)]
        return choices[k % len(choices)] if choices else None

    def _path(self, k: int) -> str:
        return sorted(self.paths)[k % len(self.paths)]

    def _fresh(self) -> tuple[int, np.ndarray]:
        k = next(self._data)
        return k, data(k, self.shape)

    def _check(self, got: Any, want: np.ndarray, what: str) -> None:
        _agree(got, want, f"{what} (the last line of the program)")

    # -- opening and making arrays -------------------------------------------

    def op_open(self, a: int, b: int, c: int) -> None:
        name = self._path(a)
        writable = b % 3 != 0
        x = ooc.DiskArray.open(self.paths[name], writable=writable)
        self._new(x, self.files[name], writable, f"ooc.DiskArray.open({name}, writable={writable})")

    def op_scratch(self, a: int, b: int, c: int) -> None:
        k, values = self._fresh()
        self._new(
            ooc.DiskArray.from_numpy(values),
            Cell(values),
            True,
            f"ooc.DiskArray.from_numpy(data({k}))",
        )

    def op_from_numpy_over_a_path(self, a: int, b: int, c: int) -> None:
        name = self._path(a)
        k, values = self._fresh()
        # in the budget's pages, or in pages of a few whole rows (read through the map)
        page = None if b % 2 else (max(1, self.shape[0] // 4), self.shape[1])
        x = ooc.DiskArray.from_numpy(values, path=self.paths[name], page_shape=page)
        self.files[name].value = values.copy()
        self._new(
            x,
            self.files[name],
            True,
            f"ooc.DiskArray.from_numpy(data({k}), path={name}, page_shape={page})",
        )

    def op_save_over_a_path(self, a: int, b: int, c: int) -> None:
        v = self._pick(a, lambda v: v.cell.value.shape == self.shape)
        if v is None:
            return
        name = self._path(b)
        values = v.cell.value.copy()
        x = v.array.save(self.paths[name])
        self.files[name].value = values
        self._new(x, self.files[name], True, f"{v.name}.save({name})")

    def op_copy(self, a: int, b: int, c: int) -> None:
        v = self._pick(a, lambda v: isinstance(v.array, ooc.DiskArray))
        if v is not None:
            self._new(copy.copy(v.array), v.cell, v.writable, f"copy.copy({v.name})")

    # -- asking for results (computed when read, or waiting to be read) -------

    def op_map(self, a: int, b: int, c: int) -> None:
        v = self._pick(a, lambda v: isinstance(v.array, ooc.DiskArray))
        if v is None:
            return
        maps = [
            ("{} * 2.0", lambda x: x * 2.0),
            ("{} + 1.0", lambda x: x + 1.0),
            ("-{}", lambda x: -x),
            ("ooc.abs({})", abs),
            ("ooc.tanh({}) - 0.5", None),
        ]
        code, fn = maps[b % len(maps)]
        if fn is None:
            got, want = ooc.tanh(v.array) - 0.5, np.tanh(v.cell.value) - np.float32(0.5)
        else:
            got, want = fn(v.array), fn(v.cell.value)
        self._new(got, Cell(np.asarray(want, np.float32)), True, code.format(v.name))

    def op_binary(self, a: int, b: int, c: int) -> None:
        v = self._pick(a, lambda v: isinstance(v.array, ooc.DiskArray))
        if v is None:
            return
        shape = v.cell.value.shape
        w = self._pick(
            b,
            lambda w: (
                isinstance(w.array, ooc.DiskArray) and w.cell.value.shape in (shape, shape[-1:])
            ),
        )
        if w is None:
            return
        if c % 2:
            got, want, code = v.array + w.array, v.cell.value + w.cell.value, "{} + {}"
        else:
            got, want, code = v.array * w.array, v.cell.value * w.cell.value, "{} * {}"
        self._new(got, Cell(want), True, code.format(v.name, w.name))

    def op_sum(self, a: int, b: int, c: int) -> None:
        v = self._pick(a, lambda v: isinstance(v.array, ooc.DiskArray))
        if v is None:
            return
        x, m = v.array, v.cell.value
        how = b % 4
        if how == 0 or m.ndim == 1:
            got, want, code = ooc.sum(x, axis=0), m.sum(0), f"ooc.sum({v.name}, axis=0)"
        elif how == 1:
            got, want, code = ooc.mean(x, axis=-1), m.mean(-1), f"ooc.mean({v.name}, axis=-1)"
        elif how == 2:
            got, want, code = (
                ooc.sum(x * x, axis=0),
                (m * m).sum(0),
                f"ooc.sum({v.name} * {v.name}, axis=0)",
            )
        else:  # 0-d: a JAX value, computed now
            got, want, code = ooc.sum(x), m.sum(), f"ooc.sum({v.name})"
        writable = isinstance(got, ooc.DiskArray)
        self._new(got, Cell(np.asarray(want, np.float32)), writable, code)

    def op_slice(self, a: int, b: int, c: int) -> None:
        v = self._pick(a, lambda v: isinstance(v.array, ooc.DiskArray))
        if v is None:
            return
        n = v.cell.value.shape[0]
        lo = b % n
        hi = lo + 1 + c % (n - lo)
        if hi - lo == n:  # the whole array: x itself (a view, as NumPy's x[...] is)
            self._new(v.array[lo:hi], v.cell, v.writable, f"{v.name}[{lo}:{hi}]")
            return
        self._new(v.array[lo:hi], Cell(v.cell.value[lo:hi].copy()), True, f"{v.name}[{lo}:{hi}]")

    def op_persist(self, a: int, b: int, c: int) -> None:
        v = self._pick(a, lambda v: isinstance(v.array, ooc.DiskArray))
        if v is not None:
            self._new(ooc.persist(v.array), v.cell, v.writable, f"ooc.persist({v.name})")

    # -- writing ---------------------------------------------------------------

    def _writable(self, k: int) -> Value | None:
        return self._pick(k, lambda v: v.writable and isinstance(v.array, ooc.DiskArray))

    def _update_value(self, t: Value, b: int, c: int) -> tuple[Any, np.ndarray, str]:
        m = t.cell.value
        how = b % 4
        if how == 1:
            return t.array + 1.0, m + np.float32(1.0), f"{t.name} + 1.0"
        if how == 2:
            w = self._pick(
                c, lambda w: isinstance(w.array, ooc.DiskArray) and w.cell.value.shape == m.shape
            )
            if w is not None:
                return w.array, w.cell.value.copy(), w.name
        if how == 3:
            return t.array * 2.0, m * np.float32(2.0), f"{t.name} * 2.0"
        fill = float(c % 7) - 3.0
        return fill, np.full(m.shape, fill, np.float32), repr(fill)

    def op_update(self, a: int, b: int, c: int) -> None:
        t = self._writable(a)
        if t is None:
            return
        value, want, code = self._update_value(t, b, c)
        out = ooc.update_(t.array, value)
        t.cell.value = want
        if c % 2:  # keep what update_ returns: it shares the file
            self._new(out, t.cell, True, f"ooc.update_({t.name}, {code})")
        else:
            self.lines.append(f"ooc.update_({t.name}, {code})")

    def op_update_under_jit(self, a: int, b: int, c: int) -> None:
        t = self._writable(a)
        if t is None:
            return
        value, want, code = self._update_value(t, b, c)
        if not isinstance(value, ooc.DiskArray):
            value, code = np.float32(value), f"np.float32({code})"
        jax.jit(ooc.update_)(t.array, value)
        t.cell.value = want
        self.lines.append(f"jax.jit(ooc.update_)({t.name}, {code})")

    def op_set_item(self, a: int, b: int, c: int) -> None:
        t = self._writable(a)
        if t is None:
            return
        m = t.cell.value
        key, key_code = _key(m.shape, b)
        selected = m[key].shape
        how = c % 4
        if how == 0 or not selected:
            value, want, code = (
                float(c % 5) - 2.0,
                np.float32(c % 5 - 2.0),
                repr(float(c % 5) - 2.0),
            )
        elif how == 1:
            k, _ = self._fresh()
            value = want = data(k, selected)
            code = f"data({k}, {selected})"
        else:  # a DiskArray of the selection's shape, or of its last axis (broadcast)
            w = self._pick(
                c // 4,
                lambda w: (
                    isinstance(w.array, ooc.DiskArray)
                    and w.cell.value.shape in (selected, selected[-1:])
                ),
            )
            if w is None:
                return
            value, want, code = w.array, w.cell.value.copy(), w.name
        t.array[key] = value
        t.cell.value = m.copy()
        t.cell.value[key] = want
        self.lines.append(f"{t.name}[{key_code}] = {code}")

    # -- gradients whose backward pass runs later -------------------------------

    def op_vjp(self, a: int, b: int, c: int) -> None:
        """``jax.vjp`` of ``tanh(x @ w)``: its pullback reads ``x`` as it is now,
        whatever is written into ``x`` before the pullback runs (`op_pullback`)."""
        v = self._pick(a, lambda v: isinstance(v.array, ooc.DiskArray) and v.cell.value.ndim == 2)
        if v is None:
            return
        k, w = self._fresh_vector(v.cell.value.shape[1])
        _, pull = jax.vjp(lambda w: ooc.tanh(v.array @ w), jnp.asarray(w))
        name = f"pull{len(self.pullbacks)}"
        self.pullbacks.append(Pullback(name, pull, v.cell.value.copy(), w, v.cell, v.cell.value))
        self.lines.append(f"_, {name} = jax.vjp(lambda w: ooc.tanh({v.name} @ w), data({k}))")

    def op_pullback(self, a: int, b: int, c: int) -> None:
        """A pullback run: the gradient of the values its forward pass saw; refused
        where its array was written in place after an earlier run."""
        if not self.pullbacks:
            return
        p = self.pullbacks[a % len(self.pullbacks)]
        k, ct = self._fresh_vector(p.x.shape[0])
        self.lines.append(f"{p.name}(ooc.DiskArray.from_numpy(data({k})))")
        written = p.cell.value is not p.seen
        if p.ran and written and not p.copied:  # written after its first run: refused
            try:
                p.pull(ooc.DiskArray.from_numpy(ct))
            except RuntimeError as e:
                assert "written in place after the pass ran once" in str(e), str(e)
                return
            raise AssertionError(f"{p.name} ran again after its array was written")
        x, w = p.x.astype(np.float64), p.w.astype(np.float64)
        want = x.T @ ((1 - np.tanh(x @ w) ** 2) * ct)
        (got,) = p.pull(ooc.DiskArray.from_numpy(ct))
        self._check(got, want.astype(np.float32), f"{p.name}(...)")
        if not p.ran:  # written before: it kept a copy for good; else it let go
            p.ran, p.copied, p.seen = True, written, p.cell.value

    def _fresh_vector(self, n: int) -> tuple[int, np.ndarray]:
        k = next(self._data)
        return k, data(k, (n,))

    # -- reading, dropping, collecting -----------------------------------------

    def op_read(self, a: int, b: int, c: int) -> None:
        v = self._pick(a)
        if v is not None:
            self.lines.append(f"{v.name}.to_numpy()")
            self._check(v.array, v.cell.value, v.name)

    def op_read_by_a_pass(self, a: int, b: int, c: int) -> None:
        v = self._pick(a, lambda v: isinstance(v.array, ooc.DiskArray))
        if v is not None:
            self.lines.append(f"ooc.sum({v.name}, axis=0)  # read now")
            got = ooc.sum(v.array, axis=0)
            self._check(got, v.cell.value.sum(0), f"ooc.sum({v.name}, axis=0)")

    def op_read_the_path(self, a: int, b: int, c: int) -> None:
        name = self._path(a)
        self.lines.append(f"ooc.DiskArray.open({name}).to_numpy()")
        self._check(ooc.DiskArray.open(self.paths[name]), self.files[name].value, name)

    def op_drop(self, a: int, b: int, c: int) -> None:
        v = self._pick(a)
        if v is not None:
            self.values.remove(v)
            self.lines.append(f"del {v.name}")

    def op_collect(self, a: int, b: int, c: int) -> None:
        gc.collect()
        self.lines.append("gc.collect()")

    # -- a whole program ---------------------------------------------------------

    def start(self) -> None:
        for name, path in self.paths.items():
            k, values = self._fresh()
            ooc.DiskArray.from_numpy(values, path=path)
            self.files[name] = Cell(values)
            self.lines.append(f"ooc.DiskArray.from_numpy(data({k}), path={name})")
        self.op_open(0, 1, 0)

    def finish(self) -> None:
        """Every live value and every path read once more."""
        self.lines.append("# then every value and path is read")
        for v in self.values:
            self._check(v.array, v.cell.value, f"{v.name} at the end")
        for name in self.paths:
            self._check(ooc.DiskArray.open(self.paths[name]), self.files[name].value, name)


def _key(shape: tuple[int, ...], k: int) -> tuple[tuple[Any, ...], str]:
    """A basic index into an array of ``shape`` and how it reads."""
    n = shape[0]
    lo = k % n
    hi = lo + 1 + (k // n) % (n - lo)
    keys = [
        ((Ellipsis,), "..."),
        ((slice(lo, hi),), f"{lo}:{hi}"),
        ((slice(lo, hi, 2),), f"{lo}:{hi}:2"),
        ((slice(hi - 1, None, -3),), f"{hi - 1}::-3"),
        ((lo,), f"{lo}"),
    ]
    if len(shape) == 2:
        j = k % shape[1]
        keys.append(((slice(lo, hi), slice(j, None)), f"{lo}:{hi}, {j}:"))
        keys.append(((Ellipsis, j), f"..., {j}"))
    return keys[(k // 7) % len(keys)]


OPS = {
    Program.op_open: 2,
    Program.op_scratch: 1,
    Program.op_from_numpy_over_a_path: 1,
    Program.op_save_over_a_path: 1,
    Program.op_copy: 1,
    Program.op_map: 3,
    Program.op_binary: 2,
    Program.op_sum: 4,
    Program.op_slice: 1,
    Program.op_persist: 1,
    Program.op_update: 5,
    Program.op_update_under_jit: 1,
    Program.op_set_item: 3,
    Program.op_vjp: 3,
    Program.op_pullback: 3,
    Program.op_read: 3,
    Program.op_read_by_a_pass: 2,
    Program.op_read_the_path: 1,
    Program.op_drop: 3,
    Program.op_collect: 2,
}
_POOL = [op for op, w in OPS.items() for _ in range(w)]


def run_program(shape: tuple[int, int], budget: int, steps: Sequence[Step]) -> None:
    """Run ``steps`` on gradpipe.ooc and on the model; an `AssertionError` with the
    program as Python where they differ (or gradpipe.ooc raises)."""
    failure = _failure(shape, budget, steps)
    if failure is not None:
        raise AssertionError(failure[1])


def _failure(shape: tuple[int, int], budget: int, steps: Sequence[Step]) -> tuple[str, str] | None:
    """None, or the kind of error ``steps`` end in and a report of it with the program."""
    with tempfile.TemporaryDirectory(prefix="gradpipe-write-programs-") as folder:
        program = Program(shape, budget, Path(folder))
        collecting = gc.isenabled()
        gc.disable()  # collections happen where the program says, so a failure repeats
        failure = None
        try:
            with ooc.MemoryBudget(budget):
                program.start()
                for op, a, b, c in steps:
                    op(program, a, b, c)
                program.finish()
        except Exception as e:  # reported as text: no frame keeps the program's arrays
            where = "" if isinstance(e, AssertionError) else traceback.format_exc(limit=-3)
            failure = type(e).__name__, f"{type(e).__name__}: {e}\n{where}\nthe program:\n"
        finally:
            program.values.clear()
            program.pullbacks.clear()
            if collecting:
                gc.enable()
            gc.collect()
    return None if failure is None else (failure[0], failure[1] + program.text)


def minimise(
    shape: tuple[int, int], budget: int, steps: Sequence[Step], seconds: float = 20.0
) -> list[Step]:
    """``steps`` with every step left out whose absence keeps the failure (the same
    kind of error), last first, for at most ``seconds``: a program to read."""
    failure = _failure(shape, budget, steps)
    assert failure is not None
    steps, deadline = list(steps), time.monotonic() + seconds
    shorter = True
    while shorter and time.monotonic() < deadline:
        shorter = False
        for i in reversed(range(len(steps))):
            if time.monotonic() > deadline:
                break
            trial = steps[:i] + steps[i + 1 :]
            again = _failure(shape, budget, trial)
            if again is not None and again[0] == failure[0]:
                steps, shorter = trial, True
    return steps


@st.composite
def programs(draw):
    shape = draw(st.sampled_from(SHAPES))
    budget = draw(st.sampled_from(BUDGETS))
    byte = st.integers(0, 255)
    steps = draw(st.lists(st.tuples(st.sampled_from(_POOL), byte, byte, byte), max_size=MAX_STEPS))
    return shape, budget, steps


@pytest.mark.parametrize("shard", range(SHARDS))
def test_random_programs_that_write_agree_with_numpy(shard):
    base = int(FUZZ_SEED) if FUZZ_SEED is not None else 0

    @seed(base * SHARDS + shard + 1000)
    @settings(
        max_examples=PROGRAMS_PER_SHARD,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
        phases=[Phase.explicit, Phase.reuse, Phase.generate],
    )
    @given(programs())
    def run(program):
        shape, budget, steps = program
        try:
            run_program(shape, budget, steps)
        except AssertionError:
            # hypothesis's own shrinking takes minutes on programs this slow
            run_program(shape, budget, minimise(shape, budget, steps))
            raise

    run()


# ---------------------------------------------------------------- found by the programs above


def test_a_handle_reads_from_numpy_over_its_path_in_other_pages(tmp_path):
    # the handles of a path follow a file renamed over it, but refused one written in
    # other pages (the budget's, not the first file's): "was replaced in this process
    # by an array of shape (300, 64) and dtype float32; this handle had shape
    # (300, 64) and dtype float32"
    A, B = data(0, (300, 64)), data(1, (300, 64))
    path = tmp_path / "p0.gpa"
    with ooc.MemoryBudget(2**20):
        ooc.DiskArray.from_numpy(A, path=path, page_shape=(75, 64))
        x = ooc.DiskArray.open(path, writable=True)
        ooc.DiskArray.from_numpy(B, path=path)
        np.testing.assert_array_equal(x.to_numpy(), B)
        ooc.update_(x, x + 1.0)
        np.testing.assert_array_equal(ooc.DiskArray.open(path).to_numpy(), B + np.float32(1))


def test_update_through_an_older_handle_after_from_numpy_over_its_path(tmp_path):
    # a handle opened before from_numpy(..., path=) kept reading the file it had
    # opened, and ``update_(v0, v0)`` wrote those old values back over the new ones
    p0 = tmp_path / "p0.gpa"
    with ooc.MemoryBudget(65536):
        ooc.DiskArray.from_numpy(data(0, (37, 11)), path=p0)
        v0 = ooc.DiskArray.open(p0, writable=True)
        gc.collect()
        v1 = ooc.DiskArray.from_numpy(data(2, (37, 11)), path=p0)
        ooc.update_(v0, v0)
        np.testing.assert_array_equal(v1.to_numpy(), data(2, (37, 11)))
        np.testing.assert_array_equal(v0.to_numpy(), data(2, (37, 11)))


@pytest.mark.parametrize("first", ["read", "view", "write"])
def test_a_handle_first_touched_after_its_path_was_rewritten_in_other_pages(tmp_path, first):
    # found by a pullback: the handle computed the file's offsets in the old file's
    # pages, then followed its name to the new file ("short read: the file is
    # truncated", or values from the wrong places where the sizes agreed)
    A, B = data(0, (1000, 64)), data(1, (1000, 64))
    path = tmp_path / "p0.gpa"
    with ooc.MemoryBudget(8192):
        ooc.DiskArray.from_numpy(A, path=path, page_shape=(100, 32))
        x = ooc.DiskArray.open(path, writable=True)
        ooc.DiskArray.from_numpy(B, path=path, page_shape=(250, 64))
        f = x._file
        if first == "read":
            np.testing.assert_array_equal(f.read((slice(0, 300), slice(0, 64))), B[:300])
        elif first == "view":
            np.testing.assert_array_equal(f.view((slice(0, 250), slice(0, 64))), B[:250])
        else:
            f.write((slice(10, 20), slice(0, 64)), np.zeros((10, 64), np.float32))
            B = B.copy()
            B[10:20] = 0
        np.testing.assert_array_equal(x.to_numpy(force=True), B)
