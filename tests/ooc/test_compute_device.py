"""Where a loss's pass computes: the host, or a device (`MemoryBudget(device=...)`).

Tiles are read on the host; on a device each piece is sent there, its program
compiled for that device in the types jax.numpy uses there, and only the loss's
share and the gradients come back. Here the device is JAX's CPU (`make test-device`
runs these on the accelerator: GRADPIPE_TEST_DEVICE=tpu). A program the device
cannot run (64-bit types on a TPU) is refused in gradpipe's words where the budget
names the device, and computed on the host where it was only JAX's default.
"""

from __future__ import annotations

import os
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gradpipe import ooc
from gradpipe.ooc.execution import _compute_device, _device_sums, _one_pass, _tile_program
from gradpipe.ooc.planning import _chain_read, _resident
from gradpipe.ooc.storage._file_map import is_view
from gradpipe.ooc.storage._paged_file import PagedFile

TEST_DEVICE = os.environ.get("GRADPIPE_TEST_DEVICE", "cpu")
N, K, H, C = 2000, 16, 8, 4
BUDGET = 64 * 2**10


def _tolerance(rtol):
    # on a TPU, exp, log and tanh keep four or five digits (`make test-device` asks
    # for 'highest' matrix products, which keep about seven)
    return (5e-3, 5e-4) if jax.default_backend() == "tpu" else (rtol, rtol / 10)


def _close(got, want, rtol=1e-5):
    rtol, atol = _tolerance(rtol)
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        assert (jnp.shape(g), jnp.asarray(g).dtype) == (jnp.shape(w), jnp.asarray(w).dtype)
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=rtol, atol=atol)


def _data(seed=0, dtype=np.float32):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((N, K)).astype(dtype)
    labels = rng.integers(0, C, N)
    return X, (X[:, :3].sum(axis=1) > 0).astype(dtype), np.eye(C, dtype=bool)[labels]


def _least_squares(xp, X, y):
    return lambda p: xp.mean(xp.square(X @ p["w"] + p["b"] - y))


def _mlp(xp, X, hot):
    def loss(p):
        z = xp.tanh(X @ p["W1"] + p["b1"]) @ p["W2"] + p["b2"]
        m = jax.lax.stop_gradient(xp.max(z, axis=1, keepdims=True))
        lse = xp.log(xp.sum(xp.exp(z - m), axis=1)) + m[:, 0]
        return xp.mean(lse - xp.sum(xp.where(hot, z, 0.0), axis=1))

    return loss


def _params(dtype=jnp.float32):
    rng = np.random.default_rng(1)
    return {
        "w": jnp.asarray(rng.standard_normal(K), dtype),
        "b": jnp.asarray(0.1, dtype),
        "W1": jnp.asarray(rng.standard_normal((K, H)) / 4, dtype),
        "b1": jnp.zeros(H, dtype),
        "W2": jnp.asarray(rng.standard_normal((H, C)) / 3, dtype),
        "b2": jnp.zeros(C, dtype),
    }


def step_of(name, seed):
    """A training step's loss (``build(xp, X, second)``), its data and its
    parameters, each at least 1-d (a 0-d one is a number to JAX's callers)."""
    A, y, hot = _data(seed)
    build = _least_squares if name == "least squares" else _mlp
    second = y if name == "least squares" else hot
    params = {k: v for k, v in _params().items() if v.ndim}
    if name == "least squares":
        params["b"] = jnp.full((1,), 0.1, jnp.float32)
    return build, A, second, params


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
@pytest.mark.parametrize("name", ["least squares", "mlp"])
def test_a_training_step_computes_on_the_device_as_jax_numpy_does_there(name, jit):
    A, y, hot = _data()
    build = _least_squares if name == "least squares" else _mlp
    second = y if name == "least squares" else hot
    want = jax.value_and_grad(build(jnp, jnp.asarray(A), jnp.asarray(second)))(_params())
    with ooc.MemoryBudget(BUDGET, device=TEST_DEVICE):
        X, Y = ooc.DiskArray.from_numpy(A), ooc.DiskArray.from_numpy(second)
        fn = jax.value_and_grad(build(ooc, X, Y))
        plan = ooc.explain(jax.jit(fn) if jit else fn, _params())
    _close(plan.result, want)
    (stage,) = plan.stages
    assert stage.phase == "value and gradient" and stage.tiles > 1
    assert plan.io.bytes_written == 0
    device = jax.devices(TEST_DEVICE)[0]
    if jit and device.platform != "cpu":  # (the device runs the jitted program)
        assert stage.runs_on == "host" and "under jax.jit" in str(plan)
        return
    assert stage.runs_on == str(device)
    # the data went to the device once; nothing came back: the loss and the
    # gradients stay there, added up over the tiles, where JAX takes them
    assert A.nbytes <= stage.to_device <= stage.io.bytes_read
    assert stage.from_device == 0
    assert f"computes on {stage.runs_on}" in str(plan)


@pytest.mark.parametrize("name", ["least squares", "mlp"])
def test_a_sums_tiles_are_folded_on_the_device_and_come_back_once(name, monkeypatch):
    """A sum's tiles are added up on the device, the loss too: nothing comes back
    (the gradients and the loss stay there), and the loss and gradients are those of
    tiles brought back and folded on the host (the same additions in the same
    order)."""
    A, y, hot = _data(4)
    build = _least_squares if name == "least squares" else _mlp
    second = y if name == "least squares" else hot
    params = _params()
    runs = {}
    for on_device in (True, False):
        monkeypatch.setattr(_one_pass, "SUMS_ON_DEVICE", on_device)
        with ooc.MemoryBudget(BUDGET, device=TEST_DEVICE):
            X, Y = ooc.DiskArray.from_numpy(A), ooc.DiskArray.from_numpy(second)
            runs[on_device] = ooc.explain(jax.value_and_grad(build(ooc, X, Y)), params)
    folded, each = runs[True], runs[False]
    (loss, grads), (host_loss, host_grads) = folded.result, each.result
    for g, w in zip(jax.tree.leaves(grads), jax.tree.leaves(host_grads)):
        np.testing.assert_array_equal(np.asarray(g), np.asarray(w))
    # the loss's sum divided by its count there: a TPU's division may differ from
    # the host's in the last bit (as jax.numpy's mean there does)
    exact = jax.devices(TEST_DEVICE)[0].platform == "cpu"
    np.testing.assert_array_max_ulp(np.asarray(loss), np.asarray(host_loss), 0 if exact else 1)
    (stage,) = folded.stages
    assert stage.tiles > 2
    # each tile brought back its share and the gradient of each in-memory operand
    # it reads (the parameters', and a constant's the program differentiates too)
    per_tile, rest = divmod(each.stages[0].from_device, stage.tiles)
    share = 4  # (float32: the type jax.numpy sums float32 data in on a device)
    differentiated = {"least squares": ("w", "b"), "mlp": ("W1", "b1", "W2", "b2")}[name]
    assert rest == 0 and per_tile - share >= sum(params[k].nbytes for k in differentiated)
    # folded there: nothing comes back; the gradients stay on the device, where JAX
    # takes them, and so does the loss (its shares added there)
    assert stage.from_device == 0
    device = jax.devices(TEST_DEVICE)[0]
    _, grads = folded.result
    assert all(grads[k].devices() == {device} for k in differentiated)


@pytest.mark.parametrize("name", ["least squares", "mlp"])
def test_an_eager_steps_parameters_never_leave_the_device(name, monkeypatch):
    """The parameters go to the pass's programs as the JAX arrays they are (none is
    brought to the host to be sent back), and their gradients come back to JAX
    where the programs left them: on the device."""
    build, A, second, params = step_of(name, 7)
    want = jax.value_and_grad(build(jnp, jnp.asarray(A), jnp.asarray(second)))(params)
    brought = []
    host_values = _resident.ResidentFile.array

    def counting(f):
        if f.device_array is not None and f._array is None:
            brought.append(f.shape)
        return host_values.fget(f)

    monkeypatch.setattr(_resident.ResidentFile, "array", property(counting))
    device = jax.devices(TEST_DEVICE)[0]
    with ooc.MemoryBudget(BUDGET, device=TEST_DEVICE):
        X, Y = ooc.DiskArray.from_numpy(A), ooc.DiskArray.from_numpy(second)
        for _ in range(2):
            params = jax.device_put(params, device)
            got = jax.value_and_grad(build(ooc, X, Y))(params)
    _close(got, want)
    assert brought == []
    assert all(g.devices() == {device} for g in jax.tree.leaves(got[1]))


def test_tiles_that_read_an_operand_in_part_are_folded_on_the_host(monkeypatch):
    """An in-memory operand read over each tile's own rows (a per-row weight) gets
    each tile's gradient in its own place: such tiles come back one by one (a sum on
    the device per tile would hold the operand's size there), as before."""
    A, y, _ = _data(5)
    v = jnp.asarray(np.random.default_rng(6).uniform(0.5, 1.5, N), jnp.float32)

    def build(xp, X, y):
        return lambda p: xp.mean(p["v"] * xp.square(X @ p["w"] - y))

    params = {"v": v, "w": _params()["w"]}
    want = jax.value_and_grad(build(jnp, jnp.asarray(A), jnp.asarray(y)))(params)
    runs, folded = {}, []
    add = _device_sums.DeviceSums.add
    monkeypatch.setattr(
        _device_sums.DeviceSums, "add", lambda self, *a: folded.append(a) or add(self, *a)
    )
    for on_device in (True, False):
        monkeypatch.setattr(_one_pass, "SUMS_ON_DEVICE", on_device)
        with ooc.MemoryBudget(BUDGET, device=TEST_DEVICE):
            X, Y = ooc.DiskArray.from_numpy(A), ooc.DiskArray.from_numpy(y)
            runs[on_device] = ooc.explain(jax.value_and_grad(build(ooc, X, Y)), params)
    assert folded == []  # (none of its tiles was summed on the device)
    plan = runs[True]
    _close(plan.result, want)
    (stage,) = plan.stages
    assert stage.phase == "value and gradient" and stage.tiles > 2
    assert stage.runs_on == str(jax.devices(TEST_DEVICE)[0])
    # each tile came back (its share, its rows' gradient of v, its gradient of w)
    assert stage.from_device == stage.tiles * 4 + v.nbytes + stage.tiles * params["w"].nbytes
    assert stage.from_device == runs[False].stages[0].from_device
    for g, w in zip(jax.tree.leaves(plan.result), jax.tree.leaves(runs[False].result)):
        np.testing.assert_array_equal(np.asarray(g), np.asarray(w))


def test_pieces_in_flight_fit_the_device_budget():
    """A small ``device_nbytes`` cuts each tile into more, smaller pieces: the same
    answer, the same bytes sent."""
    A, y, _ = _data(2)
    want = jax.value_and_grad(_least_squares(jnp, jnp.asarray(A), jnp.asarray(y)))(_params())
    sent = []
    for device_nbytes in (2**14, None):
        budget = ooc.MemoryBudget(BUDGET, device=TEST_DEVICE, device_nbytes=device_nbytes)
        assert _compute_device.device_budget(budget, jax.devices(TEST_DEVICE)[0]) > 0
        with budget:
            X, Y = ooc.DiskArray.from_numpy(A), ooc.DiskArray.from_numpy(y)
            plan = ooc.explain(jax.value_and_grad(_least_squares(ooc, X, Y)), _params())
        _close(plan.result, want)
        sent.append(plan.stages[0].to_device)
    assert sent[0] == sent[1]
    assert _compute_device.device_budget(ooc.MemoryBudget(BUDGET, device_nbytes="1MiB"), None) == (
        2**20
    )


@pytest.mark.skipif(TEST_DEVICE == "tpu", reason="a TPU runs no 64-bit program")
def test_a_64_bit_step_computes_in_64_bits_on_a_device_that_runs_them():
    with jax.enable_x64(True):
        A, y, _ = _data(3, np.float64)
        p = {"w": jnp.ones(K, jnp.float64), "b": jnp.float64(0.5)}
        want = jax.value_and_grad(_least_squares(jnp, jnp.asarray(A), jnp.asarray(y)))(p)
        with ooc.MemoryBudget(BUDGET, device=TEST_DEVICE):
            X, Y = ooc.DiskArray.from_numpy(A), ooc.DiskArray.from_numpy(y)
            plan = ooc.explain(jax.value_and_grad(_least_squares(ooc, X, Y)), p)
        _close(plan.result, want, rtol=1e-12)
        assert plan.stages[0].runs_on != "host"


class _Chip:
    """A device whose programs cannot hold 64-bit types, as a TPU's."""

    platform = "tpu"

    def __str__(self):
        return "TPU_0"


def test_a_64_bit_step_is_refused_on_a_device_that_cannot_run_it():
    with jax.enable_x64(True):
        A, y, _ = _data(4, np.float64)
        p = {"w": jnp.ones(K, jnp.float64), "b": jnp.float64(0.5)}
        with ooc.MemoryBudget(BUDGET, device=_Chip()):
            X, Y = ooc.DiskArray.from_numpy(A), ooc.DiskArray.from_numpy(y)
            with pytest.raises(TypeError, match=r"float64, which TPU cannot run.*device='host'"):
                jax.value_and_grad(_least_squares(ooc, X, Y))(p)
            # nothing was lost: the data is as it was, and the host computes the step
            np.testing.assert_array_equal(X.to_numpy(force=True), A)
            with ooc.MemoryBudget(BUDGET, device="host"):
                got = jax.value_and_grad(_least_squares(ooc, X, Y))(p)
        want = jax.value_and_grad(_least_squares(jnp, jnp.asarray(A), jnp.asarray(y)))(p)
        _close(got, want, rtol=1e-12)


def test_a_64_bit_step_computes_on_the_host_where_the_device_was_only_the_default(
    monkeypatch,
):
    monkeypatch.setattr(_compute_device, "_default_accelerator", lambda: _Chip())
    with jax.enable_x64(True):
        A, y, _ = _data(5, np.float64)
        p = {"w": jnp.ones(K, jnp.float64), "b": jnp.float64(0.5)}
        with ooc.MemoryBudget(BUDGET):
            X, Y = ooc.DiskArray.from_numpy(A), ooc.DiskArray.from_numpy(y)
            plan = ooc.explain(jax.value_and_grad(_least_squares(ooc, X, Y)), p)
        want = jax.value_and_grad(_least_squares(jnp, jnp.asarray(A), jnp.asarray(y)))(p)
    _close(plan.result, want, rtol=1e-12)
    assert plan.stages[0].runs_on == "host"


def test_a_budget_names_a_device_jax_has_or_says_which_it_has():
    with pytest.raises(TypeError, match=r"a platform name such as 'tpu', or a jax\.Device"):
        ooc.MemoryBudget("1MiB", device=3)
    A, y, _ = _data(6)
    with ooc.MemoryBudget(BUDGET, device="no-such-platform"):
        X, Y = ooc.DiskArray.from_numpy(A), ooc.DiskArray.from_numpy(y)
        with pytest.raises(ValueError, match="JAX has no 'no-such-platform' device here"):
            jax.value_and_grad(_least_squares(ooc, X, Y))(_params())
    # budgets naming different devices are different budgets (a traced call's key)
    assert ooc.MemoryBudget("1MiB", device="host") != ooc.MemoryBudget("1MiB")
    assert "device='host'" in repr(ooc.MemoryBudget("1MiB", device="host"))


def test_explain_says_why_a_losss_gradient_needs_passes_of_its_own():
    A, _, _ = _data(7)
    with ooc.MemoryBudget(BUDGET):
        X = ooc.DiskArray.from_numpy(A)
        # the loss reads X flipped: X's gradient cannot be written tile by tile
        plan = ooc.explain(jax.value_and_grad(lambda X: ooc.mean(X[::-1] * X)), X)
    want = jax.value_and_grad(lambda X: jnp.mean(X[::-1] * X))(jnp.asarray(A))
    _close((plan.result[0], plan.result[1].to_numpy(force=True)), want)
    first = plan.stages[0]
    assert first.phase != "value and gradient"  # no pass was started and abandoned
    assert any("read other than tile by tile" in n for n in first.notes), plan
    assert "note: its gradient needs passes of its own" in str(plan)


def test_under_jit_a_pass_on_an_accelerator_computes_on_the_host_and_says_why():
    """Under jax.jit the pass runs in a host callback of the program the device is
    running; a TPU runs no other program meanwhile, so the pass computes on the host."""
    A, y, _ = _data(8)
    want = jax.value_and_grad(_least_squares(jnp, jnp.asarray(A), jnp.asarray(y)))(_params())
    with ooc.MemoryBudget(BUDGET, device=_Chip()):
        X, Y = ooc.DiskArray.from_numpy(A), ooc.DiskArray.from_numpy(y)
        plan = ooc.explain(jax.jit(jax.value_and_grad(_least_squares(ooc, X, Y))), _params())
    _close(plan.result, want)
    (stage,) = plan.stages
    assert stage.phase == "value and gradient" and stage.runs_on == "host"
    assert any("under jax.jit the pass runs in a host callback" in n for n in stage.notes)


def test_a_jitted_step_that_rewrites_its_data_is_read_after_it_ran(tmp_path):
    """On an accelerator a jitted call returns before its program has run: the
    DiskArray a step rewrites in place (`update_`) comes back naming its file before
    the step's callbacks have written it, and the step's intermediates must outlive
    the next call's start. Each step's weights are the ones NumPy computes, read
    right after the call, and no step finds a file released under it."""
    rng = np.random.default_rng(3)
    X_np = rng.standard_normal((N, K)).astype(np.float32)
    y_np = X_np[:, :4].sum(axis=1, keepdims=True).astype(np.float32)
    X, y = ooc.DiskArray.from_numpy(X_np), ooc.DiskArray.from_numpy(y_np)
    w = ooc.DiskArray.zeros((K, 1))

    @jax.jit
    def step(w):
        value, g = jax.value_and_grad(lambda w: ooc.mean(ooc.square(X @ w - y)))(w)
        return ooc.update_(w, w - 0.1 * g), value

    want = np.zeros((K, 1), np.float64)
    X64, y64 = X_np.astype(np.float64), y_np.astype(np.float64)
    with ooc.MemoryBudget(BUDGET):
        for _ in range(5):
            w, value = step(w)
            got = w.to_numpy()  # at once: no wait on the value first
            residual = X64 @ want - y64
            np.testing.assert_allclose(float(value), np.mean(residual**2), rtol=1e-4)
            want = want - 0.1 * (2 * X64.T @ residual / N)
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("paged", ["in rows", "in half rows"])
def test_a_devices_tiles_go_in_pieces_each_waited_for_in_turn(monkeypatch, paged):
    """A tile reading more than `DEVICE_PIECE_BYTES` goes to the device in pieces,
    each its own transfer and program, queued one after another: a piece is waited
    for only once `DEVICE_AHEAD` tiles' pieces are queued behind it, and the host
    holds at most ``DEVICE_AHEAD + 1`` tiles' blocks. Data mapped from its file (paged
    in rows): each piece's rows are released once its program ran (it reads them; a
    block under `PIECE_RELEASE_BYTES`, its target, with its tile), so at most that
    many tiles' pieces are mapped. Data read into memory (paged in
    half rows: a tile's rows are no one run of the file): a tile is read only once
    at most `DEVICE_AHEAD` older ones are held, each released once all its pieces
    ran."""
    rng = np.random.default_rng(8)
    A = rng.standard_normal((1 << 16, K)).astype(np.float32)
    y = A[:, :3].sum(axis=1)
    want = jax.value_and_grad(_least_squares(jnp, jnp.asarray(A), jnp.asarray(y)))(_params())
    made, launched, settled, of_tile, most, held = [], [], set(), {}, [0], set()
    mapped, most_mapped, most_held = set(), [0], [0]
    tile, launch = _one_pass.Tile, _one_pass.launch
    settle, release = _tile_program.Launched.settle, _chain_read.Evaluation.release
    release_views = _tile_program.Tile.release_views

    def making(*a):
        made.append(tile(*a))
        if id(made[-1].ev) not in held:  # a tile just read
            if paged == "in half rows":  # at most DEVICE_AHEAD held in memory
                assert len(held) <= _one_pass.DEVICE_AHEAD
            most_held[0] = max(most_held[0], len(held))
            held.add(id(made[-1].ev))
        return made[-1]

    def launching(*a):
        work = launch(*a)
        launched.append(work)
        of_tile.setdefault(id(made[-1].ev), []).append(work)
        most[0] = max(most[0], sum(id(w) not in settled for w in launched))
        mapped.add(id(made[-1]))
        most_mapped[0] = max(most_mapped[0], len(mapped))
        return work

    def settling(work):
        settle(work)
        settled.add(id(work))

    def releasing_views(t):
        assert id(launched[made.index(t)]) in settled  # (its program ran)
        if is_view(t.args[0]):
            mapped.discard(id(t))
        release_views(t)

    def releasing(ev):
        assert all(id(w) in settled for w in of_tile.pop(id(ev), []))
        held.discard(id(ev))
        mapped.difference_update(id(t) for t in made if t.ev is ev)
        release(ev)

    monkeypatch.setattr(_one_pass, "Tile", making)
    monkeypatch.setattr(_one_pass, "launch", launching)
    monkeypatch.setattr(_tile_program.Launched, "settle", settling)
    monkeypatch.setattr(_tile_program.Tile, "release_views", releasing_views)
    monkeypatch.setattr(_chain_read.Evaluation, "release", releasing)
    monkeypatch.setattr(_one_pass, "DEVICE_PIECE_BYTES", 96 * 2**10)
    # a piece releases its rows (about 90 KiB) itself, its target's (6 KiB) with its tile
    dropped, drop = [], _tile_program.release
    monkeypatch.setattr(_tile_program, "PIECE_RELEASE_BYTES", 16 * 2**10)
    monkeypatch.setattr(_tile_program, "release", lambda b: (dropped.append(b.nbytes), drop(b)))
    page = (4096, K) if paged == "in rows" else (4096, K // 2)
    with ooc.MemoryBudget("4MiB", device=TEST_DEVICE):
        X, Y = ooc.DiskArray.from_numpy(A, page_shape=page), ooc.DiskArray.from_numpy(y)
        plan = ooc.explain(jax.value_and_grad(_least_squares(ooc, X, Y)), _params())
    _close(plan.result, want)
    (stage,) = plan.stages
    pieces, rest = divmod(len(launched), stage.tiles)
    assert rest == 0 and pieces > 2 and of_tile == {}  # (every tile released)
    assert A.nbytes + y.nbytes <= stage.to_device <= stage.io.bytes_read
    assert most[0] == (_one_pass.DEVICE_AHEAD + 1) * pieces
    # pieces mapped: those not yet run (in rows); all of the tiles held (in half rows)
    assert most_mapped[0] == (_one_pass.DEVICE_AHEAD + 1) * pieces
    # mapped, a tile is read before the oldest of DEVICE_AHEAD + 1 has run (the link
    # kept busy across tiles)
    assert most_held[0] == _one_pass.DEVICE_AHEAD + (paged == "in rows")
    views = [is_view(t.args[0]) for t in made]
    assert all(views) if paged == "in rows" else not any(views)
    assert dropped == [t.args[0].nbytes for t in made if is_view(t.args[0])]
    # each piece read at most DEVICE_PIECE_BYTES of the data
    assert all(t.args[0].nbytes + t.args[-1].nbytes <= 96 * 2**10 for t in made)


def test_a_small_array_each_piece_reads_alike_is_read_once_a_tile(monkeypatch):
    """A mask's classes (a small ``arange`` held in memory), which every piece of a
    tile reads over the same region, are read from their file once a tile, not once
    a piece; the step's value and gradients are jax.numpy's."""
    rng = np.random.default_rng(9)
    A = rng.standard_normal((1 << 17, K)).astype(np.float32)
    labels = rng.integers(0, C, len(A)).astype(np.int32)

    def loss(xp, X, t):
        def f(p):
            z = xp.tanh(X @ p["W1"] + p["b1"]) @ p["W2"] + p["b2"]
            m = jax.lax.stop_gradient(xp.max(z, axis=1, keepdims=True))
            lse = xp.log(xp.sum(xp.exp(z - m), axis=1)) + m[:, 0]
            return xp.mean(lse - xp.sum(xp.where(t[:, None] == xp.arange(C), z, 0.0), axis=1))

        return f

    params = _params()
    want = jax.value_and_grad(loss(jnp, jnp.asarray(A), jnp.asarray(labels)))(params)
    reads, made = [], []
    read, tile = PagedFile.read, _one_pass.Tile

    def reading(f, region=None, out=None):
        if f.shape == (C,):
            reads.append(region)
        return read(f, region, out)

    def making(*a):
        made.append(tile(*a))
        return made[-1]

    monkeypatch.setattr(PagedFile, "read", reading)
    monkeypatch.setattr(_one_pass, "Tile", making)
    monkeypatch.setattr(_one_pass, "DEVICE_PIECE_BYTES", 256 * 2**10)
    with ooc.MemoryBudget("16MiB", device=TEST_DEVICE):
        X, T = ooc.DiskArray.from_numpy(A), ooc.DiskArray.from_numpy(labels)
        plan = ooc.explain(jax.value_and_grad(loss(ooc, X, T)), params)
    _close(plan.result, want)
    (stage,) = plan.stages
    assert len(made) >= 4 * stage.tiles  # (pieces of several a tile)
    assert len(reads) == stage.tiles


def test_pieces_that_read_one_stored_array_whole_each_read_its_values(monkeypatch):
    """A stored array every piece reads whole (a scale per column, on disk): each
    piece's pages are released once its program ran, pages the queued pieces share
    with it among them; each piece still reads the array's values (its pages are
    read again from the file), and the step is jax.numpy's."""
    rng = np.random.default_rng(10)
    A = rng.standard_normal((1 << 15, K)).astype(np.float32)
    y = A[:, :3].sum(axis=1)
    scale = rng.uniform(0.5, 2.0, K).astype(np.float32)

    def loss(xp, X, S, t):
        return lambda p: xp.mean(xp.square((X * S) @ p["w"] + p["b"] - t))

    want = jax.value_and_grad(loss(jnp, *map(jnp.asarray, (A, scale, y))))(_params())
    released, release_views = [], _tile_program.Tile.release_views

    def releasing_views(t):
        released.append(sum(is_view(a) for a in t.args))
        release_views(t)

    monkeypatch.setattr(_tile_program.Tile, "release_views", releasing_views)
    monkeypatch.setattr(_tile_program, "PIECE_RELEASE_BYTES", 0)
    monkeypatch.setattr(_one_pass, "DEVICE_PIECE_BYTES", 32 * 2**10)
    with ooc.MemoryBudget("4MiB", device=TEST_DEVICE):
        X, Y = ooc.DiskArray.from_numpy(A), ooc.DiskArray.from_numpy(y)
        S = ooc.DiskArray.from_numpy(scale)
        plan = ooc.explain(jax.value_and_grad(loss(ooc, X, S, Y)), _params())
    _close(plan.result, want)
    (stage,) = plan.stages
    # several pieces a tile, each releasing its views of X, y and the scale
    assert len(released) >= 4 * stage.tiles and min(released) == 3


@pytest.mark.parametrize("x64", [True, False])
def test_a_loss_added_up_in_64_bits_is_added_on_the_host_where_the_device_runs_none(
    x64, monkeypatch
):
    """``sum(..., dtype=np.float64)`` of a float32 chain on a device that runs no
    64-bit program (a TPU; here the test's device, told so): its tiles compute
    there in float32, and their shares are added up on the host in float64, not by
    a 64-bit program on the device."""
    platform = jax.devices(TEST_DEVICE)[0].platform
    monkeypatch.setattr(_compute_device, "_NO_64_BIT", frozenset({"tpu", platform}))
    totals = []
    total = _device_sums.DeviceSums.total
    monkeypatch.setattr(
        _device_sums.DeviceSums,
        "total",
        lambda s, d: (totals.append(s._acc), total(s, d))[1],
    )

    def loss(xp, X, y):
        return lambda p: xp.sum(xp.square(X @ p["w"] + p["b"] - y), dtype=np.float64)

    A, y, _ = _data(16)
    with jax.enable_x64(x64):
        with ooc.MemoryBudget(BUDGET, device=TEST_DEVICE):
            X, Y = ooc.DiskArray.from_numpy(A), ooc.DiskArray.from_numpy(y)
            value, grads = jax.value_and_grad(loss(ooc, X, Y))(_params())
        want = jax.value_and_grad(loss(jnp, jnp.asarray(A), jnp.asarray(y)))(_params())
    assert all(acc.itemsize < 8 for acc in totals)
    assert value.dtype == want[0].dtype
    _close((value, grads), want)


@pytest.mark.skipif(TEST_DEVICE == "tpu", reason="a TPU runs no 64-bit program")
def test_a_step_over_float64_data_with_x64_off_asks_jax_for_no_float64():
    """x64 off, float32 parameters, float64 data on a device: the loss's cotangent
    is taken as JAX holds it (float32), without JAX's warning that a float64 it
    cannot hold was asked for (the step's gradients as jax.numpy's)."""
    A, y, _ = _data(17, np.float64)
    with jax.enable_x64(False), warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="gradpipe.ooc: the", category=UserWarning)
        warnings.filterwarnings("error", message="Explicitly requested dtype")
        with ooc.MemoryBudget(BUDGET, device=TEST_DEVICE):
            X, Y = ooc.DiskArray.from_numpy(A), ooc.DiskArray.from_numpy(y)
            got = jax.value_and_grad(_least_squares(ooc, X, Y))(_params())
        want = jax.value_and_grad(_least_squares(jnp, jnp.asarray(A), jnp.asarray(y)))(_params())
    _close(got, want)
