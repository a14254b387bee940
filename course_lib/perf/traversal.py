"""The traversal-order experiment: the same sum, walking memory in order or in big jumps.

``sum_row_by_row`` visits a 2-D array one row at a time, so each ``row.sum()`` walks
memory with the array's last stride. On a row-major array that stride is 1 element
(consecutive bytes, whole cache lines used); on its transpose it is a full row, so
every element comes from a different cache line.
"""

from __future__ import annotations

import functools

import numpy as np

from .timing import interleaved_medians


def sum_row_by_row(array: np.ndarray) -> float:
    """The sum of a 2-D array, computed one row at a time (the lecture's nested loop)."""
    return float(sum(float(row.sum()) for row in array))


def traversal_seconds(arrays: dict[str, np.ndarray], repeats: int = 5) -> dict[str, float]:
    """Median seconds of :func:`sum_row_by_row` on each array.

    The runs are interleaved (A, B, A, B, ...) after one warm-up each, so machine
    noise hits every array alike.
    """
    runs = {name: functools.partial(sum_row_by_row, array) for name, array in arrays.items()}
    return interleaved_medians(runs, repeats=repeats)
