"""zarr arrays read and written in place: `ooc.open_zarr`, streaming `ooc.to_zarr`,
and tiles that follow chunks (`loop_grain`, ``plan_tiles(grain=)``)."""

import collections
import contextlib
import copy
import pickle
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numcodecs
import numpy as np
import pytest
import zarr

from gradpipe import ooc
from gradpipe.ooc.ops._layout import Transpose
from gradpipe.ooc.ops._reduce import Sum
from gradpipe.ooc.planning import _budget
from gradpipe.ooc.planning._grain import loop_grain
from gradpipe.ooc.storage._paged_file import PagedFile
from gradpipe.ooc.storage._zarr_file import ZarrFile

BUDGET = 16384  # bytes: the test arrays below are 4-8 times this
SHAPE, CHUNKS = (256, 96), (32, 40)  # chunks that do not divide the array


def make_zarr(where, data, *, chunks=CHUNKS, zarr_format=3, compressors="auto", **options):
    z = zarr.create_array(
        where,
        shape=data.shape,
        chunks=chunks,
        dtype=data.dtype,
        zarr_format=zarr_format,
        compressors=compressors,
        **options,
    )
    z[...] = data
    return z


@contextlib.contextmanager
def no_scratch_file(monkeypatch, allowed=0):
    """Fails unless at most ``allowed`` scratch files are created inside the block
    (the scratch directory holds no more files afterwards either)."""
    created = []
    original = PagedFile.create.__func__

    def spy(cls, *args, **kwargs):
        f = original(cls, *args, **kwargs)
        created.append(f)
        return f

    before = set(ooc.get_scratch_dir().iterdir())
    with monkeypatch.context() as m:
        m.setattr(PagedFile, "create", classmethod(spy))
        yield created
    assert len(created) <= allowed, f"{len(created)} scratch files written: {created}"
    grown = set(ooc.get_scratch_dir().iterdir()) - before
    assert len(grown) <= allowed, f"new files in the scratch directory: {sorted(grown)}"


class CountingStore(zarr.storage.WrapperStore):
    """A store that counts how often each key is written."""

    def __init__(self, store):
        super().__init__(store)
        self.sets = collections.Counter()

    async def set(self, key, value):
        self.sets[key] += 1
        await self._store.set(key, value)


FORMATS = [
    pytest.param(
        dict(zarr_format=2, compressors=numcodecs.Blosc(cname="zstd")),
        ">f8",
        id="v2-blosc-big-endian",
    ),
    pytest.param(
        dict(zarr_format=3, compressors=zarr.codecs.ZstdCodec(level=3)), "f4", id="v3-zstd"
    ),
    pytest.param(dict(zarr_format=3, shards=(64, 80)), "f4", id="v3-sharded"),
]


# ---------------------------------------------------------------- reading in place


@pytest.mark.parametrize("fmt, dtype", FORMATS)
@pytest.mark.parametrize("jit", [False, True])
def test_reductions_read_in_place_with_no_copy(tmp_path, rng, monkeypatch, fmt, dtype, jit):
    data = rng.standard_normal(SHAPE).astype(dtype)
    make_zarr(str(tmp_path / "x.zarr"), data, **fmt)
    x = ooc.open_zarr(tmp_path / "x.zarr")
    assert isinstance(x._file, ZarrFile) and x.dtype == np.dtype(dtype).newbyteorder("=")
    assert x._file.page_shape == CHUNKS and data.nbytes >= 4 * BUDGET
    run = jax.jit if jit else (lambda f: f)
    ooc.reset_io_stats()
    with jax.enable_x64(True), ooc.MemoryBudget(BUDGET), no_scratch_file(monkeypatch):
        total = run(lambda x: ooc.sum(x))(x)
        chained = run(lambda x: ooc.mean(ooc.tanh(x) * 2))(x)
    stats = ooc.io_stats()
    assert stats.bytes_written == 0 and stats.tiles_written == 0
    assert stats.bytes_read >= 2 * data.nbytes  # both passes read the zarr array
    tol = dict(rtol=1e-5) if dtype == "f4" else dict(rtol=1e-12)
    np.testing.assert_allclose(float(total), data.sum(dtype=np.float64), **tol)
    np.testing.assert_allclose(float(chained), np.mean(np.tanh(data) * 2), **tol)


def test_a_matmul_writes_only_its_product(tmp_path, rng, monkeypatch):
    data = rng.standard_normal(SHAPE).astype(np.float32)
    w = rng.standard_normal((SHAPE[1], 8)).astype(np.float32)
    make_zarr(str(tmp_path / "x.zarr"), data)
    x = ooc.open_zarr(str(tmp_path / "x.zarr"))
    wd = ooc.DiskArray.from_numpy(w)
    ooc.reset_io_stats()
    with ooc.MemoryBudget(BUDGET), no_scratch_file(monkeypatch, allowed=1):
        product = x @ wd
    assert ooc.io_stats().bytes_written == product.nbytes  # the product, once; no copy of x
    np.testing.assert_allclose(product.to_numpy(), data @ w, rtol=1e-4, atol=1e-4)


def test_a_sum_decodes_each_chunk_once(tmp_path, rng):
    """Tiles are whole chunks (`loop_grain`): one pass decodes the array once."""
    data = rng.standard_normal(SHAPE).astype(np.float32)
    make_zarr(str(tmp_path / "x.zarr"), data)
    x = ooc.open_zarr(str(tmp_path / "x.zarr"))
    ooc.reset_io_stats()
    with ooc.MemoryBudget(BUDGET):
        ooc.sum(x)
    assert ooc.io_stats().bytes_read == data.nbytes


def test_reads_count_the_chunks_they_decode(tmp_path, rng):
    data = rng.standard_normal((10, 10)).astype(np.float32)
    make_zarr(str(tmp_path / "x.zarr"), data, chunks=(4, 4))
    f = ooc.open_zarr(str(tmp_path / "x.zarr"))._file
    ooc.reset_io_stats()
    np.testing.assert_array_equal(f.read((slice(3, 5), slice(0, 4))), data[3:5, :4])
    assert ooc.io_stats().bytes_read == 8 * 4 * 4  # two chunks of 4x4 float32
    out = np.empty((2, 10), np.float32)
    assert f.read((slice(8, 10), slice(0, 10)), out=out) is out
    np.testing.assert_array_equal(out, data[8:])


def test_integer_and_boolean_arrays_and_a_0d_array(tmp_path, rng):
    ints = rng.integers(-50, 50, (40, 30)).astype(np.int32)
    make_zarr(str(tmp_path / "i.zarr"), ints, chunks=(7, 9))
    with jax.enable_x64(True), ooc.MemoryBudget(4096):
        assert int(ooc.sum(ooc.open_zarr(str(tmp_path / "i.zarr")))) == ints.sum()
        flags = ooc.open_zarr(str(tmp_path / "i.zarr")) > 0
        assert bool(ooc.any(flags)) and int(ooc.sum(flags)) == (ints > 0).sum()
    scalar = zarr.create_array(str(tmp_path / "s.zarr"), shape=(), dtype="f8")
    scalar[()] = 2.5
    assert float(ooc.open_zarr(str(tmp_path / "s.zarr"))) == 2.5


def test_a_deepcopy_of_a_writable_zarr_array_is_independent(tmp_path, rng):
    data = rng.standard_normal((12, 6)).astype(np.float32)
    make_zarr(str(tmp_path / "x.zarr"), data, chunks=(5, 6))
    x = ooc.open_zarr(str(tmp_path / "x.zarr"), mode="r+")
    y = copy.deepcopy(x)
    y[0] = 9.0
    np.testing.assert_array_equal(x.to_numpy(), data)
    assert float(y[0, 0]) == 9.0


def test_pickles_as_its_store(tmp_path, rng):
    data = rng.standard_normal((20, 6)).astype(np.float32)
    make_zarr(str(tmp_path / "x.zarr"), data, chunks=(8, 6))
    x = ooc.open_zarr(str(tmp_path / "x.zarr"), mode="r+")
    y = pickle.loads(pickle.dumps(x))
    assert isinstance(y._file, ZarrFile) and y._file.writable and y.path == x.path
    np.testing.assert_array_equal(y.to_numpy(), data)


# ---------------------------------------------------------------- tiles follow chunks


def test_loop_grain_maps_loop_axes_to_chunk_sides(tmp_path, rng):
    data = rng.standard_normal(SHAPE).astype(np.float32)
    make_zarr(str(tmp_path / "x.zarr"), data)
    x = ooc.open_zarr(str(tmp_path / "x.zarr"))
    f = x._file
    total = Sum(axes=(0, 1))
    assert loop_grain(total, [f], [SHAPE], (), SHAPE) == CHUNKS
    by_rows = Sum(axes=(1,))
    assert loop_grain(by_rows, [f], [SHAPE], (SHAPE[0],), (SHAPE[1],)) == CHUNKS
    # looked through a fused chain, and across a transpose (its axes swap)
    chain = ooc.tanh(x.T)._file
    assert loop_grain(total, [chain], [chain.shape], (), chain.shape) == CHUNKS[::-1]
    flip = Transpose(axes=(1, 0))
    assert loop_grain(flip, [f], [SHAPE], SHAPE[::-1], ()) == CHUNKS[::-1]
    # a copy in gradpipe's own pages, and a slice that starts off chunk edges: no grain
    paged = ooc.DiskArray.from_numpy(data)._file
    assert loop_grain(total, [paged], [SHAPE], (), SHAPE) == (1, 1)
    offset = x[3:]._file
    assert loop_grain(total, [offset], [offset.shape], (), offset.shape)[0] == 1


@pytest.mark.parametrize(
    "loop, grain", [((256, 96), (32, 40)), ((1000,), (96,)), ((77, 50, 9), (10, 7, 1))]
)
def test_plan_tiles_keeps_tiles_whole_chunks(loop, grain):
    itemsize = 8
    for budget in (4096, 16384, 65536):
        tile = _budget.plan_tiles(
            loop,
            lambda t: 3 * itemsize * int(np.prod(t)),
            ooc.MemoryBudget(budget),
            what="test",
            grain=grain,
        )
        chunk_bytes = 3 * itemsize * int(np.prod(grain))
        for t, g, n in zip(tile, grain, loop):
            # whole chunks while a chunk fits; then a tile that divides a chunk evenly
            if chunk_bytes <= budget:
                assert t % g == 0 or t == n, (tile, budget)
            else:
                assert t == n or t % g == 0 or -(-g // t) * t - g < t, (tile, budget)


@pytest.mark.parametrize("loop", [(256, 96), (1000,), (77, 50, 9), (3, 1000, 7)])
def test_plan_tiles_grain_one_is_todays_plan(loop):
    bytes_for = lambda t: 5 * int(np.prod(t)) + 100
    cost = lambda t: float(np.prod([-(-n // s) for n, s in zip(loop, t)]))
    for budget in (4096, 20000, 100000):
        b = ooc.MemoryBudget(budget)
        plain = _budget.plan_tiles(loop, bytes_for, b, what="t", cost_for=cost)
        ones = _budget.plan_tiles(
            loop, bytes_for, b, what="t", cost_for=cost, grain=(1,) * len(loop)
        )
        assert plain == ones
    with pytest.raises(ValueError, match="one entry per loop axis"):
        _budget.plan_tiles(loop, bytes_for, b, what="t", grain=(1,) * (len(loop) + 1))


# ---------------------------------------------------------------- writing in place


def test_update_writes_each_chunk_once_whole(rng):
    """`update_` writes row blocks that cut chunks; each chunk is still written once."""
    store = CountingStore(zarr.storage.MemoryStore())
    old = rng.standard_normal((100, 30)).astype(np.float32)
    make_zarr(store, old, chunks=(12, 7))
    store.sets.clear()
    x = ooc.open_zarr(store, mode="r+")
    new = rng.standard_normal(old.shape).astype(np.float32)
    value = ooc.DiskArray.from_numpy(new)
    ooc.reset_io_stats()
    with ooc.MemoryBudget(4096):
        ooc.update_(x, value)
    np.testing.assert_array_equal(zarr.open_array(store, mode="r")[...], new)
    chunk_keys = [k for k in store.sets if not k.endswith("zarr.json")]
    assert len(chunk_keys) == 9 * 5 and set(store.sets.values()) == {1}
    assert ooc.io_stats().bytes_written == new.nbytes


def test_a_jitted_training_loop_updates_a_zarr_target(tmp_path, rng):
    X = rng.standard_normal((120, 24)).astype(np.float32)
    y = rng.standard_normal((120, 1)).astype(np.float32)
    w0 = rng.standard_normal((24, 1)).astype(np.float32)
    make_zarr(str(tmp_path / "x.zarr"), X, chunks=(32, 8), compressors=zarr.codecs.BloscCodec())
    make_zarr(str(tmp_path / "w.zarr"), w0, chunks=(5, 1), zarr_format=2)
    with ooc.MemoryBudget(BUDGET):
        Xd, yd = ooc.open_zarr(str(tmp_path / "x.zarr")), ooc.DiskArray.from_numpy(y)
        w = ooc.open_zarr(f"file://{tmp_path / 'w.zarr'}", mode="r+")

        @jax.jit
        def step(w):
            g = jax.grad(lambda w: ooc.mean(ooc.square(Xd @ w - yd)))(w)
            return ooc.update_(w, w - 0.1 * g)

        for _ in range(3):
            w = step(w)
    wm = jnp.asarray(w0)
    for _ in range(3):
        wm = wm - 0.1 * jax.grad(lambda w: jnp.mean(jnp.square(X @ w - y)))(wm)
    assert isinstance(w._file, ZarrFile)
    stored = zarr.open_array(str(tmp_path / "w.zarr"), mode="r")[...]
    np.testing.assert_allclose(stored, np.asarray(wm), rtol=1e-5, atol=1e-6)


def test_setitem_writes_into_the_zarr_array(tmp_path, rng):
    data = rng.standard_normal((30, 20)).astype(np.float32)
    make_zarr(str(tmp_path / "x.zarr"), data, chunks=(8, 8))
    x = ooc.open_zarr(str(tmp_path / "x.zarr"), mode="r+")
    with ooc.MemoryBudget(4096):
        x[3:17:2, 5] = -1.0
        x[20:] = np.arange(20, dtype=np.float32)
    data[3:17:2, 5] = -1.0
    data[20:] = np.arange(20)
    np.testing.assert_array_equal(zarr.open_array(str(tmp_path / "x.zarr"), mode="r")[...], data)


def test_a_read_only_zarr_array_refuses_writes(tmp_path, rng):
    make_zarr(str(tmp_path / "x.zarr"), rng.standard_normal((8, 8)).astype(np.float32))
    x = ooc.open_zarr(str(tmp_path / "x.zarr"))
    with pytest.raises(TypeError, match="read-only"):
        ooc.update_(x, 0.0)
    with pytest.raises(TypeError, match="read-only"):
        x[0] = 1.0


def test_a_chunk_write_that_fails_leaves_the_old_chunk(tmp_path):
    """A write that dies part-way (here: the file size limit, as a full disk) leaves
    every chunk as it was, also through a ``file://`` URL (written by rename, not in
    place), and no temporary files behind."""
    old = np.arange(64 * 64, dtype=np.float64).reshape(64, 64)
    make_zarr(str(tmp_path / "x.zarr"), old, chunks=(32, 64), compressors=None)
    script = textwrap.dedent(
        f"""
        import resource, signal, sys
        import numpy as np
        from gradpipe import ooc
        x = ooc.open_zarr("file://{tmp_path / "x.zarr"}", mode="r+")
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
        try:
            ooc.update_(x, 7.0)
        except OSError as e:
            print("refused:", e.errno)
            sys.exit(0)
        sys.exit("the write went through")
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0 and "refused" in done.stdout, done.stdout + done.stderr
    np.testing.assert_array_equal(zarr.open_array(str(tmp_path / "x.zarr"), mode="r")[...], old)
    assert not [p for p in (tmp_path / "x.zarr").rglob("*partial*")]


# ---------------------------------------------------------------- streaming results


def test_to_zarr_streams_a_chain_with_no_intermediate_file(tmp_path, rng, monkeypatch):
    data = rng.standard_normal(SHAPE).astype(np.float32)
    make_zarr(str(tmp_path / "x.zarr"), data)
    x = ooc.open_zarr(str(tmp_path / "x.zarr"))
    store = CountingStore(zarr.storage.LocalStore(str(tmp_path / "y.zarr")))
    ooc.reset_io_stats()
    with ooc.MemoryBudget(65536), no_scratch_file(monkeypatch):
        z = ooc.to_zarr(ooc.exp(ooc.tanh(x) * 0.5), store, chunks=(50, 24))
    np.testing.assert_allclose(z[...], np.exp(np.tanh(data) * 0.5), rtol=1e-6)
    chunk_keys = [k for k in store.sets if not k.endswith("zarr.json")]
    assert len(chunk_keys) == 6 * 4 and set(store.sets.values()) == {1}
    assert ooc.io_stats().bytes_written == data.nbytes


def test_gradients_written_to_zarr_equal_jax_grad(tmp_path, rng):
    X = rng.standard_normal((200, 16)).astype(np.float32)
    make_zarr(str(tmp_path / "x.zarr"), X, chunks=(48, 16))
    x = ooc.open_zarr(str(tmp_path / "x.zarr"))
    # (on the host, whatever the default device: the bound below is NumPy's tanh's;
    # an accelerator's keeps four or five digits, tests/ooc/test_compute_device.py)
    with ooc.MemoryBudget(BUDGET, device="host"):
        g = jax.grad(lambda x: ooc.sum(ooc.square(ooc.tanh(x) - 0.5)))(x)
        ooc.to_zarr(g, str(tmp_path / "g.zarr"), chunks=(40, 8))
    with jax.enable_x64(True):
        loss = lambda x: jnp.sum(jnp.square(jnp.tanh(x) - 0.5))
        expected = jax.grad(loss)(jnp.asarray(X, jnp.float64))
    written = zarr.open_array(str(tmp_path / "g.zarr"), mode="r")
    assert written.chunks == (40, 8)
    # ooc computes g = 2 (t - 1/2)(1 - t**2) in float32 with NumPy's t = tanh(x),
    # within 4 ulp <= 4u of the exact t (NumPy's kernels are within about 2);
    # |dg/dt| <= 6 makes that 24u, and the few roundings of values at most 6 in
    # size add at most 48u. The reference is float64: a float32 jax.grad would use
    # XLA's tanh, several ulp from NumPy's in ways that vary with the CPU.
    np.testing.assert_allclose(written[...], np.asarray(expected), rtol=0, atol=72 * 2.0**-24)


def test_to_zarr_refuses_chunks_larger_than_the_budget(tmp_path):
    x = ooc.DiskArray.full((512, 512), 1.0)
    with pytest.raises(MemoryError, match="smaller chunks"):
        ooc.to_zarr(x, str(tmp_path / "y.zarr"), chunks=(512, 512), budget=4096)
    with pytest.raises(ValueError, match="mode"):
        ooc.to_zarr(x, str(tmp_path / "y.zarr"), mode="a")


def test_from_zarr_is_a_copy(tmp_path, rng):
    data = rng.standard_normal((40, 12)).astype(np.float32)
    z = make_zarr(str(tmp_path / "x.zarr"), data, chunks=(9, 5))
    copy = ooc.from_zarr(str(tmp_path / "x.zarr"))
    assert isinstance(copy._file, PagedFile)
    z[...] = 0.0
    np.testing.assert_array_equal(copy.to_numpy(), data)


# ---------------------------------------------------------------- bad input


def test_bad_input_is_refused_with_what_to_do(tmp_path, rng):
    group = zarr.open_group(str(tmp_path / "g.zarr"), mode="w")
    group.create_array("a", shape=(4,), dtype="f4")
    with pytest.raises(ValueError, match=r"group.*path=.*'a'"):
        ooc.open_zarr(str(tmp_path / "g.zarr"))
    assert ooc.open_zarr(str(tmp_path / "g.zarr"), path="a").shape == (4,)
    with pytest.raises(FileNotFoundError, match="No zarr array"):
        ooc.open_zarr(str(tmp_path / "missing.zarr"))
    with pytest.raises(ValueError, match="mode must be 'r' or 'r\\+'"):
        ooc.open_zarr(str(tmp_path / "g.zarr"), path="a", mode="w")
    with pytest.raises(ValueError, match="storage_options"):
        ooc.open_zarr(str(tmp_path / "g.zarr"), path="a", storage_options={"anon": True})
    with pytest.raises(TypeError, match="path, a URL"):
        ooc.open_zarr(42)
    strings = zarr.create_array(str(tmp_path / "s.zarr"), shape=(3,), dtype=str)
    with pytest.raises(TypeError, match="booleans and numbers"):
        ooc.open_zarr(strings)
    read_only = zarr.open_array(str(tmp_path / "g.zarr"), path="a", mode="r")
    with pytest.raises(ValueError, match="read-only"):
        ooc.open_zarr(read_only, mode="r+")
