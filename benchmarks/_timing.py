"""Shared helpers for the benchmark scripts: medians of repeated runs, side by side.

They live in :mod:`course_lib.perf.timing` (the notebooks time with them too)."""

from course_lib.perf.timing import blocked_medians, interleaved_medians, median_seconds

__all__ = ["blocked_medians", "interleaved_medians", "median_seconds"]
