"""Wall-clock timing that reports medians (robust to the odd slow run on a shared machine).

On a GPU each timed call is bracketed by :func:`course_lib.backend.synchronize`, so the time
is that of the work, not of queueing its kernels."""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Hashable, Iterable, Mapping
from typing import TypeVar

from .. import params
from ..backend import synchronize
from ..errors import GraphError, ParameterError

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
    """Medians of several functions run in blocks (A A A, B B B, A A A, ...), ``rounds`` times
    (:func:`blocked_times`), each over all its timed runs."""
    return pooled_medians(_blocks(fns, rounds, per_block, settle, clock, "blocked_medians"))


def pooled_medians(blocks: Mapping[K, list[list[float]]]) -> dict[K, float]:
    """Each function's median over all its blocks' times (:func:`blocked_times`)."""
    if not isinstance(blocks, Mapping):
        raise GraphError(f"pooled_medians: the blocks come as a dict {{name: [[times], ...]}}, "
                         f"got {type(blocks).__name__}")  # fmt: skip
    medians = {}
    for name, bs in blocks.items():
        times = [t for block in bs for t in _times(block, f"pooled_medians: {name!r}")]
        if not times:
            raise GraphError(f"pooled_medians: {name!r} has no times, got {bs!r}")
        medians[name] = statistics.median(times)
    return medians


def blocked_times(
    fns: Mapping[K, Callable],
    rounds: int = 3,
    per_block: int = 3,
    settle: int = 1,
    clock: Callable[[], float] = time.perf_counter,
) -> dict[K, list[list[float]]]:
    """Several functions run in blocks (A A A, B B B, A A A, ...), ``rounds`` times: each
    one's timed runs, block by block (``times[name][round]``).

    For work that keeps thread pools busy (BLAS, OpenMP): the first ``settle`` runs of each
    block let the other library's worker threads go idle and are not counted, so each
    function is timed in its steady state while both still share the same minutes.
    ``clock``: wall time by default; ``time.process_time`` counts this process's CPU time
    (for one thread: time another process takes from the core is not counted).
    """
    return _blocks(fns, rounds, per_block, settle, clock, "blocked_times")


def _blocks(fns, rounds, per_block, settle, clock, what: str) -> dict:
    if not callable(clock):
        raise GraphError(f"{what}: clock must be a function, got {clock!r}")
    _check_functions(fns, what)
    rounds = params.count(rounds, f"{what}: rounds", minimum=1)
    per_block = params.count(per_block, f"{what}: per_block", minimum=1)
    settle = params.count(settle, f"{what}: settle")
    times: dict = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            block = []
            for i in range(settle + per_block):
                synchronize()
                start = clock()
                fn()
                synchronize()
                if i >= settle:
                    block.append(clock() - start)
            times[name].append(block)
    return times


def ratio_by_rounds(blocks: list[list[float]], others: list[list[float]]) -> float:
    """The median over rounds of ``blocks``' median time over ``others``' in the same round
    (:func:`blocked_times`; above 1 when ``blocks`` is the slower). The machine's speed may
    drift over minutes; a drift between rounds moves both blocks of a round alike, and so
    moves this ratio less than the ratio of the overall medians."""
    blocks, others = (_rounds(side, "ratio_by_rounds") for side in (blocks, others))
    rounds = [_times(block, "ratio_by_rounds") for block in [*blocks, *others]]
    if len(blocks) != len(others) or not blocks or not all(map(len, rounds)):
        raise GraphError(f"ratio_by_rounds: needs the same number of rounds (one or more) on "
                         f"each side, each with a time, got {blocks!r} and {others!r}")  # fmt: skip
    ratios = []
    for k, (a, b) in enumerate(zip(rounds[: len(blocks)], rounds[len(blocks) :])):
        if statistics.median(b) == 0:
            raise ParameterError(
                f"ratio_by_rounds: the median time of round {k} of the second side is 0 "
                f"({b!r}), so it has no ratio; time longer runs"
            )
        ratios.append(statistics.median(a) / statistics.median(b))
    return statistics.median(ratios)


def _rounds(side, what: str) -> list:
    """``side`` (a list, a NumPy array, any iterable of rounds) as a list of its rounds."""
    if isinstance(side, (str, bytes)) or not isinstance(side, Iterable):
        raise GraphError(f"{what}: each side is a list of rounds, each a list of times, "
                         f"got {side!r}")  # fmt: skip
    return list(side)


def _times(block, what: str) -> list:
    """``block`` as a list of times, each a finite number >= 0 (a NaN would make a median
    depend on the order of the times, a negative time is no time)."""
    if isinstance(block, (str, bytes)) or not isinstance(block, Iterable):
        raise GraphError(f"{what}: a block is a list of times, got {block!r}")
    block = list(block)
    for t in block:
        if not params.is_real(t):
            raise GraphError(f"{what}: a time must be a number of seconds, got {t!r}")
        if not 0 <= t < math.inf:
            raise ParameterError(f"{what}: a time must be finite and >= 0, got {t!r}")
    return block


def _check_functions(fns, what: str) -> None:
    """``fns`` is a mapping of names to functions (a clear error before any run, not a
    TypeError from the middle of the timings)."""
    if not isinstance(fns, Mapping):
        raise GraphError(f"{what}: the functions to time come as a dict {{name: function}}, "
                         f"got {type(fns).__name__}")  # fmt: skip
    for key, fn in fns.items():
        if not callable(fn):
            raise GraphError(f"{what}: {key!r} must be a function to call, got {fn!r}")
