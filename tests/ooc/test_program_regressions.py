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


def _scalar(value, dtype="float64"):
    return np.asarray(value, dtype)


@pytest.mark.parametrize("jit", MODES, ids=MODE_IDS)
def test_a_0d_disk_array_used_twice_has_one_gradient_type(jit):
    # the two cotangents of a 0-d DiskArray were summed by the out-of-core `add`,
    # whose 0-d result is a JAX value, not the DiskArray type JAX expects
    # ("Attempting to pass an unexpected type DiskArray{float64[]} to a primitive")
    def program(xp, v0, v1):
        return [v1 + v0, v1 + v1]

    compare(
        program,
        [_normal(5, dtype="float32"), _scalar(0.3)],
        budget=4096,
        jit_values=jit[0],
        jit_grad=jit[1],
    )


@pytest.mark.parametrize("jit", MODES, ids=MODE_IDS)
def test_a_0d_disk_array_beside_an_empty_slice_and_in_a_where(jit):
    def program(xp, v0, v1, v2):
        return [
            v0[:, :, :0] + v2,
            xp.abs(v2),
            xp.where(v2 > v1, v2, v1 * 0.5),
            v2 - np.float32(-0.75),
        ]

    arrays = [
        np.zeros((0, 2, 3), "float32"),
        _normal(1, 1, 2, dtype="float32"),
        _scalar(0.2, "float32"),
    ]
    compare(program, arrays, budget=4096, jit_values=jit[0], jit_grad=jit[1])


@pytest.mark.parametrize("jit", MODES, ids=MODE_IDS)
def test_a_where_whose_condition_is_a_traced_0d_value(jit):
    # `v1 > v1` of a 0-d DiskArray is a 0-d JAX value; under jax.grad it is traced,
    # and `where` asked NumPy for its dtype (TracerArrayConversionError)
    def program(xp, v0, v1):
        return [v0, xp.where(v1 > v1, v1, v1 * 0.5), xp.clip(v1 * 2.0, -0.5, 0.7)]

    arrays = [np.zeros((0,), "float32"), _scalar(0.4, "float32")]
    compare(program, arrays, budget=4096, jit_values=jit[0], jit_grad=jit[1])


@pytest.mark.parametrize("jit", MODES, ids=MODE_IDS)
def test_a_cotangent_that_is_zero_whatever_the_output_is_not_computed(jit):
    # copysign's cotangent for its sign argument is zero whatever the output's: JAX
    # prunes it, so std's backward pass (0 * inf at zero variance) never runs; the
    # out-of-core backward passed a zero into it and gave NaN where JAX gives 0
    # (make fuzz, GRADPIPE_FUZZ_SEED=20261202)
    def program(xp, v0, v1, v2):
        return [xp.copysign(v0 @ v2, xp.std(v1, correction=0)), v0 + v0]

    compare(
        program,
        [_normal(0, 2, dtype="float32"), _scalar(0.3, "float32"), _normal(2, dtype="float32")],
        budget=4096,
        jit_values=jit[0],
        jit_grad=jit[1],
    )


@pytest.mark.parametrize("jit", MODES, ids=MODE_IDS)
def test_a_nan_cotangent_of_a_max_reaches_every_element(jit):
    # the std of a 0-d max has a NaN derivative; JAX's max multiplies the cotangent by
    # the tie mask, so every element's gradient is NaN (NaN * 0), where gradpipe's
    # picked the maximum's element and gave the others a zero, hiding the NaN
    def program(xp, v0):
        v3 = xp.max(v0, axis=None, keepdims=False)
        return [v0 + v0, xp.std(v3, axis=None, keepdims=False, correction=0)]

    compare(
        program,
        [_normal(2, dtype="float32")],
        budget=4096,
        jit_values=jit[0],
        jit_grad=jit[1],
    )


@pytest.mark.parametrize("jit", MODES, ids=MODE_IDS)
def test_a_constant_operand_holds_no_gradient_in_the_budget(jit):
    # a NumPy constant (2.7 KiB) times a DiskArray under an 8 KiB budget: the
    # gradient's check counted a gradient for the constant too, which nothing
    # differentiates, and refused it ("take 5.4 KiB with their gradients, more than
    # 50% of the memory budget")
    const = np.linspace(-1.0, 1.0, 12 * 29).reshape(1, 12, 29)

    def program(xp, v0):
        return [const * v0, xp.abs(const * v0)]

    compare(
        program,
        [_normal(1, 12, 29, dtype="float32")],
        budget=8192,
        jit_values=jit[0],
        jit_grad=jit[1],
    )
