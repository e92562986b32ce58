"""Input the caller did not mean is refused, naming the field: unknown fields at any
depth, casts that change a value, static values pydantic would coerce. Each refusal
has an opt-out (``extra="ignore"``, ``casting="unchecked"``) that restores the lax
behaviour."""

import enum
import warnings

import hypothesis.strategies as st
import jax.numpy as jnp
import numpy as np
import pydantic
import pytest
from hypothesis import given, settings
from hypothesis.extra import numpy as hnp

from gradpipe.component import Array, Component, ComponentInputError, Differentiable


class Mode(enum.Enum):
    fast = "fast"


class Layer(pydantic.BaseModel):
    w: Differentiable[Array[np.float32, (None,)]]
    lr: float = 0.1


class In(pydantic.BaseModel):
    x: Differentiable[Array[np.float32, (None,)]]
    layers: list[Layer] = []
    bands: dict[str, Layer] = {}
    opt: Layer | None = None
    n: int = 1
    scale: float = 1.0
    on: bool = False
    pair: tuple[int, int] = (0, 0)
    mode: Mode = Mode.fast


class Out(pydantic.BaseModel):
    y: Differentiable[Array[np.float32, (None,)]]


def forward(d):
    extra = sum(jnp.sum(layer["w"]) * layer["lr"] for layer in d["layers"])
    return {"y": d["x"] * d["n"] * d["scale"] + extra}


def make(**options):
    return Component(forward, inputs=In, outputs=Out, **options)


X = [1.0, 2.0]
W = {"w": [1.0]}


# -- unknown fields ------------------------------------------------------------------


@pytest.mark.parametrize(
    "inputs, path",
    [
        ({"x": X, "nn": 2}, "nn"),
        ({"x": X, "layers": [W, {"w": [1.0], "lrr": 0.5}]}, "layers[1].lrr"),
        ({"x": X, "bands": {"red": {"w": [1.0], "lr ": 0.5}}}, "bands[red].lr "),
        ({"x": X, "opt": {"w": [1.0], "LR": 0.5}}, "opt.LR"),
    ],
)
def test_an_unknown_field_is_refused_by_its_path(inputs, path):
    comp = make()
    with pytest.raises(ComponentInputError) as info:
        comp.apply(inputs)
    assert info.value.path == path
    assert "extra='ignore'" in str(info.value)
    with pytest.raises(ComponentInputError, match="not a field"):
        comp.vjp(inputs, ["x"], ["y"], {"y": [1.0, 1.0]})


def test_a_misspelled_field_names_the_close_one():
    with pytest.raises(ComponentInputError, match="Did you mean 'lr'"):
        make().apply({"x": X, "layers": [{"w": [1.0], "lrr": 0.5}]})


def test_unknown_fields_are_refused_by_abstract_eval():
    with pytest.raises(ComponentInputError) as info:
        make().abstract_eval({"x": {"shape": [2], "dtype": "float32"}, "scael": 2.0})
    assert info.value.path == "scael"


def test_extra_ignore_drops_unknown_fields():
    out = make(extra="ignore").apply({"x": X, "layers": [{"w": [1.0], "lrr": 5.0}], "nn": 3})
    np.testing.assert_allclose(out["y"], [1.1, 2.1])


def test_a_model_that_sets_extra_itself_is_taken_at_its_word():
    class Lenient(pydantic.BaseModel):
        model_config = pydantic.ConfigDict(extra="ignore")
        x: Differentiable[Array[np.float32, (None,)]]

    comp = Component(lambda d: {"y": d["x"]}, inputs=Lenient, outputs=Out)
    np.testing.assert_allclose(comp.apply({"x": X, "other": 1})["y"], X)


def test_bad_options_are_refused():
    with pytest.raises(ValueError, match="extra="):
        make(extra="allow")
    with pytest.raises(ValueError, match="casting="):
        make(casting="unsafe")


# -- array casts: the table of the components guide ---------------------------------


def identity(dtype, **options):
    """A component passing one array field ``v`` of ``dtype`` through as ``y``."""

    class In1(pydantic.BaseModel):
        v: Array[dtype, (None,)]

    class Out1(pydantic.BaseModel):
        y: Array[dtype, (None,)]

    return Component(lambda d: {"y": d["v"]}, inputs=In1, outputs=Out1, **options)


ACCEPTED = [
    # (field dtype, value given, value received)
    (np.float32, np.array([1.5, -2.0]), [1.5, -2.0]),
    (np.float32, np.array([1e-50]), [0.0]),  # rounds to the nearest float32
    (np.float32, np.array([np.nan, np.inf, -np.inf]), [np.nan, np.inf, -np.inf]),
    (np.float32, [1, 2], [1.0, 2.0]),
    (np.float32, np.array([16777217]), [16777216.0]),  # rounds to the nearest float32
    (np.float16, [65504], [65504.0]),
    (jnp.bfloat16, np.array([1.5, 3e38]), np.array([1.5, 3e38]).astype(jnp.bfloat16)),
    (np.float16, np.array([65519.0]), [65504.0]),  # rounds down to the largest finite
    (np.uint8, [0, 255], [0, 255]),
    (np.uint8, np.array([3], np.int64), [3]),
    (np.int8, [-128, 127], [-128, 127]),
    (np.int32, np.array([7], np.uint64), [7]),
    (np.bool_, [True, False], [True, False]),
    (np.complex64, [1.5], [1.5 + 0j]),
    (np.complex64, np.array([1 + 2j]), [1 + 2j]),
]

REFUSED = [
    # (field dtype, value given, words of the refusal)
    (np.float32, np.array([1e40]), "beyond the range of float32"),
    (np.float32, np.array([-1e40, 1.0]), "beyond the range"),
    (np.float16, [70000], "beyond the range of float16"),
    (jnp.bfloat16, np.array([1e39]), "beyond the range of bfloat16"),
    (np.float16, np.array([65520.0]), "beyond the range of float16"),
    (np.complex64, np.array([1e40j]), "beyond the range"),
    (np.uint8, [-1], "do not fit in uint8"),
    (np.uint8, [256], "do not fit in uint8"),
    (np.int8, [300], "do not fit in int8"),
    (np.uint32, np.array([2**63], np.uint64), "do not fit in uint32"),
    (np.int32, [1.5], "truncated"),
    (np.int32, [1.0], "truncated"),
    (np.int32, [np.nan], "truncated"),
    (np.float32, np.array([1 + 1j]), "imaginary part"),
    (np.float32, [True, False], "bool is not a number"),
    (np.int32, np.array([True]), "bool is not a number"),
    (np.float32, [1.0, True], "mixes true/false"),
    (np.bool_, [0, 1], "only bool values"),
    (np.float32, ["1.5"], "expected numbers"),
    (np.float32, [10**30], "expected numbers"),
]


@pytest.mark.parametrize("dtype, value, received", ACCEPTED)
def test_accepted_casts_keep_the_value(dtype, value, received):
    comp = identity(dtype)
    out = np.asarray(comp.apply({"v": value})["y"])
    assert out.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(out, np.asarray(received, dtype))


@pytest.mark.parametrize("dtype, value, words", REFUSED)
def test_refused_casts_name_the_field(dtype, value, words):
    comp = identity(dtype)
    with pytest.raises(ComponentInputError, match=words) as info:
        comp.apply({"v": value})
    assert info.value.path == "v"


def test_casting_unchecked_casts_as_numpy_does():
    comp = identity(np.float32, casting="unchecked")
    np.testing.assert_array_equal(comp.apply({"v": np.array([1e40, 1.0])})["y"], [np.inf, 1.0])
    comp = identity(np.uint8, casting="unchecked")
    np.testing.assert_array_equal(comp.apply({"v": [-1, 2.7]})["y"], [255, 2])


def test_jax_arrays_are_checked_on_their_device():
    comp = identity(np.int8)
    with pytest.raises(ComponentInputError, match="do not fit in int8"):
        comp.apply({"v": jnp.array([1000], jnp.int32)})
    np.testing.assert_array_equal(comp.apply({"v": jnp.array([100], jnp.int32)})["y"], [100])


SOURCES = [np.bool_, np.uint8, np.uint16, np.int8, np.int32, np.int64, np.float16]
SOURCES += [np.float32, np.float64, np.complex64]
TARGETS = [np.bool_, np.uint8, np.int8, np.int16, np.uint32, np.float16, np.float32]
TARGETS += [np.complex64]


@settings(max_examples=150, deadline=None)
@given(
    st.sampled_from(SOURCES).flatmap(
        lambda dt: (
            hnp.arrays(dt, st.integers(0, 4), elements={"allow_subnormal": False})
            if np.dtype(dt).kind in "fc"
            else hnp.arrays(dt, st.integers(0, 4))
        )
    ),
    st.sampled_from(TARGETS),
)
def test_a_cast_is_accepted_exactly_when_it_keeps_every_value(value, target):
    """The property behind the table: an accepted value arrives as NumPy's cast of
    it, with every integer unchanged and every finite number still finite (rounding
    aside); a refused one would have changed kind, wrapped or overflowed."""
    from gradpipe.component._schema import ArraySpec

    spec = ArraySpec(target, (None,))
    src, dst = value.dtype, np.dtype(target)
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # NumPy's complex-to-real warning
        cast = value.astype(dst)
    integers = src.kind in "biu" and dst.kind in "biu"
    kinds_ok = src == dst or (src.kind, dst.kind) in {
        ("u", "u"), ("u", "i"), ("i", "u"), ("i", "i"),
        ("u", "f"), ("i", "f"), ("f", "f"),
        ("u", "c"), ("i", "c"), ("f", "c"), ("c", "c"),
    }  # fmt: skip
    if integers:  # compared as Python ints: int8 -1 to uint8 round-trips, yet wraps
        values_ok = [int(v) for v in cast.ravel()] == [int(v) for v in value.ravel()]
    elif kinds_ok and value.size:
        parts = (value.real, value.imag) if src.kind == "c" else (value,)
        cparts = (cast.real, cast.imag) if dst.kind == "c" else (cast,)
        values_ok = all(
            np.array_equal(np.isfinite(p), np.isfinite(c)) for p, c in zip(parts, cparts)
        )
    else:
        values_ok = True
    try:
        out = spec.validate(value)
    except ValueError:
        assert not (kinds_ok and values_ok), (value, target)
        return
    assert kinds_ok and values_ok, (value, target, out)
    assert out.dtype == dst
    np.testing.assert_array_equal(out, cast)


# -- tangents and cotangents ------------------------------------------------------------


def test_tangents_and_cotangents_follow_the_casting_rules():
    comp = make()
    with pytest.raises(ComponentInputError, match="beyond the range") as info:
        comp.vjp({"x": X}, ["x"], ["y"], {"y": np.array([1e40, 1.0])})
    assert info.value.path == "y"
    with pytest.raises(ComponentInputError, match="bool is not a number"):
        comp.jvp({"x": X}, ["x"], ["y"], {"x": np.array([True, False])})
    out = comp.vjp({"x": X}, ["x"], ["y"], {"y": np.array([1.0, 2.0])})  # float64: rounded
    np.testing.assert_allclose(out["x"], [1.0, 2.0])


# -- static fields ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "field, value",
    [("n", "2"), ("n", 2.0), ("n", True), ("scale", "1.5"), ("scale", True), ("on", 1),
     ("on", "true"), ("pair", ["1", 2]), ("layers", [{"w": [1.0], "lr": "0.5"}])],
)  # fmt: skip
def test_static_values_pydantic_would_coerce_are_refused(field, value):
    with pytest.raises(ComponentInputError, match="would be coerced") as info:
        make().apply({"x": X, field: value})
    assert info.value.path.startswith(field)


@pytest.mark.parametrize(
    "field, value, seen",
    [("n", 3, 3), ("scale", 2, 2.0), ("pair", [1, 2], (1, 2)), ("mode", "fast", Mode.fast),
     ("n", np.int64(3), 3)],
)  # fmt: skip
def test_static_values_as_json_carries_them_are_accepted(field, value, seen):
    received = {}

    def fn(d):
        received.update(d)
        return {"y": d["x"]}

    Component(fn, inputs=In, outputs=Out).apply({"x": X, field: value})
    assert received[field] == seen


def test_casting_unchecked_coerces_static_values():
    out = make(casting="unchecked").apply({"x": X, "n": "2", "scale": True})
    np.testing.assert_allclose(out["y"], [2.0, 4.0])


def test_a_field_given_by_its_alias_is_known():
    class Aliased(pydantic.BaseModel):
        x: Differentiable[Array[np.float32, (None,)]] = pydantic.Field(alias="X")

    comp = Component(lambda d: {"y": d["x"]}, inputs=Aliased, outputs=Out)
    np.testing.assert_allclose(comp.apply({"X": X})["y"], X)
    with pytest.raises(ComponentInputError, match="'z' is not a field"):
        comp.apply({"X": X, "z": 1})


NAMES = st.text(st.sampled_from("abcdefghijklmnopqrstuvwxyz_"), min_size=1, max_size=8)


@settings(max_examples=60, deadline=None)
@given(
    where=st.sampled_from(["top", "layers[0]", "layers[1]", "bands[red]", "opt"]),
    name=NAMES.filter(lambda n: n not in In.model_fields and n not in Layer.model_fields),
)
def test_any_unknown_field_at_any_depth_is_refused_by_its_path(where, name):
    layers = [{"w": [1.0]}, {"w": [2.0], "lr": 0.5}]
    inputs = {"x": X, "layers": layers, "bands": {"red": {"w": [1.0]}}, "opt": {"w": [1.0]}}
    if where == "top":
        inputs[name], path = 1, name
    else:
        target = {
            "layers[0]": layers[0],
            "layers[1]": layers[1],
            "bands[red]": inputs["bands"]["red"],
            "opt": inputs["opt"],
        }[where]
        target[name], path = 1.0, f"{where}.{name}"
    with pytest.raises(ComponentInputError) as info:
        COMPONENT.apply(inputs)
    assert info.value.path == path


COMPONENT = make()
