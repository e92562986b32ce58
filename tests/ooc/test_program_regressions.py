"""Programs the random-program tests (tests/ooc/test_programs.py) found failing,
each kept as a named test: the smallest program that showed the bug, run on
gradpipe.ooc and on jax.numpy and compared (values, dtypes, gradients)."""

import numpy as np
import pytest
from programs import compare

MODES = [(False, False), (True, True)]
MODE_IDS = ["eager", "jit"]


def _normal(*shape, dtype="float64", seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


@pytest.mark.parametrize("jit", MODES, ids=MODE_IDS)
def test_a_concatenation_asks_a_fused_unit_axis_reshape_for_an_empty_box(jit):
    # the concatenation reads its second input, squeeze(expand_dims(x)), for no rows
    # in the tiles of its first; the fused chain computed that empty box through
    # the size-1 axis map, which turned the empty unit axis into a full one
    # ("cannot reshape array of size 272 into shape (0,17,16)")
    def program(xp, x1):
        v2 = xp.squeeze(xp.expand_dims(x1, axis=1), axis=1)
        v3 = xp.concat([x1, v2], axis=0)
        v4 = xp.take(v3, np.array([0, 1, 1]), axis=0)
        return [v4[:, 1::2, ::3], v3[::-1, ::2]]

    compare(program, [_normal(1, 17, 29)], budget=4096, jit_values=jit[0], jit_grad=jit[1])
