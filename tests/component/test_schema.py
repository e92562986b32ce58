"""Schema types, leaf specs, JSON schema, paths and content keys."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pydantic
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from nested_models import NestedIn, NestedOut

from gradpipe.component import (
    Array,
    Component,
    ComponentInputError,
    ContentKey,
    Differentiable,
    canonical_path,
)
from gradpipe.component._keys import StaticValue


class Shapes(pydantic.BaseModel):
    fixed: Array[np.float32, (2, 3)]
    free: Array[np.float32, (None, 3)]
    scalar: Array[np.float32, ()]
    anything: Array[np.int32, ...]
    tail: Array[np.float32, (..., 2)]
    flag: Array[np.bool_, (None,)]


GOOD = {
    "fixed": np.zeros((2, 3)),
    "free": [[1, 2, 3]],
    "scalar": 1.5,
    "anything": np.ones((2, 2, 2), np.int16),
    "tail": np.zeros((4, 5, 2), np.float32),
    "flag": [True, False],
}


def test_arrays_validate_shape_and_cast_up_only():
    model = Shapes.model_validate(GOOD)
    assert model.fixed.dtype == np.float32 and model.scalar.shape == ()
    assert model.anything.dtype == np.int32 and model.tail.shape == (4, 5, 2)
    assert Shapes.model_validate({**GOOD, "tail": np.zeros(2)}).tail.shape == (2,)
    on_device = Shapes.model_validate({**GOOD, "free": jnp.ones((5, 3), jnp.int32)}).free
    assert isinstance(on_device, jax.Array) and on_device.dtype == np.float32
    bad = [
        ("fixed", np.zeros((3, 2))),
        ("free", np.zeros((2, 4))),
        ("scalar", [1.0]),
        ("anything", np.ones(2, np.float32)),  # float to int would lose information
        ("tail", np.zeros((2, 3))),
        ("flag", [1, 0]),
        ("fixed", "text"),
    ]
    for field, value in bad:
        with pytest.raises(pydantic.ValidationError) as info:
            Shapes.model_validate({**GOOD, field: value})
        assert info.value.errors()[0]["loc"] == (field,)


def test_integers_that_do_not_fit_the_declared_dtype_are_refused():
    class Small(pydantic.BaseModel):
        pixels: Array[np.uint8, (None,)]
        counts: Array[np.int32, (None,)]

    wide = np.array([0, 255], np.uint16)
    ok = Small.model_validate({"pixels": wide, "counts": [-5, 7]})
    np.testing.assert_array_equal(ok.pixels, [0, 255])
    np.testing.assert_array_equal(ok.counts, [-5, 7])
    for field, value in [
        ("pixels", np.array([0, 300], np.uint16)),
        ("counts", [2**31]),
        ("counts", np.array([-(2**31) - 1], np.int64)),
        ("counts", jnp.array([2**31 - 1], jnp.uint32) + 1),
    ]:
        with pytest.raises(pydantic.ValidationError, match="do not fit") as info:
            Small.model_validate({"pixels": wide, "counts": [1], field: value})
        assert info.value.errors()[0]["loc"] == (field,)


def test_type_errors_at_definition():
    with pytest.raises(TypeError, match="Array"):
        Differentiable[int]
    with pytest.raises(TypeError, match="complex"):
        Differentiable[Array[np.complex64, (2,)]]
    with pytest.raises(TypeError, match="shape"):
        Array[np.float32, (3, "x")]
    with pytest.raises(TypeError, match="dtype"):
        Array[object, (3,)]
    with pytest.raises(TypeError, match="more than one"):
        Array[np.float32, (..., 3, ...)]

    class TupleOfArrays(pydantic.BaseModel):
        pair: tuple[Array[np.float32, ()], Array[np.float32, ()]]

    with pytest.raises(TypeError, match="pair"):
        Component(lambda d: d, inputs=TupleOfArrays, outputs=NestedOut)


def test_leaf_specs_and_json_schema():
    comp = Component(lambda d: d, inputs=NestedIn, outputs=NestedOut)
    specs = {s.path: s for s in comp.input_spec()}
    assert list(specs) == ["x", "layers[*].w", "layers[*].b", "table[*]", "k", "scale", "label"]
    assert specs["x"].shape == (None,) and specs["x"].differentiable
    assert specs["layers[*].b"].shape == () and specs["layers[*].b"].dtype == "float32"
    assert specs["scale"].kind == "static" and not specs["scale"].differentiable
    assert [s.path for s in comp.output_spec()] == ["y", "stats.s", "parts[*]", "count"]
    json.dumps([s.to_dict() for s in comp.input_spec()])
    schema = comp.input_model.model_json_schema()
    x = schema["properties"]["x"]
    assert x["x-dtype"] == "float32" and x["x-shape"] == [None] and x["x-differentiable"]
    layer = schema["$defs"]["Layer"]["properties"]
    assert layer["w"]["minItems"] == 3 and "x-differentiable" in layer["b"]
    assert schema["properties"]["k"]["x-dtype"] == "int32"
    assert "x-differentiable" not in schema["properties"]["scale"]
    json.dumps(comp.output_model.model_json_schema())
    dumped = comp.input_model.model_validate(
        {"x": [1.0], "layers": [], "table": {}, "k": [1, 2, 3], "scale": 1.0}
    ).model_dump_json()
    assert json.loads(dumped)["x"] == [1.0]


def test_paths_canonical_spelling():
    assert canonical_path("layers[0].w") == "layers[0].w"
    assert canonical_path('table["a"]') == "table[a]"
    assert canonical_path('table["a.b[0]"]') == 'table["a.b[0]"]'
    assert canonical_path('table[""]') == 'table[""]'
    assert canonical_path("table[b c]") == "table[b c]"
    for bad in ["", "0x", "a..b", "a[", "a[]", "a]b", ".a", 3]:
        with pytest.raises(ComponentInputError):
            canonical_path(bad)


def test_static_values_compare_by_type_and_bits():
    assert StaticValue(1) != StaticValue(1.0) != StaticValue(True)
    assert StaticValue(-1) != StaticValue(-2)
    assert StaticValue(0.0) != StaticValue(-0.0)
    assert StaticValue(float("nan")) == StaticValue(float("nan"))
    assert StaticValue([1, {"a": 2}]) == StaticValue([1, {"a": 2}])
    assert StaticValue([1, 2]) != StaticValue((1, 2))
    assert StaticValue(None) == StaticValue(None) != StaticValue("None")


def test_content_keys_compare_bits_dtype_shape():
    a = jnp.array([1.0, 2.0, 3.0, 4.0], jnp.float32)
    as_int = jax.lax.bitcast_convert_type(a, jnp.int32)
    assert ContentKey((), (a,)) == ContentKey((), (jnp.array(np.asarray(a)),))
    assert ContentKey((), (a,)) != ContentKey((), (as_int,))
    assert ContentKey((), (as_int,)) != ContentKey((), (as_int.reshape(2, 2),))
    assert ContentKey((), (a,)) != ContentKey((), (a[::-1],))
    assert ContentKey(("s", 1), (a,)) != ContentKey(("s", 2), (a,))
    z = jnp.zeros(3)
    assert ContentKey((), (z,)) != ContentKey((), (-z,))
    nan = jnp.array([jnp.nan, 1.0])
    assert ContentKey((), (nan,)) == ContentKey((), (jnp.array(np.asarray(nan)),))
    c = jnp.array([1 + 2j, 3 - 0j], jnp.complex64)
    assert ContentKey((), (c,)) != ContentKey((), (jnp.conj(c),))
    b = jnp.array([True, False])
    assert ContentKey((), (b,)) != ContentKey((), (~b,))


@settings(max_examples=60, deadline=None)
@given(
    a=hnp.arrays(
        st.sampled_from([np.float32, np.int32, np.uint8]),
        hnp.array_shapes(min_dims=0, max_dims=2, max_side=4),
    ),
    data=st.data(),
)
def test_content_keys_are_equal_exactly_when_the_bits_are(a, data):
    b = data.draw(
        st.one_of(
            st.just(a.copy()),
            hnp.arrays(a.dtype, a.shape),
            hnp.arrays(a.dtype, hnp.array_shapes(min_dims=0, max_dims=2, max_side=4)),
        )
    )
    same = a.shape == b.shape and a.tobytes() == b.tobytes()
    assert (ContentKey((), (jnp.asarray(a),)) == ContentKey((), (jnp.asarray(b),))) == same
