"""Property tests: content keys and configuration round trips on generated values."""

import copy

from hypothesis import given, settings
from hypothesis import strategies as st

import gradpipe as gp
from gradpipe import content_key

scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text()
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.lists(inner, max_size=3).map(tuple)
        | st.dictionaries(st.text(max_size=3), inner, max_size=3)
    ),
    max_leaves=8,
)


def identical(a, b) -> bool:
    """Equal in content and type, floats compared by bits."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return a.hex() == b.hex()
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(identical(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return list(a) == list(b) and all(identical(a[k], b[k]) for k in a)
    return a == b


@settings(max_examples=300, deadline=None)
@given(values, values)
def test_keys_are_equal_exactly_for_identical_values(a, b):
    assert (content_key(a) == content_key(b)) == identical(a, b)


@settings(max_examples=300, deadline=None)
@given(values)
def test_key_of_a_deep_copy_is_equal(a):
    assert content_key(a) == content_key(copy.deepcopy(a))


class Holder(gp.Operator):
    def __init__(self, value):
        self.value = value

    def _apply(self, x):
        return x


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.lists(inner, max_size=3).map(tuple)
        | st.dictionaries(
            st.text(max_size=3).filter(lambda k: not k.startswith("$")), inner, max_size=3
        )
    ),
    max_leaves=8,
)


@settings(max_examples=300, deadline=None)
@given(json_values)
def test_configurations_round_trip_with_their_types(value):
    back = gp.Operator.from_json(Holder(value).to_json()).value
    assert identical(back, value)
    back = gp.Operator.from_yaml(Holder(value).to_yaml()).value
    assert identical(back, value)
