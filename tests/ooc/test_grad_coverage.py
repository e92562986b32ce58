"""The gradient table covers the whole namespace: every differentiable function of
`gradpipe.ooc` (and of its `linalg` and `fft` extensions, when present) is named by a
`GradCase` in some family's test file, and every function left out is listed below
with the reason it has no gradient. A function added to the namespace without either
fails this test."""

import importlib

import pytest

from gradpipe import ooc

# the family test files that hold `CASES` lists of `GradCase`s
FAMILIES = [
    "test_creation",
    "test_differences",
    "test_grad_elementwise",
    "test_indexing",
    "test_linalg",
    "test_manipulation",
    "test_sorting",
    "test_statistics",
    "test_fft",
    "test_linalg_extension",
    "test_fusion",
    "test_nan_reductions",
    "test_quantile",
]

_BOOL_OR_INT = "its result is bool or integer: no gradient, as in JAX"
_CONSTANT = "its result does not depend on any array's values"
NO_GRADIENT = {
    **{
        n: _BOOL_OR_INT
        for n in (
            "equal not_equal less less_equal greater greater_equal logical_and logical_or "
            "logical_xor logical_not isnan isinf isfinite signbit bitwise_and bitwise_or "
            "bitwise_xor bitwise_invert bitwise_left_shift bitwise_right_shift argmax argmin "
            "nanargmax nanargmin "
            "count_nonzero searchsorted all any"
        ).split()
    },
    **{
        n: _CONSTANT
        for n in (
            "arange linspace eye full zeros ones empty full_like zeros_like ones_like empty_like"
        ).split()
    },
    "asarray": "a conversion into the namespace (an existing DiskArray is returned as it is)",
    "from_dlpack": "copies in-memory data to disk (the gradient belongs to the caller's array)",
    "update_": "writes into a file in place; refused under jax.grad (tests/ooc/test_refusals.py)",
    "fft.fftfreq": _CONSTANT,
    "fft.rfftfreq": _CONSTANT,
}


def _gradient_cases():
    names = set()
    for module in FAMILIES:
        try:
            cases = importlib.import_module(module).CASES
        except ModuleNotFoundError:  # a family not built yet has no file
            continue
        names |= {case.name for case in cases}
    return names


def _namespace_functions():
    names = {n for n in ooc.ops.__all__ if callable(getattr(ooc, n)) and not n[0].isupper()}
    for ext in ("linalg", "fft"):
        module = getattr(ooc, ext, None)
        if module is not None:
            names |= {
                f"{ext}.{n}"
                for n in module.__all__
                if callable(getattr(module, n)) and not n[0].isupper()  # result types
            }
    return names


def test_every_differentiable_function_is_in_the_gradient_table():
    covered = _gradient_cases()
    functions = _namespace_functions()
    # an extension's function is covered by a case named either way
    missing = sorted(
        n for n in functions
        if n not in NO_GRADIENT and n not in covered and n.split(".")[-1] not in covered
    )  # fmt: skip
    assert not missing, f"no GradCase names {missing}"
    present = {n for n in NO_GRADIENT if "." not in n or hasattr(ooc, n.split(".")[0])}
    stale = sorted(n for n in present if n not in functions)
    assert not stale, f"NO_GRADIENT lists functions the namespace lacks: {stale}"
    assert gradient_table_size() >= 100  # the summary line prints this count


def gradient_table_size() -> int:
    """How many differentiable functions the table covers (printed after the run)."""
    return len([n for n in _namespace_functions() if n not in NO_GRADIENT])


@pytest.mark.parametrize("name", sorted(n for n in NO_GRADIENT if "." not in n))
def test_functions_without_a_gradient_are_in_the_namespace(name):
    assert callable(getattr(ooc, name))
