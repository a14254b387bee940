"""The original Transformer's decoder block (Vaswani et al., 2017) from the same pieces,
for the comparison with LLaMA:

========================  ==============================  ==========================
                           original                        LLaMA
========================  ==============================  ==========================
norm position              after the residual (post-norm)  before each sublayer (pre)
norm                       LayerNorm (centre and scale)    RMSNorm (scale only)
MLP                        ReLU(x W₁) W₂                   down(silu(gate x) · up x)
positions                  sinusoids added to the input    RoPE rotating q and k
========================  ==============================  ==========================

``Z = LayerNorm(X + SelfAttention(X))``, ``H = LayerNorm(ReLU(Z W₁) W₂ + Z)``; attention is
the same causal (grouped-query) attention, so the config's head counts apply unchanged.
"""

from __future__ import annotations

import numpy as np

from ..graph import constant
from ..ops import layer_norm, relu, reshape, take
from .decoder import DecoderLM, flatten_rows
from .layers import attention_specs, linear, self_attention


def sinusoidal_positions(seq: int, dim: int) -> np.ndarray:
    """``PE[t, 2i] = sin(t / 10000^(2i/dim))``, ``PE[t, 2i+1] = cos(...)``: (seq, dim)."""
    angles = np.arange(seq)[:, None] / 10000.0 ** (np.arange(0, dim, 2) / dim)
    table = np.zeros((seq, dim))
    table[:, 0::2] = np.sin(angles)
    table[:, 1::2] = np.cos(angles[:, : dim // 2])
    return table


class VaswaniDecoder(DecoderLM):
    """A decoder-only language model made of original (post-norm) Transformer blocks."""

    def parameter_specs(self):
        c = self.config
        specs = {"embed.weight": ((c.vocab_size, c.dim), "normal")}
        for i in range(c.n_layers):
            layer = f"layers.{i}"
            specs.update(attention_specs(c, f"{layer}.attn"))
            specs.update({
                f"{layer}.norm1.weight": ((c.dim,), "ones"),
                f"{layer}.norm1.bias": ((c.dim,), "zeros"),
                f"{layer}.mlp.w1.weight": ((c.ffn_dim, c.dim), "normal"),
                f"{layer}.mlp.w2.weight": ((c.dim, c.ffn_dim), "normal"),
                f"{layer}.norm2.weight": ((c.dim,), "ones"),
                f"{layer}.norm2.bias": ((c.dim,), "zeros"),
            })  # fmt: skip
        specs["head.weight"] = ((c.vocab_size, c.dim), "normal")
        return specs

    def build_logits(self, tokens, p):
        c = self.config
        batch, seq = tokens.shape
        positions = constant(sinusoidal_positions(seq, c.dim).astype(self.dtype), "positions")
        x = flatten_rows(take(p["embed.weight"], tokens) + positions)
        attention = []
        for i in range(c.n_layers):
            layer = f"layers.{i}"

            def norm(h, k, layer=layer):
                return layer_norm(h, p[f"{layer}.{k}.weight"], p[f"{layer}.{k}.bias"], c.norm_eps)

            weights = tuple(p[f"{layer}.attn.{n}.weight"] for n in "qkvo")
            out, probs, _ = self_attention(x, weights, c, batch, seq, rotary=False)
            attention.append(probs)
            z = norm(x + out, "norm1")
            mlp = linear(relu(linear(z, p[f"{layer}.mlp.w1.weight"])), p[f"{layer}.mlp.w2.weight"])
            x = norm(mlp + z, "norm2")
        logits = linear(x, p["head.weight"])
        return reshape(logits, (batch, seq, c.vocab_size)), attention
