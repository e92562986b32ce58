"""The linalg extension out of core: NumPy's values on stacks of matrices cut into
several tiles (eagerly and under jax.jit), named tuples where the standard has them,
a clear refusal when one matrix exceeds the budget, and jax.numpy.linalg's gradients
(refused by name where JAX has none)."""

import jax
import numpy as np
import pytest
from gradcases import MODE_IDS, MODES, GradCase, check

from gradpipe import ooc

BUDGET = 4096
L = ooc.linalg


def _arrays():
    rng = np.random.default_rng(5)
    A = rng.standard_normal((6, 4, 4))
    return {
        "A": A,
        "S": A @ A.transpose(0, 2, 1) + 4 * np.eye(4),
        "R": rng.standard_normal((6, 3, 4)),
        "B": rng.standard_normal((6, 4, 2)),
        "v": rng.standard_normal(4),
        "u3": rng.standard_normal((5, 3)),
        "w3": rng.standard_normal((2, 5, 3)),
    }


FORWARD = [
    ("cholesky", lambda L, d: L.cholesky(d["S"]), lambda d: np.linalg.cholesky(d["S"])),
    (
        "cholesky_upper",
        lambda L, d: L.cholesky(d["S"], upper=True),
        lambda d: np.linalg.cholesky(d["S"], upper=True),
    ),
    ("det", lambda L, d: L.det(d["A"]), lambda d: np.linalg.det(d["A"])),
    ("slogdet", lambda L, d: tuple(L.slogdet(d["A"])), lambda d: tuple(np.linalg.slogdet(d["A"]))),
    ("eigh", lambda L, d: tuple(L.eigh(d["S"])), lambda d: tuple(np.linalg.eigh(d["S"]))),
    ("eigvalsh", lambda L, d: L.eigvalsh(d["S"]), lambda d: np.linalg.eigvalsh(d["S"])),
    ("inv", lambda L, d: L.inv(d["A"]), lambda d: np.linalg.inv(d["A"])),
    (
        "matrix_power",
        lambda L, d: L.matrix_power(d["A"], -2),
        lambda d: np.linalg.matrix_power(d["A"], -2),
    ),
    (
        "matrix_power3",
        lambda L, d: L.matrix_power(d["A"], 3),
        lambda d: np.linalg.matrix_power(d["A"], 3),
    ),
    ("matrix_rank", lambda L, d: L.matrix_rank(d["R"]), lambda d: np.linalg.matrix_rank(d["R"])),
    ("pinv", lambda L, d: L.pinv(d["R"]), lambda d: np.linalg.pinv(d["R"], rtol=None)),
    ("qr", lambda L, d: tuple(L.qr(d["R"])), lambda d: tuple(np.linalg.qr(d["R"]))),
    (
        "qr_complete",
        lambda L, d: tuple(L.qr(d["R"], mode="complete")),
        lambda d: tuple(np.linalg.qr(d["R"], mode="complete")),
    ),
    ("solve", lambda L, d: L.solve(d["A"], d["B"]), lambda d: np.linalg.solve(d["A"], d["B"])),
    (
        "solve_vector",
        lambda L, d: L.solve(d["A"], d["v"]),
        lambda d: np.linalg.solve(d["A"], d["v"]),
    ),
    ("svd", lambda L, d: tuple(L.svd(d["R"])), lambda d: tuple(np.linalg.svd(d["R"]))),
    ("svdvals", lambda L, d: L.svdvals(d["R"]), lambda d: np.linalg.svdvals(d["R"])),
    (
        "diagonal",
        lambda L, d: L.diagonal(d["R"], offset=1),
        lambda d: np.linalg.diagonal(d["R"], offset=1),
    ),
    (
        "diagonal_below",
        lambda L, d: L.diagonal(d["R"], offset=-2),
        lambda d: np.linalg.diagonal(d["R"], offset=-2),
    ),
    ("trace", lambda L, d: L.trace(d["A"], offset=1), lambda d: np.linalg.trace(d["A"], offset=1)),
    ("outer", lambda L, d: L.outer(d["v"], d["u3"][0]), lambda d: np.outer(d["v"], d["u3"][0])),
    ("cross", lambda L, d: L.cross(d["u3"], d["w3"]), lambda d: np.linalg.cross(d["u3"], d["w3"])),
    (
        "vector_norm",
        lambda L, d: L.vector_norm(d["R"], axis=(0, 2)),
        lambda d: np.linalg.vector_norm(d["R"], axis=(0, 2)),
    ),
    (
        "vector_norm_all",
        lambda L, d: L.vector_norm(d["R"], ord=3.5),
        lambda d: np.linalg.vector_norm(d["R"], ord=3.5),
    ),
    ("matmul", lambda L, d: L.matmul(d["A"], d["B"]), lambda d: d["A"] @ d["B"]),
]
ORDS = [1, 0, np.inf, -np.inf, 3.5]
MATRIX_ORDS = ["fro", "nuc", 1, -1, 2, -2, np.inf, -np.inf]


def _numpy(out):
    outs = out if isinstance(out, tuple) else (out,)
    return [o.to_numpy(force=True) if hasattr(o, "to_numpy") else np.asarray(o) for o in outs]


def _compare(got, want):
    want = want if isinstance(want, tuple) else (want,)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, g.dtype, w.shape, w.dtype)
        np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("name, fn, ref", FORWARD, ids=[f[0] for f in FORWARD])
def test_linalg_follows_numpy(name, fn, ref):
    data = _arrays()
    with ooc.MemoryBudget(BUDGET), jax.enable_x64(True):  # 64-bit 0-d results
        disk = {k: ooc.asarray(v) for k, v in data.items()}
        _compare(_numpy(fn(L, disk)), ref(data))
        _compare(_numpy(jax.jit(lambda d: fn(L, d))(disk)), ref(data))


@pytest.mark.parametrize("ord", ORDS)
def test_vector_norm_orders_follow_numpy(ord):
    R = _arrays()["R"]
    with ooc.MemoryBudget(BUDGET):
        got = L.vector_norm(ooc.asarray(R), axis=-1, ord=ord, keepdims=True)
        _compare(_numpy(got), np.linalg.vector_norm(R, axis=-1, ord=ord, keepdims=True))


@pytest.mark.parametrize("ord", MATRIX_ORDS, ids=str)
@pytest.mark.parametrize("keepdims", [False, True])
def test_matrix_norm_orders_follow_numpy(ord, keepdims):
    R = _arrays()["R"]
    with ooc.MemoryBudget(BUDGET):
        got = L.matrix_norm(ooc.asarray(R), ord=ord, keepdims=keepdims)
        _compare(_numpy(got), np.linalg.matrix_norm(R, ord=ord, keepdims=keepdims))


def test_results_are_named_tuples_and_dtypes_follow_numpy():
    R = _arrays()["R"].astype(np.float32)
    with ooc.MemoryBudget(BUDGET):
        x = ooc.asarray(R)
        s = L.svd(x, full_matrices=False).S
        assert L.svd(x).S.dtype == np.float32 and s.shape == (6, 3)
        assert L.qr(x).R.shape == (6, 3, 4)
        assert L.slogdet(ooc.asarray(R[:, :3, :3])).logabsdet.shape == (6,)
        assert L.eigh(ooc.asarray(np.eye(3))).eigenvectors.shape == (3, 3)
        assert L.det(ooc.asarray(np.eye(3, dtype=np.float32))).shape == ()
        assert L.matrix_rank(x).dtype == np.int64


def test_a_matrix_larger_than_the_budget_is_refused_with_its_size():
    x = ooc.zeros((2, 40, 40))
    with ooc.MemoryBudget(BUDGET), pytest.raises(MemoryError, match="one batch element"):
        L.inv(x)


def test_bad_input_is_refused():
    A = ooc.asarray(np.ones((3, 4)))
    with pytest.raises(ValueError, match="square"):
        L.det(A)
    with pytest.raises(TypeError, match="floating"):
        L.inv(ooc.asarray(np.eye(3, dtype=np.int32)))
    with pytest.raises(ValueError, match="at least 2"):
        L.cholesky(ooc.asarray(np.ones(3)))
    with pytest.raises(ValueError, match="3 elements"):
        L.cross(A, A)
    with pytest.raises(ValueError, match="ord"):
        L.matrix_norm(A, ord=3)
    with pytest.raises(ValueError, match="mode"):
        L.qr(A, mode="r")
    with pytest.raises(ValueError, match="does not match"):
        L.solve(ooc.asarray(np.eye(3)), ooc.asarray(np.ones(4)))


def _spd(xp, a):
    return xp.matmul(a, xp.linalg.matrix_transpose(a)) + 4 * xp.eye(a.shape[-1], dtype=a.dtype)


CASES = [
    GradCase("cholesky", lambda xp, a: xp.linalg.cholesky(_spd(xp, a)), ((3, 3, 3),)),
    GradCase("det", lambda xp, a: xp.linalg.det(a), ((3, 4, 4),)),
    GradCase("det", lambda xp, a: xp.linalg.det(a), ((3, 3),)),
    GradCase("slogdet", lambda xp, a: xp.linalg.slogdet(a)[1], ((3, 4, 4),)),
    GradCase("eigh", lambda xp, a: xp.linalg.eigh(_spd(xp, a))[0], ((3, 3, 3),)),
    GradCase("eigh", lambda xp, a: xp.square(xp.linalg.eigh(_spd(xp, a))[1]), ((3, 3, 3),)),
    GradCase("eigvalsh", lambda xp, a: xp.linalg.eigvalsh(_spd(xp, a)), ((3, 3, 3),)),
    GradCase("inv", lambda xp, a: xp.linalg.inv(_spd(xp, a)), ((3, 4, 4),)),
    GradCase("matrix_power", lambda xp, a: xp.linalg.matrix_power(a, 3), ((3, 3, 3),)),
    GradCase("matrix_power", lambda xp, a: xp.linalg.matrix_power(_spd(xp, a), -2), ((2, 3, 3),)),
    GradCase("pinv", lambda xp, a: xp.linalg.pinv(a), ((3, 3, 4),)),
    GradCase("qr", lambda xp, a: xp.linalg.qr(a)[0], ((3, 4, 3),)),
    GradCase("qr", lambda xp, a: xp.linalg.qr(a)[1], ((3, 4, 3),)),
    GradCase("solve", lambda xp, a, b: xp.linalg.solve(_spd(xp, a), b), ((3, 3, 3), (3, 3, 2))),
    GradCase("solve", lambda xp, a, b: xp.linalg.solve(_spd(xp, a), b), ((3, 3, 3), (3,))),
    GradCase(
        "svd", lambda xp, a: xp.square(xp.linalg.svd(a, full_matrices=False)[0]), ((3, 3, 4),)
    ),
    GradCase("svd", lambda xp, a: xp.linalg.svd(a, full_matrices=False)[1], ((3, 3, 4),)),
    GradCase("svd", lambda xp, a: xp.linalg.svd(a)[1], ((3, 3, 4),), refuses=True),
    GradCase("svdvals", lambda xp, a: xp.linalg.svdvals(a), ((3, 4, 3),)),
    GradCase(
        "matrix_rank",
        lambda xp, a: xp.astype(xp.linalg.matrix_rank(a), a.dtype) + xp.linalg.det(a),
        ((3, 3, 3),),
    ),
    GradCase("diagonal", lambda xp, a: xp.linalg.diagonal(a, offset=1), ((3, 4, 5),)),
    GradCase("trace", lambda xp, a: xp.linalg.trace(a, offset=-1), ((3, 4, 5),)),
    GradCase("outer", lambda xp, a, b: xp.linalg.outer(a, b), ((7,), (5,))),
    GradCase("cross", lambda xp, a, b: xp.linalg.cross(a, b), ((6, 3), (2, 6, 3))),
    GradCase("vector_norm", lambda xp, a: xp.linalg.vector_norm(a, axis=-1), ((6, 5),)),
    GradCase("vector_norm", lambda xp, a: xp.linalg.vector_norm(a, ord=3), ((6, 5),)),
    GradCase("vector_norm", lambda xp, a: xp.linalg.vector_norm(a, ord=1, axis=0), ((6, 5),)),
    GradCase("matrix_norm", lambda xp, a: xp.linalg.matrix_norm(a), ((3, 4, 5),)),
    GradCase("matrix_norm", lambda xp, a: xp.linalg.matrix_norm(a, ord="nuc"), ((3, 4, 5),)),
    GradCase("matrix_norm", lambda xp, a: xp.linalg.matrix_norm(a, ord=1), ((3, 4, 5),)),
]


@pytest.mark.parametrize("dtype, jit", MODES, ids=MODE_IDS)
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_linalg_gradients_equal_jax(case, dtype, jit):
    check(case, dtype, jit)
