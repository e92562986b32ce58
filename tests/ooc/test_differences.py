"""diff out of core, as NumPy's, with JAX's gradient."""

import numpy as np
import pytest
from gradcases import MODE_IDS, MODES, GradCase, check

from gradpipe import ooc


@pytest.mark.parametrize(
    "kw",
    [{}, {"axis": 0}, {"n": 2}, {"n": 0}, {"n": 40}, {"axis": 0, "prepend": "p", "append": "a"}],
    ids=str,
)
@pytest.mark.parametrize("dtype", ["float32", "int16", "uint8", "bool"])
def test_diff_follows_numpy(kw, dtype):
    X = (np.random.default_rng(3).standard_normal((35, 13)) * 5).astype(dtype)
    with ooc.MemoryBudget(4096):
        x = ooc.asarray(X)
        ours = {
            k: ooc.asarray(X[:2]) if v == "p" else ooc.asarray(X[:1]) if v == "a" else v
            for k, v in kw.items()
        }
        theirs = {k: X[:2] if v == "p" else X[:1] if v == "a" else v for k, v in kw.items()}
        got = ooc.diff(x, **ours)
        want = np.diff(X, **theirs)
        got = got.to_numpy(force=True) if isinstance(got, ooc.DiskArray) else np.asarray(got)
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got, want)


def test_diff_refuses_bad_arguments():
    x = ooc.asarray(np.ones((3, 4)))
    with pytest.raises(ValueError, match="non-negative"):
        ooc.diff(x, n=-1)
    with pytest.raises(np.exceptions.AxisError):
        ooc.diff(x, axis=2)


CASES = [
    GradCase("diff", lambda xp, x: xp.diff(x, axis=0), ((37, 29),)),
    GradCase("diff", lambda xp, x, p: xp.diff(x, n=2, prepend=p), ((37, 29), (37, 3))),
]


@pytest.mark.parametrize("dtype, jit", MODES, ids=MODE_IDS)
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_diff_gradients_equal_jax(case, dtype, jit):
    check(case, dtype, jit)
