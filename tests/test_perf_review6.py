"""course_lib.perf under a hostile review: bytes of ints and bools next to Python numbers,
op_cost on its own, integer and bool intensities on a roofline, thread limits beyond numexpr's
maximum and in a ``with`` block, and what the timing helpers refuse before they run."""

import numexpr
import numpy as np
import pytest
import threadpoolctl
from threadpoolctl import threadpool_limits

import course_lib as cl
from course_lib.errors import GraphError, ParameterError
from course_lib.perf import (
    Roofline,
    arithmetic_intensity,
    blocked_medians,
    interleaved_medians,
    limit_threads,
    measure_op_repeat,
    median_seconds,
    op_cost,
)


# ------------------------------------------------------------------ counts
def test_op_cost_counts_a_node_whose_input_took_a_python_number():
    x = cl.variable("x", (4,), np.float32)
    y = x * 0.5 + 1.0  # neither node has a dtype in the graph (weak scalars took part)
    cost = op_cost(y)  # was: "the dtype of ((x*0.5)+1) is not known"
    assert cost == arithmetic_intensity(y).ops[-1]
    assert cost.bytes == 4 * (4 + 1 + 4)  # float32 in, the scalar, float32 out


PROMOTIONS = [
    (np.int32, lambda v: v * 0.5, 8),  # int32 array * Python float: float64 (was counted 4)
    (np.int32, lambda v: v / 2, 8),  # true division of ints: float64 (was counted 4)
    (np.bool_, lambda v: v + 1.0, 8),  # bool + Python float: float64 (was counted 1)
    (np.int32, lambda v: v * 2, 4),  # a Python int keeps int32
    (np.float32, lambda v: v * 0.5, 4),  # a Python float keeps float32
]


def test_bytes_of_an_array_and_a_python_number_follow_numpys_result():
    for dtype, build, out_itemsize in PROMOTIONS:
        v = cl.variable("v", (4,), dtype)
        y = build(v)
        assert cl.evaluate(y, {v: np.ones(4, dtype)}).dtype.itemsize == out_itemsize  # NumPy's
        loads = 4 * np.dtype(dtype).itemsize + out_itemsize  # the array, the scalar (as the result)
        assert arithmetic_intensity(y).bytes == loads + 4 * out_itemsize, (dtype, y.name)


# ------------------------------------------------------------------ roofline
def test_the_roofline_refuses_a_bool_intensity():
    roof = Roofline(bandwidth=50e9, peak_flops=200e9)
    for bad in (True, np.array([True, False])):
        with pytest.raises(GraphError, match="Roofline.attainable: intensity .* not bools"):
            roof.attainable(bad)


def test_integer_ceilings_and_intensities_cannot_wrap_around():
    roof = Roofline(bandwidth=40_000_000_000, peak_flops=200_000_000_000)  # Python ints
    assert roof.attainable(300_000_000) == 200e9  # 1.2e19 is past int64: was negative
    assert roof.attainable(np.array([3, 300_000_000])).tolist() == [120e9, 200e9]
    assert Roofline(np.int64(40_000_000_000), np.int64(10**11)).attainable(np.int64(3)) == 1e11


# ------------------------------------------------------------------ threads
@pytest.fixture
def two_threads_each():
    """numexpr and every pool at 2 threads for the test, the caller's counts after."""
    with threadpool_limits(limits=2):
        old = numexpr.set_num_threads(2)
        try:
            yield
        finally:
            numexpr.set_num_threads(old)


class _Controller:
    """Stands in for threadpoolctl's limits (no BLAS pool of 65 threads on a shared CPU)."""

    def __init__(self, limits):
        self.limits = limits

    def restore_original_limits(self):
        pass


def test_limit_threads_beyond_numexpr_maximum_gives_numexpr_its_maximum(
    two_threads_each, monkeypatch
):
    monkeypatch.setattr(threadpoolctl, "threadpool_limits", _Controller)
    limits = limit_threads(numexpr.MAX_THREADS + 1)
    try:
        assert numexpr.get_num_threads() == numexpr.MAX_THREADS  # was: left at 2
        assert limits.before["numexpr"] == 2  # was: -1, numexpr's error code
    finally:
        limits.restore()
    assert numexpr.get_num_threads() == 2


def test_limit_threads_in_a_with_block_restores_the_pools_when_the_body_raises(two_threads_each):
    with pytest.raises(RuntimeError, match="body"), limit_threads(1) as limits:
        assert limits.threads == 1 and numexpr.get_num_threads() == 1
        raise RuntimeError("body")
    assert numexpr.get_num_threads() == 2
    assert {pool["num_threads"] for pool in threadpoolctl.threadpool_info()} == {2}


# ------------------------------------------------------------------ timing and op repeat
@pytest.mark.parametrize(
    ("action", "words"),
    [
        (lambda: median_seconds(3), "timing: 'fn' must be a function to call, got 3"),
        (lambda: interleaved_medians([lambda: None]), r"timing: .* a dict .* got list"),
        (lambda: interleaved_medians({"a": lambda: None, "b": None}, repeats=1),
         "timing: 'b' must be a function"),
        (lambda: blocked_medians({"a": 2.0}), "blocked_medians: 'a' must be a function"),
    ],
)  # fmt: skip
def test_timing_refuses_what_it_cannot_call_before_running_anything(action, words):
    with pytest.raises(GraphError, match=words):
        action()


def test_measure_op_repeat_checks_ks_and_repeats_before_compiling():
    for ks in (4, np.int64(8), None):
        with pytest.raises(GraphError, match="measure_op_repeat: ks must be a sequence"):
            measure_op_repeat(ks=ks, n=64)
    with pytest.raises(ParameterError, match="measure_op_repeat: repeats must be an integer >= 1"):
        measure_op_repeat(ks=(1, 2), n=64, repeats=0)


def test_ops_are_charged_only_the_memory_they_touch():
    """A gather reads the rows it picks, not the table; its adjoint and ``unreduce`` read
    only the shape of their ``table``/``like``; ``ones_like`` reads no input; summing an
    empty array away costs no FLOPs (not a negative count)."""
    from course_lib.graph import apply  # noqa: PLC0415
    from course_lib.ops.broadcast import SumTo  # noqa: PLC0415
    from course_lib.ops.reductions import Unreduce  # noqa: PLC0415
    from course_lib.ops.shape import Take, TakeAdjoint  # noqa: PLC0415

    assert Take().accesses((5, 8), (100, 8), (5,)) == ((40, 5), 40)
    assert TakeAdjoint().accesses((100, 8), (5, 8), (5,), (100, 8)) == ((40, 5, 0), 800)
    assert Unreduce(axis=1).accesses((4, 6), (4, 1), (4, 6)) == ((4, 0), 24)
    x = cl.variable("x", (4, 6), np.float32)
    assert cl.ones_like(x).op.accesses((4, 6), (4, 6)) == ((0,), 24)
    assert SumTo((1, 3)).flops((1, 3), (0, 3)) == 0
    assert SumTo((1, 3)).flops((1, 3), (4, 3)) == 9
    table = cl.variable("E", (100, 8), np.float32)
    ids = cl.variable("ids", (5,), np.int64)
    report = cl.perf.arithmetic_intensity(apply(Take(), table, ids))
    assert report.bytes == 40 * 4 + 5 * 8 + 40 * 4  # rows read, ids read, output written


def test_both_ceilings_take_the_best_time(monkeypatch):
    """The memory ceiling, like the matmul's, is the copy's best time (a median let kernels
    sit above the roof on a shared machine)."""
    from course_lib.perf import ceilings  # noqa: PLC0415

    monkeypatch.setattr(ceilings, "best_seconds", lambda fn, repeats=5, warmup=1: 0.5)
    assert ceilings.measure_bandwidth(8 * 1024, repeats=3) == 2 * 8 * 1024 / 0.5
