"""Models built on course_lib: the LLaMA-style transformer and its calculators."""

from .config import LlamaConfig

__all__ = ["LlamaConfig"]
