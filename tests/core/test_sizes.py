"""Sizes: one parser, one rule, for every size argument of the library."""

import argparse

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gradpipe as gp
from gradpipe import format_size, parse_size

SI = {"B": 1, "kB": 10**3, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12}
IEC = {"KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}


@pytest.mark.parametrize(
    ("text", "nbytes"),
    [
        ("4096", 4096),
        (" 17 ", 17),
        ("16MB", 16 * 10**6),
        ("16MiB", 16 * 2**20),
        ("16 MiB", 16 * 2**20),
        ("16mib", 16 * 2**20),
        ("2GB", 2 * 10**9),
        ("1.5GiB", 3 * 2**29),
        ("2.5kB", 2500),
        ("1e9", 10**9),
        ("1_000B", 1000),
        ("0", 0),
    ],
)
def test_the_rule(text, nbytes):
    assert parse_size(text) == nbytes


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("64M", "ambiguous.*'64MiB'.*'64MB'"),
        ("1G", "ambiguous"),
        ("2k", "ambiguous"),
        ("3Gi", "ambiguous"),
        ("-1", "negative"),
        ("-2MiB", "negative"),
        ("0.5B", "whole number of bytes"),
        ("1.0001kB", "whole number of bytes"),
        ("lots", "not a size"),
        ("", "not a size"),
        ("MiB", "not a size"),
        ("1,000", "not a size"),
        ("12 parsecs", "unknown unit"),
        ("5Mb", "mixes cases.*megabits"),
        ("5mB", "mixes cases"),
        ("nan", "not a size|unknown unit"),
    ],
)
def test_refusals_name_the_argument(text, match):
    with pytest.raises(ValueError, match=match) as info:
        parse_size(text, name="--max-body-size")
    assert "--max-body-size" in str(info.value)


def test_types():
    assert parse_size(123) == 123
    assert parse_size(1e9) == 10**9
    for bad in (True, None, [1], b"1MB"):
        with pytest.raises(TypeError, match="size"):
            parse_size(bad)
    for bad in (0.5, float("inf"), float("nan"), -3):
        with pytest.raises(ValueError, match="size"):
            parse_size(bad)


@settings(max_examples=300, deadline=None)
@given(
    number=st.integers(0, 10**6),
    unit=st.sampled_from(sorted({**SI, **IEC})),
    space=st.sampled_from(["", " "]),
)
def test_every_unit_is_its_power_exactly(number, unit, space):
    assert parse_size(f"{number}{space}{unit}") == number * {**SI, **IEC}[unit]
    assert parse_size(f"{number}{space}{unit.lower()}") == number * {**SI, **IEC}[unit]


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=12))
def test_any_text_parses_or_raises_value_error(text):
    try:
        value = parse_size(text)
    except ValueError:
        return
    assert isinstance(value, int) and value >= 0


def test_format_size():
    assert [format_size(n) for n in (17, 8 * 2**10, 512 * 2**20, 3 * 2**40)] == [
        "17 B",
        "8.0 KiB",
        "512.0 MiB",
        "3.0 TiB",
    ]


def test_the_cli_and_memory_budget_agree():
    """`--max-body-size 64MB` and `MemoryBudget("64MB")` are the same number."""
    _parsers = pytest.importorskip("gradpipe.serve._cli")._parsers
    ooc = pytest.importorskip("gradpipe.ooc")
    serve = _parsers()["serve"]
    for text in ("64MB", "64MiB", "3GB", "1GiB", "65536"):
        args = serve.parse_args(["m:f", "--max-body-size", text, "--max-handle-bytes", text])
        assert args.max_body_size == args.max_handle_bytes == parse_size(text)
        assert ooc.MemoryBudget(text).nbytes == parse_size(text)
    defaults = serve.parse_args(["m:f"])
    assert defaults.max_body_size == 256 * 2**20
    assert defaults.max_handle_bytes == 2**30


def test_ambiguous_sizes_are_refused_everywhere():
    _size = pytest.importorskip("gradpipe.serve._cli")._size
    ooc = pytest.importorskip("gradpipe.ooc")
    with pytest.raises(argparse.ArgumentTypeError, match="ambiguous"):
        _size("64M")
    with pytest.raises(ValueError, match=r"MemoryBudget\(nbytes\).*ambiguous"):
        ooc.MemoryBudget("64M")
    with pytest.raises(ValueError, match="negative"):
        ooc.MemoryBudget("-1GiB")


def test_the_parser_is_public():
    assert gp.parse_size is parse_size
    assert "parse_size" in gp.__all__
