"""Where the bottleneck moves: the shortest sequence length at which one cost overtakes another."""

from __future__ import annotations

import bisect
from collections.abc import Callable

from ..errors import ParameterError

#: The longest sequence searched (about 10¹² tokens): a cost that has not overtaken by then
#: never will, and doubling on would never end.
LONGEST = 2**40


def first_seq_where(holds: Callable[[int], bool]) -> int:
    """The smallest sequence length ``s >= 1`` with ``holds(s)``, for a ``holds`` that stays
    true once it is true (an s² term overtaking an s term). Doubles, then bisects; a
    ParameterError if ``holds`` is still false at :data:`LONGEST`."""
    high = 1
    while not holds(high):
        if high >= LONGEST:
            raise ParameterError(f"first_seq_where: the condition is false at every length up "
                                 f"to {LONGEST:,}: one cost never overtakes the other")  # fmt: skip
        high *= 2
    return bisect.bisect_left(range(high + 1), True, lo=high // 2 + 1, key=holds)
