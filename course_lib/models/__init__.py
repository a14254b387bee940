"""Models built on course_lib: the LLaMA-style transformer and its calculators."""

from .config import LlamaConfig
from .decoder import DecoderLM, ForwardGraph
from .flops import count_flops, flops_table, training_flops
from .llama import Llama, load_hf_state_dict
from .memory import param_count, training_memory

__all__ = [
    "DecoderLM",
    "ForwardGraph",
    "Llama",
    "LlamaConfig",
    "count_flops",
    "flops_table",
    "load_hf_state_dict",
    "param_count",
    "training_flops",
    "training_memory",
]
