"""Models built on course_lib: the LLaMA-style transformer (switchable back to the original
Transformer's block for an ablation), and what training it needs (tokenizer, corpus,
optimisers, loop, sampling)."""

from .config import ARCHITECTURE, LlamaConfig
from .corpus import load_text, random_windows, split_tokens, stdlib_docstrings
from .decoder import DecoderLM, ForwardGraph
from .flops import count_flops, flops_table, training_flops
from .kv_cache import KVCache
from .llama import Llama, load_hf_state_dict
from .memory import param_count, training_memory
from .optim import SGD, AdamW, cosine_schedule
from .sampling import generate
from .tokenizer import ByteTokenizer
from .train import TrainHistory, train

__all__ = [
    "ARCHITECTURE", "SGD", "AdamW", "ByteTokenizer", "DecoderLM", "ForwardGraph", "KVCache",
    "Llama", "LlamaConfig", "TrainHistory", "cosine_schedule", "count_flops", "flops_table",
    "generate", "load_hf_state_dict", "load_text", "param_count", "random_windows",
    "split_tokens", "stdlib_docstrings", "train", "training_flops", "training_memory",
]  # fmt: skip
