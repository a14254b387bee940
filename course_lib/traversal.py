"""The traversal-order experiment: the same sum, walking memory in order or in big jumps.

``sum_row_by_row`` visits a 2-D array one row at a time, so each ``row.sum()`` walks
memory with the array's last stride. On a row-major array that stride is 1 element
(consecutive bytes, whole cache lines used); on its transpose it is a full row, so
every element comes from a different cache line.
"""

from __future__ import annotations

import statistics
import time

import numpy as np


def sum_row_by_row(array: np.ndarray) -> float:
    """The sum of a 2-D array, computed one row at a time (the lecture's nested loop)."""
    return float(sum(float(row.sum()) for row in array))


def traversal_seconds(arrays: dict[str, np.ndarray], repeats: int = 5) -> dict[str, float]:
    """Median seconds of :func:`sum_row_by_row` on each array.

    The runs are interleaved (A, B, A, B, ...) after one warm-up each, so machine
    noise hits every array alike.
    """
    for array in arrays.values():
        sum_row_by_row(array)
    times: dict[str, list[float]] = {name: [] for name in arrays}
    for _ in range(repeats):
        for name, array in arrays.items():
            start = time.perf_counter()
            sum_row_by_row(array)
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(ts) for name, ts in times.items()}
