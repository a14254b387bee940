"""Models built on course_lib: the LLaMA-style transformer and its calculators."""

from .config import LlamaConfig
from .flops import count_flops, flops_table, training_flops
from .memory import param_count, training_memory

__all__ = [
    "LlamaConfig",
    "count_flops",
    "flops_table",
    "param_count",
    "training_flops",
    "training_memory",
]
