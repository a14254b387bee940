"""course_lib.perf under a hostile review (round 10): the round-by-round ratio of NumPy arrays
and iterators (and which side is the numerator), ceilings from a clock that saw no time pass,
kernel points and traversal arrays checked before anything is timed. Hand counts and fake
clocks are the oracle; no timing is asserted."""

import numpy as np
import pytest

from course_lib.errors import GraphError, ParameterError, ShapeError
from course_lib.perf import ceilings, measure_kernel, ratio_by_rounds, traversal


def test_ratio_by_rounds_is_the_first_side_over_the_second():
    # round 0: median 3 / median 1 = 3; round 1: 3 / 3 = 1; round 2: 4 / 1 = 4 -> median 3
    first, second = [[2.0, 4.0], [3.0], [4.0]], [[1.0], [2.0, 4.0], [1.0]]
    assert ratio_by_rounds(first, second) == 3.0
    assert ratio_by_rounds(second, first) == pytest.approx(1 / 3)


def test_ratio_by_rounds_takes_numpy_arrays_and_iterators():
    first = np.array([[2.0, 4.0], [3.0, 3.0]])  # medians 3, 3
    second = np.array([[1.0, 1.0], [2.0, 4.0]])  # medians 1, 3: ratios 3, 1
    assert ratio_by_rounds(first, second) == 2.0  # was: ValueError (truth value of an array)
    assert ratio_by_rounds(iter(first.tolist()), (r for r in second.tolist())) == 2.0
    with pytest.raises(GraphError, match="ratio_by_rounds: each side is a list of rounds"):
        ratio_by_rounds(1.0, [[1.0]])  # was: a bare TypeError (not iterable)


@pytest.mark.parametrize("seconds", [0.0, -1e-9])
def test_ceilings_refuse_a_time_the_clock_did_not_see(monkeypatch, seconds):
    monkeypatch.setattr(ceilings, "best_seconds", lambda fn, repeats=5, warmup=1: seconds)
    with pytest.raises(ParameterError, match="measure_bandwidth: a copy of 8 bytes took"):
        ceilings.measure_bandwidth(8, repeats=1)  # was: ZeroDivisionError
    with pytest.raises(ParameterError, match="measure_matmul_rate: a 2 x 2 matmul took"):
        ceilings.measure_matmul_rate(2, repeats=1)


@pytest.mark.parametrize(("flops", "nbytes", "words"), [(0, 8, "flops"), (8, 0, "bytes")])
def test_measure_kernel_checks_its_counts_before_timing(flops, nbytes, words):
    calls = []
    with pytest.raises(ParameterError, match=f"kernel point 'k': {words} must be finite"):
        measure_kernel("k", lambda: calls.append(1), flops, nbytes, repeats=3)
    assert calls == []  # was: 4 runs (a warm-up and 3 timed), then the error


def test_traversal_seconds_checks_every_array_before_timing(monkeypatch):
    runs = []
    real = traversal.sum_row_by_row

    def counted(array):
        runs.append(array.shape)
        return real(array)

    monkeypatch.setattr(traversal, "sum_row_by_row", counted)
    arrays = {"fine": np.ones((2, 3)), "flat": np.ones(4)}
    with pytest.raises(ShapeError, match="traversal_seconds: 'flat': sum_row_by_row walks a 2-D"):
        traversal.traversal_seconds(arrays, repeats=1)
    assert runs == []  # was: 'fine' summed first, then an error not naming 'flat'
