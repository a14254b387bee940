"""Edge cases of the small modules: strides, jacobians, gradcheck, params, tables and perf.

Each test pins down a fault a hostile review found (a read-only array written through a
StridedView, a crash on empty inputs, a count that wrapped around in NumPy integers, ...)."""

import numexpr
import numpy as np
import pytest
from threadpoolctl import threadpool_limits

import course_lib as cl
from course_lib import params
from course_lib.gradcheck import check_gradients, check_tangents, numerical_gradient
from course_lib.perf import ceilings, limit_threads, op_cost, timing
from course_lib.perf import vectorization as vec
from course_lib.strides import StridedView, row_major_strides
from course_lib.tables import Table


# ------------------------------------------------------------------ StridedView
def _read_only_slice(a):
    view = a[2:]
    view.flags.writeable = False
    return view


@pytest.mark.parametrize("make", [lambda a: np.broadcast_to(a, (3, 10)), _read_only_slice],
                         ids=["broadcast_to", "read-only slice"])  # fmt: skip
def test_a_read_only_array_stays_read_only_through_its_view(make):
    a = np.arange(10.0)
    view = StridedView.from_numpy(make(a))
    assert not view.buffer.flags.writeable
    for numpy_view in (view.to_numpy(), view.T.to_numpy(), view[..., ::-1].to_numpy()):
        with pytest.raises(ValueError, match="read-only"):
            numpy_view[...] = -1.0
    np.testing.assert_array_equal(a, np.arange(10.0))  # the writeable original is untouched
    assert view.compact().buffer.flags.writeable  # a copy is the reader's own
    assert StridedView.from_numpy(a[2:]).buffer.flags.writeable  # writeable stays writeable


def test_numpy_integers_are_shapes():
    assert StridedView(np.arange(3.0), np.int64(3)).shape == (3,)
    assert row_major_strides(np.int32(4)) == (1,)


@pytest.mark.parametrize(
    ("action", "words"),
    [
        (lambda: StridedView(np.arange(4.0), (4,), None, 1.0), "offset must be an integer, got 1"),
        (lambda: StridedView(np.arange(4.0), (4,), None, True), "offset must be an integer"),
        (lambda: StridedView(np.arange(4.0), (4,), (0.5,)), r"strides must be integers, got \(0"),
        (lambda: StridedView(np.arange(4.0), None), "shape must be integers, got None"),
        (lambda: StridedView(np.arange(4.0), (2, 2)).index_to_offset((0, 0.5)), "index must be"),
        (lambda: StridedView(np.arange(4.0), (2, 2)).permute("ab"), "permute's axes must be"),
        (lambda: StridedView(np.arange(4.0), (2, 2)).reshape(2.0, 2), "reshape's shape must be"),
    ],
)  # fmt: skip
def test_wrong_types_name_the_argument(action, words):
    with pytest.raises(cl.ShapeError, match=words):
        action()


def test_an_empty_view_with_a_huge_axis_allocates_nothing():
    view = StridedView(np.arange(3.0), (0, 2**40), (0, 0))  # 8 TiB of offsets, if it counted
    assert view.element_offsets().shape == (0, 2**40)
    assert view.compact().shape == (0, 2**40) and view.to_numpy().size == 0


# ------------------------------------------------------------------ jacobian
@pytest.mark.parametrize("mode", ["forward", "reverse"])
@pytest.mark.parametrize(("x_shape", "out", "matrix_shape"),
                         [((0,), cl.sum, (1, 0)), ((0, 2), lambda x: 2.0 * x, (0, 0)),
                          ((3,), lambda x: cl.sum(x)[None][:0], (0, 3))])  # fmt: skip
def test_a_jacobian_with_no_inputs_or_no_outputs_is_an_empty_matrix(mode, x_shape, out,
                                                                     matrix_shape):  # fmt: skip
    x = cl.variable("x", shape=x_shape)
    result = cl.jacobian(out(x), x, {x: np.zeros(x_shape)}, mode)
    assert result.matrix.shape == matrix_shape


def test_a_jacobian_names_an_x_it_cannot_differentiate_by():
    x, y = cl.variable("x", shape=(2,)), cl.variable("y", shape=(2,))
    out = cl.tanh(x)
    with pytest.raises(cl.FeedError, match="no value for x = y"):
        cl.jacobian(out, y, {x: np.ones(2)})
    with pytest.raises(cl.GraphError, match=r"x must be a variable.*tanh\(x\)"):
        cl.jacobian(out * 2.0, out, {x: np.ones(2)})


def test_both_modes_give_the_jacobian_of_a_float32_graph_in_float32():
    x = cl.variable("x", shape=(3,), dtype=np.float32)
    feed = {x: np.array([0.1, 0.2, 0.3], np.float32)}
    forward, reverse = (cl.jacobian(cl.tanh(x), x, feed, m).matrix for m in ("forward", "reverse"))
    assert forward.dtype == reverse.dtype == np.float32
    np.testing.assert_array_equal(forward, reverse)


# ------------------------------------------------------------------ gradcheck
@pytest.mark.parametrize("check", [check_gradients, check_tangents])
def test_gradient_checks_say_that_they_need_float64(check):
    x = cl.variable("x", shape=(3,), dtype=np.float32)
    with pytest.raises(cl.GraphError, match=f"{check.__name__}: variable x is declared float32"
                       ".*need float64"):  # fmt: skip
        check(cl.tanh(x), {x: np.ones(3, np.float32)})


@pytest.mark.parametrize("eps", [0.0, -1e-6, float("nan")])
def test_numerical_gradient_refuses_a_step_that_is_not_positive(eps):
    with pytest.raises(cl.ParameterError, match="numerical_gradient: eps"):
        numerical_gradient(lambda v: float((v**2).sum()), np.ones(2), eps)


# ------------------------------------------------------------------ params
@pytest.mark.parametrize("huge", [10**400, -(10**400)])
def test_numbers_beyond_floats_are_refused_as_values_naming_the_parameter(huge):
    with pytest.raises(cl.ParameterError, match="lr must be"):
        params.real(huge, "lr")
    with pytest.raises(cl.ParameterError, match="lr must be"):
        params.in_range(huge, "lr", 0.0)


# ------------------------------------------------------------------ tables
def test_a_table_without_rows_shows_its_headers():
    assert repr(Table(["op", "FLOPs"], [])) == "op  FLOPs\n--  -----"
    assert repr(vec.vectorization_table([])).startswith("loop  elements")


def test_a_table_refuses_rows_that_do_not_fit_its_headers():
    for row, cells in ((["1"], "1 cell"), (["1", "2", "3"], "3 cells")):
        with pytest.raises(cl.ShapeError, match=f"row 1 has {cells} .*2 headers"):
            Table(["a", "b"], [["x", "y"], row])
    assert repr(Table([1, 2.5], [[3, 4]])) == "1  2.5\n-  ---\n3  4"


# ------------------------------------------------------------------ perf
def test_the_vectorisation_loops_refuse_misaligned_arrays():
    misaligned = np.zeros(4 * 8 + 1, np.uint8)[1:].view(np.float32)  # C's float* must be aligned
    fine = np.ones(8, np.float32)
    assert misaligned.flags.c_contiguous and not misaligned.flags.aligned
    for a, b, out in ((misaligned, fine, None), (fine, fine, misaligned)):
        with pytest.raises(cl.GraphError, match="'add'.*aligned to 4 bytes"):
            vec.run_loop("add", a, b, out=out)


def test_limit_threads_takes_a_numpy_integer():
    with threadpool_limits(limits=2):
        old = numexpr.set_num_threads(2)
        try:
            limits = limit_threads(np.int64(1))
            limits.restore()
        finally:
            numexpr.set_num_threads(old)
    assert limits.threads == 1 and type(limits.threads) is int


def test_the_matmul_rate_counts_flops_without_wrapping_around(monkeypatch):
    monkeypatch.setattr(ceilings, "best_seconds", lambda fn, repeats: 1.0)  # 1 s: rate = FLOPs
    assert ceilings.measure_matmul_rate(np.int32(1300), 1) == 2 * 1300**3  # > 2**31


@pytest.mark.parametrize(
    ("action", "error", "words"),
    [
        (lambda: timing.median_seconds(lambda: None, repeats=2.5), cl.GraphError,
         "timing: repeats must be an integer"),
        (lambda: timing.median_seconds(lambda: None, warmup=-1), cl.ParameterError,
         "timing: warmup must be an integer >= 0"),
        (lambda: timing.blocked_medians({"a": lambda: None}, settle=-1), cl.ParameterError,
         "blocked_medians: settle"),
        (lambda: vec.measure_vectorization("add", -1), cl.ParameterError,
         "measure_vectorization: n must be an integer >= 1"),
        (lambda: ceilings.measure_bandwidth(8.0), cl.GraphError, "measure_bandwidth: nbytes"),
    ],
)  # fmt: skip
def test_counts_of_the_timing_helpers_are_checked(action, error, words):
    with pytest.raises(error, match=words):
        action()


@pytest.mark.parametrize("node", [cl.variable("a", (3,), np.float32), cl.constant(np.ones(3)), "a"])
def test_op_cost_refuses_what_is_not_an_op(node):
    with pytest.raises(cl.GraphError, match="op_cost: .* is not an op node"):
        op_cost(node)


def test_blocked_times_keeps_each_rounds_block_and_the_medians_pool_them():
    ticks, calls = iter(range(1000)), []
    clock = lambda: next(ticks)  # noqa: E731 (one tick a read: a run between two reads takes 1)
    fns = {"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}
    blocks = timing.blocked_times(fns, rounds=2, per_block=3, settle=1, clock=clock)
    assert calls == ["a"] * 4 + ["b"] * 4 + ["a"] * 4 + ["b"] * 4  # the settle run not counted
    assert {n: [len(b) for b in bs] for n, bs in blocks.items()} == {"a": [3, 3], "b": [3, 3]}
    assert timing.blocked_medians(fns, rounds=2, per_block=3, clock=clock) == {"a": 1, "b": 1}
    assert timing.pooled_medians({"a": [[1.0, 5.0], [2.0]], "b": [[3.0]]}) == {"a": 2.0, "b": 3.0}


def test_ratio_by_rounds_is_the_median_of_each_rounds_ratio():
    course, torch = [[2.0, 2.2, 9.0], [4.0, 4.1, 4.0], [1.0, 1.0, 1.0]], [[2.0], [2.0], [1.0]]
    assert timing.ratio_by_rounds(course, torch) == pytest.approx(1.1)  # 1.1, 2.0, 1.0
    for bad in ([[1.0]], [[1.0], []], []):
        with pytest.raises(cl.GraphError, match="ratio_by_rounds: needs the same number"):
            timing.ratio_by_rounds(bad, [[1.0], [1.0]])
