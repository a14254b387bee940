"""Review 11 of StridedView, with NumPy as the oracle: random layouts (negative, zero and huge
strides, offsets, empty axes) against ``as_strided`` of the buffer, which element each view
element aliases, reshape-without-copy decisions, slicing bounds, sliding windows; and
``from_numpy`` of arrays it refused or crashed on."""

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from numpy.lib.stride_tricks import as_strided, sliding_window_view
from test_strides import _prime_factors

from course_lib.errors import ShapeError
from course_lib.strides import OutOfBoundsError, StridedView

MANY = settings(max_examples=300, suppress_health_check=list(HealthCheck))


def _reach(shape, strides, offset):
    low = offset + sum(min(0, s * (n - 1)) for n, s in zip(shape, strides))
    return low, offset + sum(max(0, s * (n - 1)) for n, s in zip(shape, strides))


def _oracle(buffer, shape, strides, offset):
    start = buffer[offset:] if 0 <= offset < len(buffer) else buffer[:0]
    return as_strided(start, shape=shape, strides=[s * buffer.itemsize for s in strides])


@st.composite
def layouts(draw):
    """A buffer length, and a shape, strides and offset that may or may not fit in it."""
    ndim = draw(st.integers(0, 3))
    shape = tuple(draw(st.integers(0, 4)) for _ in range(ndim))
    stride = st.one_of(st.integers(-7, 7), st.sampled_from([2**40, -(2**40)]))
    strides = tuple(draw(stride) for _ in range(ndim))
    return draw(st.integers(0, 30)), shape, strides, draw(st.integers(-4, 34))


@st.composite
def slices(draw, n):
    bound = st.one_of(st.none(), st.integers(-n - 3, n + 3), st.sampled_from([2**70, -(2**70)]))
    step = st.one_of(st.none(), st.integers(-4, 4).filter(bool))
    return slice(draw(bound), draw(bound), draw(step))


@MANY
@given(layout=layouts(), data=st.data())
def test_random_layouts_read_and_alias_what_as_strided_does(layout, data):
    n, shape, strides, offset = layout
    buffer = np.arange(n, dtype=np.float64)
    low, high = _reach(shape, strides, offset)
    fits = 0 in shape or (low >= 0 and high < n)
    try:
        view = StridedView(buffer, shape, strides, offset)
    except OutOfBoundsError as error:
        assert not fits
        for part in (f"shape {shape}", f"strides {strides}", f"offset {offset}", f"{n} element"):
            assert part in str(error)
        return
    assert fits
    index = (..., *(data.draw(slices(k), label="slice") for k in shape))  # always a view
    expected, got = _oracle(buffer, shape, strides, offset)[index], view[index]
    np.testing.assert_array_equal(got.to_numpy(), expected)
    offsets = got.element_offsets()
    assert got.overlaps() == (np.unique(offsets).size < offsets.size)
    if expected.size and not got.overlaps():  # write through both: the same elements change
        ours, theirs = buffer.copy(), buffer.copy()
        StridedView(ours, shape, strides, offset)[index].to_numpy()[...] = -1
        _oracle(theirs, shape, strides, offset)[index][...] = -1
        np.testing.assert_array_equal(ours, theirs)


@MANY
@given(axes=st.lists(st.tuples(st.integers(1, 4), st.integers(-9, 9)), max_size=4), data=st.data())
def test_reshape_copies_exactly_when_numpy_does(axes, data):
    shape, strides = tuple(n for n, _ in axes), tuple(s for _, s in axes)
    low, high = _reach(shape, strides, 0)
    view = StridedView(np.arange(high - low + 1.0), shape, strides, -low)
    array = view.to_numpy()
    factors = list(data.draw(st.permutations(_prime_factors(view.size)), label="factors"))
    cuts = sorted(data.draw(st.sets(st.integers(1, max(1, len(factors) - 1))), label="cuts"))
    new = tuple(math.prod(factors[a:b]) for a, b in zip([0, *cuts], [*cuts, len(factors)]))
    reshaped = array.reshape(new)
    if not np.shares_memory(reshaped, view.buffer):
        with pytest.raises(ShapeError, match="needs a copy"):
            view.reshape(new)
        return
    got = view.reshape(new)
    assert got.byte_strides == reshaped.strides
    np.testing.assert_array_equal(got.to_numpy(), reshaped)


@MANY
@given(c=st.integers(1, 3), h=st.integers(1, 6), w=st.integers(1, 6), k=st.integers(1, 3))
def test_sliding_windows_are_numpys_and_read_only_where_they_overlap(c, h, w, k):
    if k > min(h, w):
        return
    buffer = np.arange(c * h * w, dtype=np.float32)
    windows = StridedView(buffer, (h - k + 1, w - k + 1, c, k, k), (w, 1, h * w, w, 1))
    expected = sliding_window_view(buffer.reshape(c, h, w), (k, k), axis=(1, 2))
    shown, offsets = windows.to_numpy(), windows.element_offsets()
    np.testing.assert_array_equal(shown, expected.transpose(1, 2, 0, 3, 4))
    assert shown.flags.writeable == (np.unique(offsets).size == offsets.size)


def test_from_numpy_ignores_strides_that_are_never_taken():
    """A stride on an axis of length 1 that splits elements was refused, and the advice,
    numpy.ascontiguousarray, returns the very same (C-contiguous) array."""
    array = np.arange(18, dtype=np.uint8).reshape(2, 9)[:1, 1:].view(np.float64)
    assert array.strides == (9, 8) and np.ascontiguousarray(array) is array
    view = StridedView.from_numpy(array)
    np.testing.assert_array_equal(view.to_numpy(), array)
    assert np.shares_memory(view.to_numpy(), array) and view.is_contiguous()
    empty = np.zeros((3, 9), np.uint8)[:0, 1:].view(np.float64)  # (0, 1), byte strides (9, 8)
    assert StridedView.from_numpy(empty).to_numpy().shape == (0, 1)
    with pytest.raises(ShapeError, match="not multiples of the itemsize"):  # taken: refused
        StridedView.from_numpy(as_strided(np.zeros(8), shape=(2,), strides=(12,)))


@pytest.mark.parametrize("field", ["a", "b"])
def test_from_numpy_refuses_fields_next_to_object_references(field):
    """NumPy's TypeError 'Cannot change data-type for array of references' escaped."""
    records = np.zeros(3, dtype=[("a", object), ("b", np.float64)])
    with pytest.raises(ShapeError, match=r"from_numpy: .*structured array.*array\.copy\(\)"):
        StridedView.from_numpy(records[field])
    view = StridedView.from_numpy(records[field].copy())
    np.testing.assert_array_equal(view.to_numpy(), records[field])


def test_errors_on_empty_axes_and_buffers_say_something_possible():
    """'use -0 <= index < 0' and 'the buffer has 0 elements (0..-1)' named impossible ranges."""
    with pytest.raises(OutOfBoundsError, match="length 0 .*an empty axis has no index") as error:
        StridedView(np.arange(3.0), (0, 2))[0]
    assert "-0" not in str(error.value)
    with pytest.raises(OutOfBoundsError, match=r"the buffer has 0 elements; make") as error:
        StridedView(np.arange(0.0), (1,))
    assert "..-1" not in str(error.value)
