"""Outputs are independent values: no two outputs of a run share memory, and no output
aliases a constant or a feed (views before their base, with and without ``optimize``); a
constant is truly frozen; feeds are checked where they enter (duplicates, ambiguous names,
complex values, ragged lists)."""

import numpy as np
import pytest

import course_lib as cl
from conftest import shares_memory
from course_lib.errors import FeedError


def _assert_independent(results, feeds):
    for k, a in enumerate(results):
        for b in results[k + 1:]:
            assert not shares_memory(a, b)
        for f in feeds:
            assert not shares_memory(a, f)


def _views_then_bases(y):
    return {
        "row, base": [y[0], y],
        "reshape, base": [cl.reshape(y, (3, 2)), y],
        "transpose, base, row": [cl.transpose(y), y, y[1]],
        "base, row": [y, y[0]],
        "two rows": [y[0], y[1]],
        "bool index, base": [y[True], y],
        "empty slice, base": [y[:, 3:], y],
        "same node twice": [y, y],
        "row of a result, result": [(y * 2.0)[0], y * 2.0],
        "cast to its own dtype, row": [cl.cast(y, np.float64), y[0]],  # the feed itself
        "cast, base": [cl.cast(y, np.float64), y],
    }


CASES = list(_views_then_bases(cl.variable("y", (2, 3), np.float64)))


@pytest.mark.parametrize("optimize", [False, True])
@pytest.mark.parametrize("case", CASES)
def test_no_output_shares_memory_with_another_or_a_feed(case, optimize):
    y = cl.variable("y", (2, 3), np.float64)
    outputs = _views_then_bases(y)[case]
    # fed on the device: on a GPU an output could alias it (a host array is copied there)
    fed = cl.to_device(np.array([[1.0, np.nan, -0.0], [np.inf, -np.inf, 0.0]]))
    results = cl.Executor(outputs, optimize=optimize).run({y: fed})
    want = [r.copy() for r in map(cl.to_numpy, results)]
    _assert_independent(results, [fed])
    for r in results:  # writing any output (or the feed) changes no other
        if r.size:
            r[...] = -5.0
    fed[...] = 7.0
    for r, w in zip(results[:1], want[:1]):
        np.testing.assert_array_equal(cl.to_numpy(r), np.full_like(w, -5.0))
    again = cl.Executor(outputs, optimize=optimize).run({y: np.ones((2, 3))})
    before = cl.to_numpy(again[0]).copy()
    again[-1][...] = 9.0  # the base, written after the view came out
    np.testing.assert_array_equal(cl.to_numpy(again[0]), before)


def test_a_cast_to_the_dtype_it_has_copies_nothing():
    """Inside a run a cast to the array's own dtype (the gradients' cast to their parameter's
    dtype) is the array itself; to another dtype, a new array."""
    from course_lib.ops.elementwise import Cast  # noqa: PLC0415

    x = np.asfortranarray(np.ones((3, 4), np.float32))  # any layout: F-ordered here
    assert Cast(np.float32).compute(np, x) is x
    wider = Cast(np.float64).compute(np, x)
    assert wider.dtype == np.float64 and not np.shares_memory(wider, x)


@pytest.mark.parametrize("value", [np.ones((2, 3)), np.array(2.5), np.zeros((0, 3)),
                                   np.array([True, False]), np.float64(1.5)])  # fmt: skip
def test_a_constant_cannot_be_made_writable_through_a_result(value):
    c = cl.constant(value)
    for node in (c, cl.reshape(c, (-1,)) if np.ndim(value) else c):
        result = cl.to_numpy(cl.evaluate(node))
        try:  # a copy may be made writable; the constant's own memory may not
            result.flags.writeable = True
            result[...] = 0
        except ValueError:
            continue
    np.testing.assert_array_equal(c.op.value, value)
    with pytest.raises(ValueError):
        c.op.value.flags.writeable = True
    if c.op.value.base is not None:
        with pytest.raises(ValueError):
            c.op.value.base.flags.writeable = True


def test_a_constant_copies_its_input_in_c_order():
    source = np.arange(6.0).reshape(2, 3).T
    c = cl.constant(source)
    source[0, 0] = 99.0
    np.testing.assert_array_equal(c.op.value, np.arange(6.0).reshape(2, 3).T)


def test_tensor_data_cannot_be_made_writable():
    t = cl.Tensor(np.ones(3), requires_grad=True)
    data = t.data
    if isinstance(data, np.ndarray):
        with pytest.raises(ValueError):
            data.flags.writeable = True
    (t * t).sum().backward()
    np.testing.assert_array_equal(cl.to_numpy(t.grad.data), [2.0, 2.0, 2.0])


def test_a_variable_fed_twice_is_refused():
    x = cl.variable("x", (3,))
    with pytest.raises(FeedError, match="fed twice"):
        cl.evaluate(x, {x: np.ones(3), "x": np.zeros(3)})


def test_a_name_two_variables_share_is_ambiguous():
    x1, x2 = cl.variable("x", (3,)), cl.variable("x", (3,))
    with pytest.raises(FeedError, match="several variables"):
        cl.evaluate(x1 + x2, {"x": np.ones(3)})
    both = cl.evaluate(x1 + x2, {x1: np.ones(3), x2: np.ones(3)})
    np.testing.assert_array_equal(cl.to_numpy(both), 2.0)


@pytest.mark.parametrize(("feed", "match"), [
    (np.ones(3) + 1j, "complex"), ([[1.0, 2.0], [3.0]], "not an array of numbers"),
    (np.array(["a", "b", "c"]), "<U1"), (np.array([None] * 3), "object"),
])  # fmt: skip
def test_feeds_that_are_not_real_numbers_are_refused(feed, match):
    x = cl.variable("x")
    with pytest.raises(FeedError, match=match):
        cl.evaluate(x * 1.0, {x: feed})


def test_a_feed_that_is_not_a_mapping_is_refused_clearly():
    x = cl.variable("x", (3,))
    with pytest.raises(FeedError, match="takes a dict"):
        cl.Executor(x).run([np.ones(3)])
    with pytest.raises(FeedError, match="is the node"):
        cl.evaluate(x, {x: x})
