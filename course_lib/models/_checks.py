"""Argument checks shared by the FLOP and memory calculators."""

from __future__ import annotations

from ..errors import ShapeError
from .config import LlamaConfig


def positive_size(value: int, name: str, caller: str) -> int:
    """``value`` as an int if it is a positive integer, else a ShapeError naming ``caller``."""
    if isinstance(value, bool) or int(value) != value or value < 1:
        raise ShapeError(f"{caller}: {name} must be a positive integer, got {value!r}")
    return int(value)


def require_config(config, caller: str) -> LlamaConfig:
    """``config`` itself if it is a :class:`LlamaConfig`, else a TypeError naming ``caller``."""
    if not isinstance(config, LlamaConfig):
        raise TypeError(f"{caller} needs a LlamaConfig, got {type(config).__name__}")
    return config
