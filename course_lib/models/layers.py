"""The layers of the decoder: linear maps with (out, in) weights, causal self-attention on
rows of tokens, LLaMA's SwiGLU MLP and the original Transformer's ReLU MLP and sinusoidal
positions."""

from __future__ import annotations

import numpy as np

from .. import params
from ..graph import Node
from ..ops import causal_attention, concat, matmul, relu, reshape, rope, silu, transpose
from .config import LlamaConfig


def linear(x: Node, weight: Node) -> Node:
    """``x @ weight.T`` for a weight stored (out, in), as PyTorch and Hugging Face do."""
    return matmul(x, transpose(weight))


def attention_specs(config: LlamaConfig, prefix: str, names: tuple[str, ...]) -> dict:
    """Parameter specs of the q, k, v, o projections called ``{prefix}.{name}.weight`` (the
    four ``names`` in that order)."""
    c, d = config, config.head_dim
    shapes = [(c.n_heads * d, c.dim), (c.n_kv_heads * d, c.dim), (c.n_kv_heads * d, c.dim),
              (c.dim, c.n_heads * d)]  # fmt: skip
    return {f"{prefix}.{name}.weight": (shape, "normal") for name, shape in zip(names, shapes)}


def self_attention(
    x: Node,
    weights: tuple,
    config: LlamaConfig,
    batch: int,
    seq: int,
    rotary: bool,
    past: tuple[Node, Node] | None = None,
) -> tuple[Node, Node, tuple[Node, Node]]:
    """Causal grouped-query self-attention on rows ``x`` (batch·seq, dim).

    ``weights`` are the (q, k, v, o) projection nodes; with ``rotary`` RoPE rotates q and k
    before the heads are grouped. ``past`` holds the keys (rotated) and values
    (batch, p, n_kv, d) of p earlier tokens, a KV cache: the ``seq`` new tokens sit at
    positions p, p + 1, ... and attend to those p tokens and to each other (causally).

    Returns (the projected output, the probabilities (batch, n, seq, p + seq), the keys and
    values of all p + seq tokens: the cache grown by the new ones).
    """
    c, d = config, config.head_dim
    wq, wk, wv, wo = weights
    start = 0 if past is None else past[0].shape[1]

    def heads(w, n):
        return reshape(linear(x, w), (batch, seq, n, d))

    q, k, v = heads(wq, c.n_heads), heads(wk, c.n_kv_heads), heads(wv, c.n_kv_heads)
    if rotary:
        q, k = (rope(a, c.rope_theta, seq_axis=1, start=start) for a in (q, k))
    if past is not None:
        k, v = concat([past[0], k], axis=1), concat([past[1], v], axis=1)
    out, probs = causal_attention(q, k, v)
    return linear(reshape(out, (batch * seq, c.n_heads * d)), wo), probs, (k, v)


def swiglu(x: Node, gate: Node, up: Node, down: Node) -> Node:
    """LLaMA's MLP: ``down(silu(gate(x)) · up(x))``."""
    return linear(silu(linear(x, gate)) * linear(x, up), down)


def relu_mlp(x: Node, up: Node, down: Node) -> Node:
    """The original Transformer's MLP: ``down(relu(up(x)))``, ReLU(x W₁) W₂ without biases."""
    return linear(relu(linear(x, up)), down)


def sinusoidal_positions(seq: int, dim: int, start: int = 0) -> np.ndarray:
    """The original Transformer's positions ``start .. start + seq − 1``, added to the
    embeddings: ``PE[t, 2i] = sin(t / 10000^(2i/dim))``, ``PE[t, 2i+1] = cos(...)``; ``seq``,
    ``dim`` and ``start`` are integers >= 0."""
    seq, dim, start = (params.count(v, f"sinusoidal_positions: {name}")
                       for name, v in (("seq", seq), ("dim", dim), ("start", start)))  # fmt: skip
    angles = np.arange(start, start + seq)[:, None] / 10000.0 ** (np.arange(0, dim, 2) / dim)
    table = np.zeros((seq, dim))
    table[:, 0::2] = np.sin(angles)
    table[:, 1::2] = np.cos(angles[:, : dim // 2])
    return table
