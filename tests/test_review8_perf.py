"""course_lib.perf under a hostile review (round 8): bytes of fused nodes whose body holds
Python numbers, of a comparison with a Python number, of an input whose dtype is unknown;
the pooled and round-by-round medians of empty, NaN and zero times; what the traversal and
vectorisation experiments refuse. Hand counts are the oracle; no timing is asserted."""

import math

import numpy as np
import pytest

import course_lib as cl
from course_lib.errors import CourseLibError, GraphError, ParameterError
from course_lib.passes import Fused, fuse_elementwise
from course_lib.perf import arithmetic_intensity, op_cost, pooled_medians, ratio_by_rounds
from course_lib.perf import vectorization as vec
from course_lib.perf.traversal import traversal_seconds

N = 10


# ------------------------------------------------------------------ counts
@pytest.mark.parametrize(
    ("dtype", "build"),
    [
        (np.int32, lambda v: v * 0.5 + 1.0),  # int32 * Python float: float64
        (np.int32, lambda v: v / 2 + 1),  # true division of ints: float64
        (np.bool_, lambda v: v * 1.0 + 1.0),  # bool * Python float: float64
    ],
)
def test_a_fused_node_whose_body_holds_python_numbers_stores_numpys_result_dtype(dtype, build):
    v = cl.variable("v", (N,), dtype)
    fused = fuse_elementwise(build(v))
    assert isinstance(fused.op, Fused) and fused.dtype == np.float64  # NumPy rule, weak scalars too
    result = cl.evaluate(fused, {v: np.ones(N, dtype)})
    assert result.dtype == np.float64  # NumPy's
    hand = N * np.dtype(dtype).itemsize + N * 8  # v loaded once, float64 stored once
    assert arithmetic_intensity(fused).bytes == hand  # was: stored in v's dtype
    assert op_cost(fused).bytes == hand


@pytest.mark.parametrize(
    ("dtype", "scalar", "scalar_bytes"),
    [(np.float32, 0.5, 4), (np.float64, 2, 8), (np.int8, 0.5, 8), (np.int16, 3, 2)],
)
def test_a_python_number_compared_with_an_array_is_loaded_in_the_compared_dtype(
    dtype, scalar, scalar_bytes
):
    v = cl.variable("v", (N,), dtype)
    y = v > scalar
    assert y.dtype == np.bool_
    hand = N * np.dtype(dtype).itemsize + scalar_bytes + N * 1  # v, the scalar, the bool mask
    assert arithmetic_intensity(y).bytes == hand  # was: the scalar counted as a 1-byte bool


def test_an_input_of_unknown_dtype_is_refused_not_given_its_users_dtype():
    x, y = cl.variable("x", (N,), np.float32), cl.variable("y", (N,))
    with pytest.raises(GraphError, match=r"add at node \(x\+y\): the dtype of y is not known"):
        arithmetic_intensity(x + y)  # was: y counted as float32 (it may be fed float64)
    with pytest.raises(GraphError, match="the dtype of y is not known"):
        op_cost(x * y)
    assert arithmetic_intensity(x * 2.0 + 1.0).bytes == 2 * (4 * N + 4 + 4 * N)  # weak: fine


# ------------------------------------------------------------------ timing
@pytest.mark.parametrize("blocks", [{"a": []}, {"a": [[], []]}, {"a": [[1.0]], "b": [[]]}])
def test_pooled_medians_of_no_times_is_a_clear_error(blocks):
    with pytest.raises(GraphError, match="pooled_medians: '.' has no times"):
        pooled_medians(blocks)  # was: statistics.StatisticsError


def test_pooled_medians_refuse_nan_negative_and_non_numbers():
    for times in ([[math.nan, 1.0, 2.0]], [[1.0, math.nan, 2.0]], [[1.0, -2.0]], [[math.inf]]):
        with pytest.raises(ParameterError, match="pooled_medians: 'a': a time must be finite"):
            pooled_medians({"a": times})  # was: 1.0 or nan, by the order of the times
    with pytest.raises(GraphError, match="pooled_medians: 'a': a time must be a number"):
        pooled_medians({"a": [[1.0, "2"]]})
    with pytest.raises(GraphError, match="pooled_medians: the blocks come as a dict"):
        pooled_medians([[1.0]])  # was: AttributeError
    assert pooled_medians({"a": [[1, 2], [3]], "b": [[0.5]]}) == {"a": 2, "b": 0.5}  # uneven


def test_ratio_by_rounds_refuses_a_zero_median_and_bad_times():
    with pytest.raises(ParameterError, match="ratio_by_rounds: the median time of round 1 .* 0"):
        ratio_by_rounds([[1.0], [2.0]], [[1.0], [0.0, 0.0, 5.0]])  # was: ZeroDivisionError
    for bad in ([[math.nan]], [[-1.0]]):
        with pytest.raises(ParameterError, match="ratio_by_rounds: a time must be finite"):
            ratio_by_rounds([[1.0]], bad)  # was: nan, -1.0
    assert ratio_by_rounds([[3.0]], [[2.0]]) == 1.5  # one round
    assert ratio_by_rounds([[1.0, 3.0, 2.0], [4.0]], [[1.0], [1.0, 2.0, 3.0]]) == 2.0  # 2, 2


# ------------------------------------------------------------------ experiments
def test_traversal_seconds_wants_a_dict_of_arrays():
    with pytest.raises(GraphError, match="traversal_seconds: the arrays come as a dict"):
        traversal_seconds([np.ones((2, 2))], repeats=1)  # was: AttributeError


@pytest.mark.parametrize("name", ["mul", ["add"], None])
def test_the_vectorisation_loops_refuse_an_unknown_loop_naming_the_function(name):
    a = np.ones(4, np.float32)
    for action, what in (
        (lambda: vec.run_loop(name, a, a), "run_loop"),
        (lambda: vec.reference(name, a, a), "reference"),
        (lambda: vec.measure_vectorization(name, 4), "measure_vectorization"),
    ):
        with pytest.raises(ParameterError, match=f"{what}: no loop named") as caught:
            action()  # was: a plain ValueError, or TypeError (unhashable) for a list
        assert isinstance(caught.value, CourseLibError)
