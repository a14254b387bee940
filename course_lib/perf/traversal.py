"""The traversal-order experiment: the same sum, walking memory in order or in big jumps.

``sum_row_by_row`` visits a 2-D array one row at a time, so each ``row.sum()`` walks
memory with the array's last stride. On a row-major array that stride is 1 element
(consecutive bytes, whole cache lines used); on its transpose it is a full row, so
every element comes from a different cache line.

It measures the CPU's caches on purpose, whatever course_lib's current device: it takes
NumPy arrays (host memory) and refuses a device array with ``DeviceError``.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping

import numpy as np

from ..backend import host_array
from ..errors import GraphError, ShapeError
from .timing import interleaved_medians


def sum_row_by_row(array: np.ndarray) -> float:
    """The sum of a 2-D NumPy array, computed one row at a time (the lecture's nested loop)."""
    return float(sum(float(row.sum()) for row in _rows(array, "sum_row_by_row")))


def _rows(array, what: str) -> np.ndarray:
    """``array`` if :func:`sum_row_by_row` can walk it (a 2-D host array of numbers), else a
    ShapeError naming ``what`` (the caller, ending in ``sum_row_by_row``)."""
    rows = host_array(array, what)
    if rows.ndim != 2 or rows.dtype.kind not in "biuf":
        raise ShapeError(
            f"{what} walks a 2-D array of numbers one row at a time, got "
            f"{type(array).__name__} of shape {rows.shape} and dtype {rows.dtype}"
        )
    return rows


def traversal_seconds(arrays: dict[str, np.ndarray], repeats: int = 5) -> dict[str, float]:
    """Median seconds of :func:`sum_row_by_row` on each array.

    The runs are interleaved (A, B, A, B, ...) after one warm-up each, so machine
    noise hits every array alike. The arrays are NumPy arrays: this times the CPU.
    """
    if not isinstance(arrays, Mapping):
        raise GraphError(f"traversal_seconds: the arrays come as a dict {{name: array}}, got "
                         f"{type(arrays).__name__}")  # fmt: skip
    hosts = {name: host_array(a, f"traversal_seconds: {name!r}") for name, a in arrays.items()}
    for name, array in hosts.items():  # each checked before any runs
        _rows(array, f"traversal_seconds: {name!r}: sum_row_by_row")
    runs = {name: functools.partial(sum_row_by_row, array) for name, array in hosts.items()}
    return interleaved_medians(runs, repeats=repeats)
