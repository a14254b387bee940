"""Where the bottleneck moves: the shortest sequence length at which one cost overtakes another."""

from __future__ import annotations

import bisect
from collections.abc import Callable


def first_seq_where(holds: Callable[[int], bool]) -> int:
    """The smallest sequence length ``s >= 1`` with ``holds(s)``, for a ``holds`` that stays
    true once it is true (an s² term overtaking an s term). Doubles, then bisects."""
    high = 1
    while not holds(high):
        high *= 2
    return bisect.bisect_left(range(high + 1), True, lo=high // 2 + 1, key=holds)
