"""Wall-clock timing that reports medians (robust to the odd slow run on a shared machine).

On a GPU each timed call is bracketed by :func:`course_lib.backend.synchronize`, so the time
is that of the work, not of queueing its kernels."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Hashable, Mapping
from typing import TypeVar

from .. import params
from ..backend import synchronize
from ..errors import GraphError

K = TypeVar("K", bound=Hashable)


def median_seconds(fn: Callable, repeats: int = 7, warmup: int = 1) -> float:
    """The median wall time of ``fn()`` over ``repeats`` runs after ``warmup`` runs."""
    return interleaved_medians({"fn": fn}, repeats, warmup)["fn"]


def best_seconds(fn: Callable, repeats: int = 5, warmup: int = 1) -> float:
    """The shortest wall time of ``fn()`` over ``repeats`` runs after ``warmup`` runs
    (for a ceiling: what the machine can do when nothing else gets in the way)."""
    return min(_interleaved_times({"fn": fn}, repeats, warmup)["fn"])


def interleaved_medians(
    fns: Mapping[K, Callable], repeats: int = 7, warmup: int = 1
) -> dict[K, float]:
    """Medians of several functions, run in turn (A, B, C, A, B, C, ...) so that machine
    noise hits all of them alike. The keys name the functions (any hashable values)."""
    times = _interleaved_times(fns, repeats, warmup)
    return {key: statistics.median(ts) for key, ts in times.items()}


def _interleaved_times(
    fns: Mapping[K, Callable], repeats: int, warmup: int
) -> dict[K, list[float]]:
    """Every wall time of each function, run in turn after ``warmup`` runs of each."""
    _check_functions(fns, "timing")
    repeats = params.count(repeats, "timing: repeats", minimum=1)
    warmup = params.count(warmup, "timing: warmup")
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    times: dict[K, list[float]] = {key: [] for key in fns}
    for _ in range(repeats):
        for key, fn in fns.items():
            synchronize()
            start = time.perf_counter()
            fn()
            synchronize()
            times[key].append(time.perf_counter() - start)
    return times


def blocked_medians(
    fns: Mapping[K, Callable],
    rounds: int = 3,
    per_block: int = 3,
    settle: int = 1,
    clock: Callable[[], float] = time.perf_counter,
) -> dict[K, float]:
    """Medians of several functions run in blocks (A A A, B B B, A A A, ...), ``rounds`` times.

    For work that keeps thread pools busy (BLAS, OpenMP): the first ``settle`` runs of each
    block let the other library's worker threads go idle and are not counted, so each
    function is timed in its steady state while both still share the same minutes.
    ``clock``: wall time by default; ``time.process_time`` counts this process's CPU time
    (for one thread: time another process takes from the core is not counted).
    """
    if not callable(clock):
        raise GraphError(f"blocked_medians: clock must be a function, got {clock!r}")
    _check_functions(fns, "blocked_medians")
    rounds = params.count(rounds, "blocked_medians: rounds", minimum=1)
    per_block = params.count(per_block, "blocked_medians: per_block", minimum=1)
    settle = params.count(settle, "blocked_medians: settle")
    times: dict[K, list[float]] = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            for i in range(settle + per_block):
                synchronize()
                start = clock()
                fn()
                synchronize()
                if i >= settle:
                    times[name].append(clock() - start)
    return {name: statistics.median(ts) for name, ts in times.items()}


def _check_functions(fns, what: str) -> None:
    """``fns`` is a mapping of names to functions (a clear error before any run, not a
    TypeError from the middle of the timings)."""
    if not isinstance(fns, Mapping):
        raise GraphError(f"{what}: the functions to time come as a dict {{name: function}}, "
                         f"got {type(fns).__name__}")  # fmt: skip
    for key, fn in fns.items():
        if not callable(fn):
            raise GraphError(f"{what}: {key!r} must be a function to call, got {fn!r}")
