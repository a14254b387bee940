"""Argument checks and the sequence-length search shared by the FLOP and memory calculators."""

from __future__ import annotations

import bisect
from collections.abc import Callable

from .. import params
from ..errors import GraphError
from .config import LlamaConfig


def positive_size(value: int, name: str, caller: str) -> int:
    """``value`` as an int if it is a positive integer, else a ShapeError naming ``caller``."""
    return params.positive_size(value, f"{caller}: {name}")


def require_config(config, caller: str) -> LlamaConfig:
    """``config`` itself if it is a :class:`LlamaConfig`, else a GraphError (a TypeError)
    naming ``caller``."""
    if not isinstance(config, LlamaConfig):
        raise GraphError(f"{caller} needs a LlamaConfig, got {type(config).__name__}")
    return config


def first_seq_where(holds: Callable[[int], bool]) -> int:
    """The smallest sequence length ``s >= 1`` with ``holds(s)``, for a ``holds`` that stays
    true once it is true (an s² term overtaking an s term). Doubles, then bisects."""
    high = 1
    while not holds(high):
        high *= 2
    return bisect.bisect_left(range(high + 1), True, lo=high // 2 + 1, key=holds)
