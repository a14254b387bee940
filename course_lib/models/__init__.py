"""Models built on course_lib: the LLaMA-style transformer and its calculators."""

from .config import LlamaConfig
from .decoder import DecoderLM, ForwardGraph
from .llama import Llama, load_hf_state_dict

__all__ = ["DecoderLM", "ForwardGraph", "Llama", "LlamaConfig", "load_hf_state_dict"]
