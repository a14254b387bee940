"""Review 10 of notebook 05's exercise checks, with NumPy as the oracle: wrong answers that
passed (a sum in the wrong dtype, elements read relative to ``buffer[offset:]``, which wraps
around for negative strides, the library's own helpers), and the broadcasting hint."""

import numpy as np
import pytest
from exercise_notebooks import notebook_exercises, reference_answer

from course_lib.exercises import verify
from course_lib.exercises.strided_add import RESULT_SHAPE
from course_lib.ops.broadcast import broadcast_shapes
from course_lib.strides import _reshape_strides


def _adding(dtype=None, relative=False, larger=False):
    """add_views() with the result in ``dtype(a, b)`` (None: NumPy's), or reading each view's
    elements as ``buffer[offset:][i·strides]`` (a negative index wraps round to the end)."""

    def add_views(a, b):
        ndim = max(len(a.shape), len(b.shape))
        padded = [(1,) * (ndim - len(v.shape)) + v.shape for v in (a, b)]
        shape = []
        for m, n in zip(*padded):
            if m != n and 1 not in (m, n):
                raise ValueError(f"shapes {a.shape} and {b.shape} do not broadcast")
            shape.append(max(m, n) if larger else n if m == 1 else m)
        strides = [[0 if n == 1 and m != 1 else s
                    for n, m, s in zip(p, shape, (0,) * (ndim - len(v.shape)) + v.strides)]
                   for v, p in zip((a, b), padded)]  # fmt: skip
        out = np.empty(shape, dtype(a, b) if dtype else np.result_type(a.buffer, b.buffer))
        starts = [v.buffer[v.offset:] if relative else v.buffer for v in (a, b)]
        for index in np.ndindex(*shape):
            i, j = (sum(k * s for k, s in zip(index, st)) + (0 if relative else v.offset)
                    for v, st in zip((a, b), strides))  # fmt: skip
            out[index] = starts[0][i] + starts[1][j]
        return out

    return add_views


def test_the_add_views_helper_is_a_right_answer():
    verdict = verify("05.add_views", _adding())
    assert verdict.passed, verdict.message


@pytest.mark.parametrize(
    "dtype", [lambda a, b: np.float64, lambda a, b: a.buffer.dtype], ids=["float64", "as-a"]
)
def test_add_views_in_a_dtype_of_its_own_is_refused(dtype):
    """Every view held float64, and the dtype was only looked at when the values were wrong:
    np.empty(shape) (float64) or a's dtype passed, although NumPy sums int16 + int16 to int16
    and int16 + float32 to float32."""
    verdict = verify("05.add_views", _adding(dtype=dtype))
    assert verdict.status == "failed" and verdict.mistake == "dtype", verdict.message
    assert "NumPy's sum int16" in verdict.message or "NumPy's sum float32" in verdict.message


def test_add_views_reading_after_the_offset_fails_on_reversed_views():
    """No view had a negative stride, so buffer[offset:][i·stride] passed; with a[::-1] the
    index goes negative and Python reads from the end of the buffer."""
    verdict = verify("05.add_views", _adding(relative=True))
    assert verdict.status == "failed", verdict.message
    assert "strides (-" in verdict.message


def test_add_views_with_the_librarys_broadcast_shapes_is_refused():
    """NumPy's broadcast_shapes was refused, course_lib's own one passed."""
    right = _adding()

    def add_views(a, b):
        broadcast_shapes(a.shape, b.shape)  # raises ValueError when they do not broadcast
        return right(a, b)

    verdict = verify("05.add_views", add_views)
    assert verdict.status == "failed" and verdict.mistake == "uses-library", verdict.message


def test_can_view_with_the_librarys_reshape_helper_is_refused():
    """StridedView.reshape was refused, the helper that does its work passed."""

    def can_view(shape, strides, new_shape):
        return 0 in shape or _reshape_strides(shape, strides, new_shape) is not None

    verdict = verify("05.can_view", can_view)
    assert verdict.status == "failed" and verdict.mistake == "uses-library", verdict.message


def test_the_shape_hint_does_not_say_the_larger_length():
    """An axis of length 1 stretches to the other's length, 0 too (NumPy broadcasts (0,) and
    (1,) to (0,)); the hint said "each axis the larger length"."""
    assert np.broadcast_shapes((0,), (1,)) == (0,)
    assert "larger length" not in RESULT_SHAPE.hint
    assert "not 1" in RESULT_SHAPE.hint


def test_the_reference_answer_passes():
    answer = reference_answer(notebook_exercises()["05.add_views"])
    verdict = verify("05.add_views", answer)
    assert verdict.passed, verdict.message


def test_add_views_with_the_larger_length_fails_on_an_empty_axis():
    """(0,) with (1,) broadcasts to (0,): the larger length, 1, reads an element the empty
    view does not have (the notebook's own answer did, and no case had an empty axis)."""
    verdict = verify("05.add_views", _adding(larger=True))
    assert verdict.status == "failed", verdict.message
    assert verdict.mistake == RESULT_SHAPE.name, verdict.message
