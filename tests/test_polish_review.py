"""Low findings of the reviews: one number format for captions and labels, plurals, and clear
errors from the finite-difference study, the roofline, the traversal sum, tables, parameter
checks, the fusion search and overlapping strided views."""

import warnings

import numpy as np
import pytest
from matplotlib.figure import Figure

import course_lib as cl
from course_lib import gradcheck, params
from course_lib.errors import GraphError, ParameterError, ShapeError
from course_lib.perf import Roofline, search_fusions
from course_lib.perf.traversal import sum_row_by_row
from course_lib.strides import StridedView
from course_lib.tables import Table
from course_lib.viz import StepThrough, draw_graph
from course_lib.viz.alt import figure_description
from course_lib.viz.figure import format_value


# -- captions and labels: one rule for numbers --------------------------------------------
def test_captions_write_huge_values_as_the_labels_do():
    """Captions wrote 1e300 with 3 decimals: some 300 digits."""
    x = cl.variable("x", shape=())
    y = cl.log(x) * x
    captions = StepThrough(cl.gradient_trace(y, x)[1], {x: 1e300}).captions
    assert format_value(1e300) == "1.000e+300"
    assert "1.000 × 1.000e+300 = 1.000e+300" in captions[1], captions[1]
    assert max(map(len, captions)) < 150, captions


def test_captions_and_labels_write_a_negative_number_with_one_minus_sign():
    """Labels wrote "-0.500" (a hyphen), captions "−0.500" (U+2212, the sign ops write)."""
    x = cl.variable("x", shape=())
    y = -x * x
    label = draw_graph(y, {x: 0.5}).source
    captions = StepThrough(cl.gradient_trace(y, x)[1], {x: 0.5}).captions
    assert "= −0.500" in label and "-0.500" not in label, label
    assert any("−0.500" in c for c in captions) and not any("-0.5" in c for c in captions)
    assert format_value([-0.5, 2e6]) == "[−0.500, 2.000e+06]"


# -- plurals ----------------------------------------------------------------------------------
def test_a_one_step_trace_is_one_step():
    x = cl.variable("x", shape=())
    trace = cl.gradient_trace(x, x)[1]
    assert len(trace.steps) == 1
    assert repr(StepThrough(trace)).startswith("StepThrough: 1 step of gradient(out)\n")
    with pytest.raises(cl.OutOfRangeError, match=r"this trace has 1 step\)"):
        trace.describe(1)


def test_the_alt_text_of_one_bar_says_one_bar():
    fig = Figure()
    fig.add_subplot().bar([0], [1.0])
    assert figure_description(fig) == "Figure: a plot, 1 bar."


def test_counts_of_one_in_messages_are_singular():
    with pytest.raises(ShapeError, match=r"has 1 axis but strides \(1, 1\) has 2"):
        StridedView(np.arange(3.0), (3,), (1, 1))
    with pytest.raises(ShapeError, match=r"has 1 cell \['x'\] but there are 2 headers"):
        Table(["a", "b"], [["x"]])


# -- the finite-difference study --------------------------------------------------------------
def test_the_slope_through_an_exact_difference_is_a_clear_error():
    """log10(0): a NaN slope with a RuntimeWarning."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ParameterError, match=r"got error 0 at ε = 0\.001"):
            gradcheck.loglog_slope([1e-3, 1e-2], [0.0, 1e-4])
        assert gradcheck.loglog_slope([1e-3, 1e-2], [1e-6, 1e-4]) == pytest.approx(2.0)


def test_difference_errors_refuse_an_eps_of_zero():
    """Both quotients divide by ε: ZeroDivisionError from inside the study."""
    with pytest.raises(ParameterError, match=r"difference_errors: ε .* above 0, got 0\.0"):
        gradcheck.difference_errors(lambda x: x * x, 2.0, 1.0, [1e-3, 0.0])


# -- the roofline and the traversal sum -------------------------------------------------------
@pytest.mark.parametrize(
    "intensity, shown", [(-1.0, "-1.0"), (np.nan, "nan"), ([2.0, -3.0], "-3.0")]
)
def test_the_roofline_refuses_a_negative_or_nan_intensity(intensity, shown):
    roof = Roofline(bandwidth=40e9, peak_flops=200e9)
    with pytest.raises(ParameterError, match=f"intensity must be FLOPs per byte >= 0, got {shown}"):
        roof.attainable(intensity)
    assert roof.attainable([0.0, 1.0, np.inf]).tolist() == [0.0, 40e9, 200e9]


@pytest.mark.parametrize("array", [np.ones(4), np.ones((2, 2, 2)), np.float64(3.0), "abc"])
def test_sum_row_by_row_needs_a_2d_array(array):
    with pytest.raises(ShapeError, match=r"sum_row_by_row walks a 2-D array .* of shape"):
        sum_row_by_row(array)


# -- tables and parameter checks --------------------------------------------------------------
def test_a_missing_column_names_the_tables_headers():
    table = Table(["a", "value"], [["1", "2"]])
    with pytest.raises(ParameterError, match=r"no column 'b'; the headers are \['a', 'value'\]"):
        table.column("b")


@pytest.mark.parametrize(
    "array, found",
    [(np.array([1.0 + np.inf * 1j]), "complex128"), (None, "object"), ("abc", "<U3")],
)
def test_finite_array_refuses_what_is_not_real_numbers(array, found):
    """Complex: the imaginary part dropped (its infinity unseen); None: "holds 1 NaN"; text: a
    raw ValueError from NumPy."""
    with pytest.raises(GraphError, match=f"entry w holds numbers .* not {found} values"):
        params.finite_array(array, "entry w")


# -- the fusion search and overlapping views --------------------------------------------------
def test_search_fusions_lets_the_feed_hold_unused_variables_as_measure_graph_does():
    x, unused = cl.variable("x", (8,), np.float32), cl.variable("unused", (8,), np.float32)
    feed = {x: np.ones(8, np.float32), unused: np.ones(8, np.float32)}
    found = search_fusions(cl.exp(x) * 2.0 + 1.0, feed, repeats=1)
    assert len(found) == 2  # the one region, fused or not


@pytest.mark.parametrize(
    "view",
    [
        StridedView(np.arange(3.0), (4, 3), (0, 1)),  # broadcast: stride 0
        StridedView(np.arange(6.0), (4, 3), (1, 1)),  # sliding windows of 3
    ],
    ids=["stride-0", "sliding-windows"],
)
def test_overlapping_views_come_out_of_numpy_read_only(view):
    """As np.broadcast_to and sliding_window_view: writing one element would change others."""
    assert view.overlaps() and not view.to_numpy().flags.writeable


@pytest.mark.parametrize(
    "shape, strides", [((3, 4), (4, 1)), ((4, 3), (1, 4)), ((3, 2), (2, 3)), ((2, 0), (0, 1))]
)
def test_views_whose_elements_each_have_their_own_offset_stay_writeable(shape, strides):
    """Row-major, transposed, interleaved strides (offsets 0, 3, 2, 5, 4, 7) and empty."""
    view = StridedView(np.zeros(12), shape, strides)
    assert not view.overlaps() and view.to_numpy().flags.writeable


def test_shape_errors_of_the_ops_count_one_dimension_and_one_element_in_the_singular():
    x = cl.variable("x", shape=(3,))
    with pytest.raises(cl.ShapeError, match="out of range for 1 dimension$"):
        cl.sum(x, axis=1)
    with pytest.raises(cl.ShapeError, match="not a permutation of 1 dimension$"):
        cl.transpose(x, (1, 0))
    with pytest.raises(cl.ShapeError, match=r"cannot reshape \(1,\) \(1 element\) to \(2,\)"):
        cl.reshape(cl.variable("y", shape=(1,)), (2,))


def test_overlaps_decides_sliding_windows_and_large_views_without_listing_offsets(monkeypatch):
    def listed(self):
        raise AssertionError("listed every offset")

    monkeypatch.setattr(StridedView, "element_offsets", listed)
    buffer = np.arange(200_000, dtype=np.float32)
    windows = StridedView(buffer, (199_901, 100), (1, 1))  # windows of 100, one step apart
    assert windows.overlaps() and not windows.to_numpy().flags.writeable
    assert StridedView(buffer, (1000, 100), (100, 1)).overlaps() is False  # row-major
    interleaved = StridedView(buffer, (1100, 1000), (3, 2))  # past the counting limit
    assert interleaved.size > 1 << 20 and interleaved.overlaps()
