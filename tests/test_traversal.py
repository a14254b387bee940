"""The traversal-order experiment computes the same sum in either order."""

import numpy as np

from course_lib.perf.traversal import sum_row_by_row, traversal_seconds
from course_lib.strides import StridedView


def test_row_and_column_order_give_the_same_sum():
    view = StridedView(np.arange(20.0), (4, 5))
    rows, columns = view.to_numpy(), view.T.to_numpy()
    assert sum_row_by_row(rows) == sum_row_by_row(columns) == 190.0
    assert columns.strides == (8, 40)  # a "row" of the transpose jumps a whole row


def test_traversal_seconds_reports_one_median_per_array():
    arrays = {"row order": np.ones((8, 8)), "column order": np.ones((8, 8)).T}
    times = traversal_seconds(arrays, repeats=3)
    assert list(times) == ["row order", "column order"]
    assert all(isinstance(t, float) and t > 0 for t in times.values())
