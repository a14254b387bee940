"""Parameters and training memory of a LLaMA-style model (weights, gradients, Adam, activations).

Parameters follow Hugging Face's ``LlamaForCausalLM``: an embedding and a separate (untied)
LM head, per block the Q/K/V/O projections (K and V with n_kv·d columns), gate/up/down and two
RMSNorm weight vectors, and one final RMSNorm. No biases.

Training memory, in bytes, for a step with ``dtype_bytes`` per number (2 for bf16/fp16):

* **weights** and **gradients**: one number per parameter each (``grad_bytes=4`` keeps the
  gradients in fp32);
* **optimizer**: AdamW keeps two fp32 moments (8 bytes per parameter; fp64 moments, 16,
  when the weights are fp64); when training in a type narrower than fp32, an fp32 master
  copy of the weights (4 more) — ZeRO's 12 bytes per parameter, 16 with weights and
  gradients. SGD keeps no state (only the master copy);
* **activations**: the tensors the backward pass reads, kept from the forward pass, with no
  fused attention (see :func:`activation_elements`), by default with no recomputation.

Bytes per parameter are a convention, not a law: ZeRO (Rajbhandari et al., 2020) counts 16
(2 + 2 + 12, bf16 gradients); Hugging Face's "model training anatomy" counts 18 (6 for the
weights in fp16 and fp32, 8 for the moments, 4 for fp32 gradients), ``grad_bytes=4`` here.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import ParameterError
from ..tables import ShownAsTable, Table
from .config import LlamaConfig, number_bytes, positive_size, recompute_choice, require_config
from .crossover import first_seq_where

#: Bytes of optimizer state per parameter in fp32 (moments; fp64 weights double them), without
#: the fp32 master copy kept for narrower weights.
OPTIMIZER_STATE_BYTES = {"adamw": 8, "sgd": 0}
_MASTER_COPY_BYTES = 4


def parameter_breakdown(config: LlamaConfig) -> dict[str, int]:
    """Parameters per part of the model (all layers included)."""
    c = require_config(config, "parameter_breakdown")
    h, kv, i, v, N = c.dim, c.n_kv_heads * c.head_dim, c.ffn_dim, c.vocab_size, c.n_layers
    return {
        "embedding": v * h,
        "attention (W_Q, W_K, W_V, W_O)": N * (2 * h * h + 2 * h * kv),
        "MLP (W_gate, W_up, W_down)": N * 3 * h * i,
        "RMSNorm weights": (2 * N + 1) * h,
        "LM head": v * h,
    }


def param_count(config: LlamaConfig) -> int:
    """Number of parameters (LLaMA-2-7B: 6,738,415,616)."""
    return sum(parameter_breakdown(config).values())


def activation_elements(
    config: LlamaConfig, batch: int, seq: int, recompute: str = "none"
) -> dict[str, int]:
    """Numbers kept for the backward pass, per kind of tensor (all layers included).

    Per block (b batch, s sequence, h hidden, i SwiGLU size, n heads, n_kv·d key/value width):

    * the block input and the RMSNorm output before attention, 2bsh;
    * Q, K, V after RoPE, bsh + 2bs·n_kv·d;
    * the attention probabilities P, b·n·s² (the softmax's and PV's backward read them);
    * the attention output before W_O, bsh;
    * the MLP input and its RMSNorm output, 2bsh;
    * gate, up, Swish(gate) and their product, 4bsi.

    Once: the final RMSNorm's input and output (2bsh) and the logits with their softmax (2bsv).

    ``recompute`` (Korthikanti et al., 2022) trades FLOPs for memory
    (:func:`~course_lib.models.flops.recomputed_flops` counts them): ``"selective"`` keeps no
    P (0 elements) and recomputes it from Q and K; ``"full"`` keeps only each block's input
    (Nbsh) and recomputes one block at a time, whose activations (as above) are held while
    its backward runs.
    """
    c = require_config(config, "activation_elements")
    b = positive_size(batch, "batch", "activation_elements")
    s = positive_size(seq, "seq", "activation_elements")
    recompute = recompute_choice(recompute, "activation_elements")
    h, kv, i, N = c.dim, c.n_kv_heads * c.head_dim, c.ffn_dim, c.n_layers
    block = {
        "block inputs and RMSNorm outputs": 4 * b * s * h,
        "Q, K, V": b * s * (h + 2 * kv),
        "attention probabilities P": 0 if recompute == "selective" else b * c.n_heads * s * s,
        "attention outputs": b * s * h,
        "MLP (gate, up, Swish, product)": 4 * b * s * i,
    }
    final = {"final RMSNorm, logits, softmax": 2 * b * s * h + 2 * b * s * c.vocab_size}
    if recompute == "full":
        return {"block inputs (kept)": N * b * s * h,
                "one block, recomputed for its backward": sum(block.values()), **final}
    return {kind: N * count for kind, count in block.items()} | final


@dataclass(frozen=True, repr=False)  # repr: the table
class TrainingMemory(ShownAsTable):
    """Bytes needed to train: weights, gradients, optimizer states, activations."""

    weights: int
    gradients: int
    optimizer: int
    activations: int
    title: str

    @property
    def total(self) -> int:
        return self.weights + self.gradients + self.optimizer + self.activations

    def parts(self) -> dict[str, int]:
        """Bytes per part, in a fixed order."""
        return {"weights": self.weights, "gradients": self.gradients,
                "optimizer states": self.optimizer, "activations": self.activations}

    def table(self) -> Table:
        rows = [[name, f"{n / 2**30:,.2f}", f"{100.0 * n / self.total:.1f} %"]
                for name, n in self.parts().items()]
        rows.append(["total", f"{self.total / 2**30:,.2f}", "100.0 %"])
        return Table(["part", "GiB", "share"], rows, self.title)


def training_memory(
    config: LlamaConfig,
    batch: int,
    seq: int,
    dtype_bytes: int = 2,
    optimizer: str = "adamw",
    recompute: str = "none",
    grad_bytes: int | None = None,
) -> TrainingMemory:
    """Estimate the memory of one training step (see the module docstring for the convention).

    ``recompute`` is ``"none"``, ``"selective"`` or ``"full"`` (:func:`activation_elements`);
    ``grad_bytes`` the bytes of a gradient (default ``dtype_bytes``; 4 for fp32 gradients).

    Examples
    --------
    >>> mem = training_memory(LlamaConfig.llama2_7b(), 1, 4096)
    >>> round(mem.weights / 1e9, 1), round(mem.optimizer / 1e9, 1)
    (13.5, 80.9)
    """
    require_config(config, "training_memory")
    b = positive_size(batch, "batch", "training_memory")
    s = positive_size(seq, "seq", "training_memory")
    if not isinstance(optimizer, str) or optimizer not in OPTIMIZER_STATE_BYTES:
        raise ParameterError(
            f"training_memory: unknown optimizer {optimizer!r}; use one of "
            f"{sorted(OPTIMIZER_STATE_BYTES)}"
        )
    dtype_bytes = number_bytes(dtype_bytes, "dtype_bytes", "training_memory")
    if grad_bytes is None:
        grad_bytes = dtype_bytes
    grad_bytes = number_bytes(grad_bytes, "grad_bytes", "training_memory")
    params = param_count(config)
    master = _MASTER_COPY_BYTES if dtype_bytes < _MASTER_COPY_BYTES else 0
    moments = OPTIMIZER_STATE_BYTES[optimizer] * max(dtype_bytes, 4) // 4  # fp32, or as wide
    activations = sum(activation_elements(config, b, s, recompute).values())
    title = (f"training memory, b={b}, s={s}, {dtype_bytes}-byte numbers, {optimizer}, "
             f"{params:,} parameters")
    title += f", {grad_bytes}-byte gradients" * (grad_bytes != dtype_bytes)
    title += f", {recompute} recomputation" * (recompute != "none")
    return TrainingMemory(
        weights=params * dtype_bytes,
        gradients=params * grad_bytes,
        optimizer=params * (moments + master),
        activations=activations * dtype_bytes,
        title=title,
    )


def activations_overtake_states(
    config: LlamaConfig,
    batch: int = 1,
    dtype_bytes: int = 2,
    optimizer: str = "adamw",
    recompute: str = "none",
) -> int:
    """The shortest sequence at which the activations of :func:`training_memory` need more
    bytes than weights, gradients and optimizer states together (LLaMA-2-7B, b = 1: 6125;
    with selective recomputation 21,309, with full recomputation 36,901)."""
    recompute_choice(recompute, "activations_overtake_states")

    def activations_win(seq: int) -> bool:
        mem = training_memory(config, batch, seq, dtype_bytes, optimizer, recompute)
        return mem.activations > mem.total - mem.activations

    return first_seq_where(activations_win)
