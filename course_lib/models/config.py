"""The shape of a LLaMA-style model: one dataclass shared by the model and the calculators,
and the calculators' checks of their arguments."""

from __future__ import annotations

from dataclasses import dataclass

from .. import params
from ..errors import GraphError, ParameterError, ShapeError


@dataclass(frozen=True)
class LlamaConfig:
    """Hyper-parameters of a LLaMA-style decoder (Hugging Face names in brackets).

    Parameters
    ----------
    dim : int
        Hidden size h (``hidden_size``).
    n_layers : int
        Number of decoder blocks N (``num_hidden_layers``).
    n_heads : int
        Query heads n (``num_attention_heads``); ``head_dim = dim // n_heads``.
    n_kv_heads : int
        Key/value heads (``num_key_value_heads``): ``n_heads`` is multi-head attention,
        1 is multi-query, anything in between is grouped-query attention.
    ffn_dim : int
        The MLP's inner size i (``intermediate_size``).
    vocab_size : int
        Vocabulary size v.
    max_seq_len : int
        Longest sequence the position tables cover (``max_position_embeddings``).
    rope_theta, norm_eps : float
        RoPE base and the epsilon inside the norm's square root.
    norm_position, norm, mlp, positions : str
        The four changes from the original Transformer, switchable one at a time for an
        ablation; LLaMA's choice is the default, the original's the other
        (:data:`ARCHITECTURE`): a norm before each sublayer, ``h + f(norm(h))``, or after
        each residual add, ``norm(h + f(h))`` ("pre" or "post"); RMSNorm or LayerNorm with a
        bias ("rms" or "layer"); the MLP ``down(silu(gate(x)) · up(x))`` or
        ``down(relu(up(x)))`` ("swiglu" or "relu"); RoPE rotating queries and keys or
        sinusoids added to the embeddings, which are multiplied by √dim first so that the
        tokens are not drowned by the positions, as in the paper ("rope" or
        "sinusoidal"). The calculators (FLOPs, memory, inference) count LLaMA's choices
        only.
    """

    dim: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    ffn_dim: int
    vocab_size: int
    max_seq_len: int
    rope_theta: float = 10000.0
    norm_eps: float = 1e-5
    norm_position: str = "pre"
    norm: str = "rms"
    mlp: str = "swiglu"
    positions: str = "rope"

    def __post_init__(self):
        sizes = ("dim", "n_layers", "n_heads", "n_kv_heads", "ffn_dim", "vocab_size", "max_seq_len")
        for field in sizes:  # stored as ints: dim=16.0 would fail later, deep in a reshape
            size = params.positive_size(getattr(self, field), f"LlamaConfig.{field}")
            object.__setattr__(self, field, size)
        for field, choices in ARCHITECTURE.items():
            one_of(getattr(self, field), choices, f"LlamaConfig.{field}")
        eps = params.real(self.norm_eps, "LlamaConfig.norm_eps", minimum=0.0)
        theta = params.real(self.rope_theta, "LlamaConfig.rope_theta")
        if theta <= 1:
            raise ParameterError(f"LlamaConfig.rope_theta must be > 1, got {self.rope_theta}")
        # stored as floats: np.float32(1e-3) == 1e-3, yet it hashes apart and is another eps
        object.__setattr__(self, "norm_eps", eps)
        object.__setattr__(self, "rope_theta", theta)
        if self.dim % self.n_heads:
            raise ShapeError(
                f"LlamaConfig: dim={self.dim} is not divisible by n_heads={self.n_heads}"
            )
        if self.n_heads % self.n_kv_heads:
            raise ShapeError(
                f"LlamaConfig: n_heads={self.n_heads} is not a multiple of "
                f"n_kv_heads={self.n_kv_heads} (a kv head serves a whole group)"
            )
        if self.positions == "rope" and self.head_dim % 2:
            raise ShapeError(f"LlamaConfig: head_dim={self.head_dim} must be even for RoPE")

    @property
    def head_dim(self) -> int:
        """d, the size of one attention head."""
        return self.dim // self.n_heads

    @property
    def kv_groups(self) -> int:
        """How many query heads share one key/value head."""
        return self.n_heads // self.n_kv_heads

    @property
    def changes_from_llama(self) -> dict[str, str]:
        """The switches of :data:`ARCHITECTURE` not set to LLaMA's choice (empty for LLaMA)."""
        return {field: getattr(self, field) for field, choices in ARCHITECTURE.items()
                if getattr(self, field) != choices[0]}  # fmt: skip

    @classmethod
    def llama2_7b(cls) -> LlamaConfig:
        """LLaMA-2-7B: h = 4096, N = 32, n = 32 (MHA), i = 11008, v = 32000, s <= 4096."""
        return cls(dim=4096, n_layers=32, n_heads=32, n_kv_heads=32, ffn_dim=11008,
                   vocab_size=32000, max_seq_len=4096)  # fmt: skip

    @classmethod
    def tiny(cls) -> LlamaConfig:
        """The benchmark/demo model: dim 256, 4 layers, 8 heads, 4 kv heads, ffn 688, bytes."""
        return cls(dim=256, n_layers=4, n_heads=8, n_kv_heads=4, ffn_dim=688, vocab_size=256,
                   max_seq_len=128)  # fmt: skip


#: The switchable parts of the block: LLaMA's choice first, the original Transformer's
#: (Vaswani et al., 2017) second.
ARCHITECTURE = {
    "norm_position": ("pre", "post"),
    "norm": ("rms", "layer"),
    "mlp": ("swiglu", "relu"),
    "positions": ("rope", "sinusoidal"),
}


def one_of(value, choices: tuple, what: str):
    """``value`` if it is one of the strings ``choices``, else a ParameterError naming
    ``what``."""
    if not isinstance(value, str) or value not in choices:
        raise ParameterError(f"{what} must be one of {', '.join(choices)}, got {value!r}")
    return value


def require_config(config, caller: str) -> LlamaConfig:
    """``config`` itself if it is a :class:`LlamaConfig` of LLaMA's architecture, the one
    the calculators count; else a GraphError (a TypeError) or a ParameterError naming
    ``caller``."""
    if not isinstance(config, LlamaConfig):
        raise GraphError(f"{caller} needs a LlamaConfig, got {type(config).__name__}")
    if config.changes_from_llama:
        changed = ", ".join(f"{k}={v!r}" for k, v in config.changes_from_llama.items())
        raise ParameterError(
            f"{caller} counts LLaMA's block (pre-norm RMSNorm, SwiGLU, RoPE); the config has "
            f"{changed}"
        )
    return config


#: How much of the forward pass the backward pass recomputes instead of keeping (Korthikanti
#: et al., 2022): nothing; the attention scores and probabilities ("selective"); every block
#: from its input ("full").
RECOMPUTE = ("none", "selective", "full")


def recompute_choice(value, caller: str) -> str:
    """``value`` if it is one of :data:`RECOMPUTE`, else a ParameterError naming ``caller``."""
    return one_of(value, RECOMPUTE, f"{caller}: recompute")


def number_bytes(value, name: str, caller: str) -> int:
    """Bytes per number (1, 2, 4 or 8: int8/fp8, bf16/fp16, fp32, fp64), else a
    ParameterError naming ``caller``."""
    if not params.is_real(value) or value not in (1, 2, 4, 8):  # np.True_ == 1 is no number
        raise ParameterError(f"{caller}: {name} must be 1, 2, 4 or 8, got {value!r}")
    return int(value)


def positive_size(value: int, name: str, caller: str) -> int:
    """``value`` as an int if it is a positive integer (a batch size, a sequence length),
    else a ShapeError naming ``caller``."""
    return params.positive_size(value, f"{caller}: {name}")
