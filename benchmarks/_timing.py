"""Shared helpers for the benchmark scripts: medians of repeated runs, side by side."""

from __future__ import annotations

import statistics
import time


def median_seconds(fn, repeats: int = 7, warmup: int = 1) -> float:
    """The median wall time of ``fn()`` over ``repeats`` runs after ``warmup`` runs."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def interleaved_medians(fns: dict, repeats: int = 7, warmup: int = 1) -> dict:
    """Medians of several functions, run in turn (A, B, C, A, B, C, ...) so that machine
    noise hits all of them alike."""
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    times = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(ts) for name, ts in times.items()}


def blocked_medians(fns: dict, rounds: int = 3, per_block: int = 3, settle: int = 1) -> dict:
    """Medians of several functions run in blocks (A A A, B B B, A A A, ...), ``rounds`` times.

    For work that keeps thread pools busy (BLAS, OpenMP): the first ``settle`` runs of each
    block let the other library's worker threads go idle and are not counted, so each
    function is timed in its steady state while both still share the same minutes.
    """
    times = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            for i in range(settle + per_block):
                start = time.perf_counter()
                fn()
                if i >= settle:
                    times[name].append(time.perf_counter() - start)
    return {name: statistics.median(ts) for name, ts in times.items()}
