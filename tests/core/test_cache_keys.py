"""Cache and content keys: a hit only for an input equal in content."""

import threading

import numpy as np
import pytest

import gradpipe as gp
from gradpipe import Cache, Lambda, Operator, content_key


class Counting(Operator):
    def __init__(self, offset: float = 0.0):
        self.offset = offset
        self.calls = 0

    def _apply(self, *args, **kwargs):
        self.calls += 1
        return (repr(args), repr(kwargs), self.offset)


@pytest.mark.parametrize(
    "a, b",
    [
        (1, 1.0),
        (1, True),
        (1.0, True),
        (-1, -2),
        (0.0, -0.0),
        ((1, 2), [1, 2]),
        ({"a": 1, "b": 2}, {"a": 2, "b": 1}),
        ({"a": 1}, {"b": 1}),
        (np.arange(4, dtype=np.int64), np.arange(4, dtype=np.int64).reshape(2, 2)),
        (np.zeros(4, np.float32), np.zeros(4, np.int32)),
        (np.arange(6.0), np.arange(6.0)[::-1]),
        (np.float32(1.0), np.float64(1.0)),
        (np.float32(1.0), 1.0),
        ("1", 1),
        (b"x", "x"),
        (None, 0),
        (np.array(1.0), np.array([1.0])),
        (np.array(7, np.int64), np.array([[7]], np.int64)),
        (
            np.zeros(2, [("a", "<f8"), ("b", "<i8")]),
            np.zeros(2, [("b", "<i8"), ("a", "<f8")]),
        ),
    ],
)
def test_distinct_contents_have_distinct_keys(a, b):
    assert content_key(a) != content_key(b)


def test_equal_contents_share_a_key():
    assert content_key(float("nan")) == content_key(float("nan"))
    big = np.random.default_rng(0).normal(size=100_000)
    assert content_key({"x": (big, [1, "a"])}) == content_key({"x": (big.copy(), [1, "a"])})


def test_large_arrays_differing_in_the_middle_differ():
    a = np.zeros(1_000_000)
    b = a.copy()
    b[500_000] = 1.0
    assert content_key(a) != content_key(b)


def test_masked_arrays_are_keyed_with_their_mask():
    cache = Cache(Lambda(lambda x: float(x.mean())))
    assert cache(np.ma.array([1.0, 2.0, 3.0], mask=[0, 0, 1])) == 1.5
    assert cache(np.ma.array([1.0, 2.0, 3.0], mask=[0, 0, 0])) == 2.0


def test_other_array_likes_are_refused():
    class Labelled:  # like an xarray DataArray: values plus labels a step may read
        def __init__(self, values, units):
            self.values, self.units = np.asarray(values), units
            self.dtype, self.shape = self.values.dtype, self.values.shape

        def __array__(self, dtype=None, copy=None):
            return self.values

    with pytest.raises(gp.UnkeyableError, match=r"array-like.*np\.asarray"):
        content_key(Labelled([1.0], "m"))
    with pytest.raises(TypeError, match="Cache cannot key"):
        Cache(Lambda(lambda x: x.units))(Labelled([1.0], "m"))


def test_unkeyable_values_are_refused():
    with pytest.raises(gp.UnkeyableError, match="object has no content key"):
        content_key(object())
    cache = Cache(Counting())
    with pytest.raises(TypeError, match="Cache cannot key"):
        cache({1, 2})


def test_cache_tells_a_0d_array_from_a_one_element_array():
    cache = Cache(Lambda(lambda x: x.shape))
    assert cache(np.array(1.0)) == ()
    assert cache(np.array([1.0])) == (1,)


def test_cache_hits_and_misses_on_whole_input():
    inner = Counting()
    cache = Cache(inner)
    x = np.arange(3.0)
    cache(x, scale=2)
    cache(x.copy(), scale=2)
    cache(x, scale=3)
    cache((x, {"k": 1}))
    cache((x, {"k": 1.0}))
    assert inner.calls == 4
    assert cache.info() == {"hits": 1, "misses": 4, "size": 4, "maxsize": 128}


def test_cache_is_bounded_lru():
    inner = Counting()
    cache = Cache(inner, maxsize=2)
    cache(1)
    cache(2)
    cache(1)  # 1 is now most recent
    cache(3)  # evicts 2
    cache(1)
    assert inner.calls == 3
    cache(2)
    assert inner.calls == 4
    assert len(cache) == 2


def test_cache_keys_on_inner_config():
    inner = Counting(offset=1.0)
    cache = Cache(inner)
    first = cache(5)
    inner.offset = 2.0
    second = cache(5)
    assert first[2] == 1.0 and second[2] == 2.0


def test_cache_keys_on_the_order_of_inner_config_dicts():
    class Ordered(Operator):
        def __init__(self, weights: dict):
            self.weights = weights

        def _apply(self, x):
            return [w * x for w in self.weights.values()]

    inner = Ordered({"b": 1.0, "a": 2.0})
    cache = Cache(inner)
    assert cache(1.0) == [1.0, 2.0]
    inner.weights = {"a": 2.0, "b": 1.0}
    assert cache(1.0) == [2.0, 1.0]


def test_cached_arrays_are_read_only():
    cache = Cache(Lambda(lambda x: x * 2))
    out = cache(np.arange(3.0))
    with pytest.raises(ValueError, match="read-only"):
        out[0] = 100.0
    np.testing.assert_array_equal(cache(np.arange(3.0)), [0.0, 2.0, 4.0])


def test_cache_accepts_numpy_scalar_outputs():
    cache = Cache(Lambda(lambda x: x.sum()))
    assert cache(np.arange(3.0)) == 3.0
    assert cache(np.arange(3.0)) == 3.0
    assert cache.info()["hits"] == 1


def test_writing_into_the_input_does_not_change_later_hits():
    cache = Cache(Lambda(lambda x: x[1:]))
    x = np.array([1.0, 2.0, 3.0])
    cache(x)
    x[1] = 99.0  # the inner output was a view of x
    np.testing.assert_array_equal(cache(np.array([1.0, 2.0, 3.0])), [2.0, 3.0])
    identity = Cache(Lambda(lambda x: x))
    y = np.zeros(2)
    identity(y)
    y[0] = 1.0  # the caller's own array stays writeable
    np.testing.assert_array_equal(identity(np.zeros(2)), [0.0, 0.0])


def test_mutating_a_returned_container_does_not_change_later_hits():
    cache = Cache(Lambda(lambda x: {"parts": [x, 2 * x]}))
    first = cache(1.0)
    first["parts"].append(3.0)
    first["extra"] = 0
    assert cache(1.0) == {"parts": [1.0, 2.0]}


def test_cache_is_thread_safe():
    cache = Cache(Lambda(lambda x: x * 2), maxsize=8)
    errors = []

    def work(seed):
        rng = np.random.default_rng(seed)
        for _ in range(200):
            i = int(rng.integers(0, 16))
            if cache(np.array([i], dtype=np.int64))[0] != 2 * i:
                errors.append(i)

    threads = [threading.Thread(target=work, args=(s,)) for s in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert cache.hits + cache.misses == 1600


def test_bad_cache_arguments():
    with pytest.raises(ValueError, match="maxsize"):
        Cache(Counting(), maxsize=0)
    with pytest.raises(TypeError, match="must be an Operator"):
        Cache(lambda x: x)


def test_replacing_the_inner_operator_never_hits_its_entries():
    # A JAX operator's configuration holds only its arrays' shapes: retrained
    # weights of the same shape must not hit the old weights' entries.
    jax = pytest.importorskip("jax")
    from gradpipe.jax import JaxOperator

    class Scale(JaxOperator):
        factor: jax.Array

        def _apply(self, x):
            return self.factor * x

    cache = Cache(Scale(jax.numpy.asarray([1.0])))
    np.testing.assert_array_equal(cache(np.ones(1)), [1.0])
    cache.inner = Scale(jax.numpy.asarray([5.0]))
    np.testing.assert_array_equal(cache(np.ones(1)), [5.0])
    cache.inner = Lambda(lambda x: x + 100)
    np.testing.assert_array_equal(cache(np.ones(1)), [101.0])


def test_complex_scalars_are_keyed_by_both_parts():
    assert content_key(1 + 2j) != content_key(1 + 3j)
    assert content_key(complex(0.0, -0.0)) != content_key(complex(0.0, 0.0))
    cache = gp.Cache(gp.Lambda(lambda z: z.imag))
    assert [cache(1 + 2j), cache(1 + 3j)] == [2.0, 3.0]


def test_writing_into_a_hit_does_not_change_later_hits():
    cache = gp.Cache(gp.Lambda(lambda x: {"values": [x, x + 1], "pair": (x,)}))
    cache(1)  # miss
    hit = cache(1)
    hit["values"].append(99)
    hit["extra"] = True
    again = cache(1)
    assert again == {"values": [1, 2], "pair": (1,)}
    assert cache.info()["hits"] == 2


def test_an_object_array_is_refused_by_name():
    with pytest.raises(gp.UnkeyableError, match="object-dtype"):
        content_key(np.array([1, "a"], dtype=object))
    with pytest.raises(TypeError, match=r"Cache cannot key this input.*object-dtype"):
        Cache(Lambda(len))(np.array([None, 1], dtype=object))


def test_a_namedtuple_output_does_not_share_memory_with_the_input():
    from collections import namedtuple

    Pair = namedtuple("Pair", "left right")
    cache = Cache(Lambda(lambda x: Pair(x, x[1:]), name="pair"))
    x = np.arange(4.0)
    first = cache(x)
    x[:] = -1.0  # the caller reuses its buffer; the key still holds the old content
    hit = cache(np.arange(4.0))
    assert isinstance(hit, Pair)
    np.testing.assert_array_equal(hit.left, np.arange(4.0))
    np.testing.assert_array_equal(hit.right, np.arange(1.0, 4.0))
    assert first.left is not x


# -- parameters changed in place anywhere in the cached pipeline ---------------------


class Scale(Operator):
    def __init__(self, factor: float):
        self.factor = factor

    def _apply(self, x):
        return self.factor * x


def _beside_a_lambda(scale):
    return scale | Lambda(lambda y: y + 0.0)


def _in_a_fanout_beside_a_lambda(scale):
    return gp.Fanout({"scaled": Lambda(abs) | scale, "raw": Lambda(abs)}) | Lambda(
        lambda parts: parts["scaled"]
    )


def _in_a_graph_beside_a_lambda(scale):
    x = gp.Input("x")
    return gp.Graph(inputs=[x], outputs=Lambda(lambda y: y + 0.0)(scale(x)))


def _inside_a_profiled_step(scale):
    return gp.Profile().wrap(Lambda(abs) | scale)


@pytest.mark.parametrize(
    "build",
    [
        _beside_a_lambda,
        _in_a_fanout_beside_a_lambda,
        _in_a_graph_beside_a_lambda,
        _inside_a_profiled_step,
    ],
)
def test_a_parameter_changed_in_place_is_seen_beside_unsaveable_steps(build):
    scale = Scale(2.0)
    pipeline = build(scale)
    cached = Cache(pipeline)
    assert cached(3.0) == 6.0
    scale.factor = 3.0
    assert pipeline(3.0) == 9.0
    assert cached(3.0) == 9.0
    scale.factor = 2.0  # back to the first configuration: its entry is still good
    assert cached(3.0) == 6.0
    assert cached.info()["hits"] == 1


def test_a_step_replaced_in_a_pipeline_is_seen():
    pipeline = Scale(2.0) | Lambda(lambda y: y + 1.0)
    cached = Cache(pipeline)
    assert cached(3.0) == 7.0
    pipeline.operators[1] = Lambda(lambda y: y - 1.0)
    assert cached(3.0) == 5.0


def test_an_array_parameter_written_in_place_is_seen():
    class Weighted(Operator):
        def __init__(self, weights: np.ndarray):
            self.weights = weights

        def _apply(self, x):
            return float(self.weights @ x)

    step = Weighted(np.array([1.0, 1.0]))
    cached = Cache(step)
    assert cached(np.ones(2)) == 2.0
    step.weights[0] = 10.0
    assert cached(np.ones(2)) == 11.0
