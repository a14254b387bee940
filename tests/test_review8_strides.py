"""StridedView edge cases a hostile review found, with NumPy as the oracle.

A slice of one element with a huge step, slices with step 0 or float bounds, booleans taken
as lengths or axes, axes and shapes given as NumPy arrays, ``reshape()`` with no shape,
copies and pickles, object arrays and elements of 0 bytes in ``from_numpy``.
"""

import copy
import pickle

import numpy as np
import pytest

from course_lib.errors import CourseLibError, GraphError, ShapeError
from course_lib.strides import StridedView


@pytest.mark.parametrize(
    "index", [slice(None, None, 2**62), slice(None, None, -(2**62)), slice(3, 4, 2**61)]
)
def test_a_slice_of_one_element_with_a_huge_step_is_that_element(index):
    """NumPy gives the one element; the view refused the stride step * 1 as unaddressable."""
    array = np.arange(5.0)
    got = StridedView(array, (5,))[index].to_numpy()
    np.testing.assert_array_equal(got, array[index])
    assert np.shares_memory(got, array)


def test_a_slice_with_step_0_names_the_axis_and_the_shape():
    with pytest.raises(ShapeError, match=r"axis 1 \(shape \(2, 3\)\) has step 0"):
        StridedView(np.arange(6.0), (2, 3))[:, ::0]


@pytest.mark.parametrize("index", [(slice(1.5, None),), (0, slice(None, "2"))])
def test_a_slice_with_bounds_that_are_no_integers_is_a_course_lib_type_error(index):
    with pytest.raises(GraphError, match=r"on axis \d \(shape \(2, 3\)\) needs integers or None"):
        StridedView(np.arange(6.0), (2, 3))[index]


def test_a_copying_index_is_a_course_lib_error():
    with pytest.raises(CourseLibError, match="not views"):
        StridedView(np.arange(6.0), (2, 3))[[0, 1]]


@pytest.mark.parametrize(
    ("action", "words"),
    [
        (lambda v: StridedView(v.buffer, (True, 6)), "shape must be integers"),
        (lambda v: StridedView(v.buffer, (6,), (True,)), "strides must be integers"),
        (lambda v: v.permute(True, False), "permute's axes must be integers"),
        (lambda v: v.reshape(True, 6), "reshape's shape must be integers"),
        (lambda v: v.broadcast_to((True, 2, 3)), "shape must be integers"),
        (lambda v: v.index_to_offset((True, False)), "index must be integers"),
    ],
)
def test_booleans_are_not_lengths_strides_or_axes(action, words):
    """NumPy refuses them (an integer is required); the view took True for 1."""
    with pytest.raises(ShapeError, match=words):
        action(StridedView(np.arange(6.0), (2, 3)))


def test_axes_and_shapes_may_be_numpy_arrays_as_in_numpy():
    array = np.arange(6.0).reshape(2, 3)
    view = StridedView.from_numpy(array)
    assert view.permute(np.array([1, 0])).strides == (1, 3)
    assert view.transpose(np.array([1, 0])).shape == array.transpose(np.array([1, 0])).shape
    reshaped = view.reshape(np.array([3, 2]))
    np.testing.assert_array_equal(reshaped.to_numpy(), array.reshape(np.array([3, 2])))


def test_reshape_without_a_shape_is_refused():
    """NumPy raises; the view of one element silently became 0-d."""
    view = StridedView(np.arange(1.0), (1, 1))
    with pytest.raises(ShapeError, match=r"reshape of shape \(1, 1\) needs a shape"):
        view.reshape()
    assert view.reshape(()).shape == ()


def test_views_can_be_copied_and_pickled():
    """Each raised 'StridedView is immutable (setting '_buffer' ...)'."""
    buffer = np.arange(12.0)
    view = StridedView(buffer, (3, 2), (-4, 2), 9)
    shallow, deep = copy.copy(view), copy.deepcopy(view)
    pickled = pickle.loads(pickle.dumps(view))
    for other in (shallow, deep, pickled):
        assert (other.shape, other.strides, other.offset) == ((3, 2), (-4, 2), 9)
        np.testing.assert_array_equal(other.to_numpy(), view.to_numpy())
    assert shallow.buffer is buffer
    assert not np.shares_memory(deep.buffer, buffer)


@pytest.mark.parametrize("take", [lambda a: a, lambda a: a[1:], lambda a: a[::-2]])
def test_from_numpy_takes_object_arrays(take):
    """Their memory cannot be viewed as bytes: NumPy's TypeError escaped."""
    array = take(np.array([1, "a", None, 2.5], dtype=object))
    view = StridedView.from_numpy(array)
    np.testing.assert_array_equal(view.to_numpy(), array)
    assert np.shares_memory(view.to_numpy(), array)


def test_from_numpy_refuses_elements_of_0_bytes_clearly():
    """Strides in elements divide by the itemsize: a ZeroDivisionError escaped."""
    with pytest.raises(ShapeError, match="from_numpy: dtype .* elements of 0 bytes"):
        StridedView.from_numpy(np.empty(3, dtype=[]))
