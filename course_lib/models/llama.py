"""The LLaMA decoder on course_lib ops, numerically the same model as Hugging Face's
``LlamaForCausalLM``: pre-norm RMSNorm (ε inside the square root), RoPE (half-split) on
queries and keys, causal grouped-query attention (query head h reads kv head h // (H/KV)),
SwiGLU MLP ``down(silu(gate(x)) · up(x))``, weights (out, in) used as ``x @ W.T``, no biases.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from ..errors import FeedError, ShapeError
from ..graph import Node
from ..ops import causal_attention, matmul, reshape, rms_norm, rope, silu, take, transpose
from .decoder import DecoderLM, flatten_rows


def linear(x: Node, weight: Node) -> Node:
    """``x @ weight.T`` for a weight stored (out, in), as PyTorch and Hugging Face do."""
    return matmul(x, transpose(weight))


class Llama(DecoderLM):
    """A LLaMA-style decoder with parameters keyed by Hugging Face names.

    >>> model = Llama(LlamaConfig.tiny(), seed=0)
    >>> model.logits(tokens)                  # (batch, seq, vocab)
    >>> loss, grads = model.loss_and_grads(tokens)
    >>> grads["model.layers.0.self_attn.q_proj.weight"].shape
    """

    def parameter_specs(self):
        c = self.config
        d = c.head_dim
        specs = {"model.embed_tokens.weight": ((c.vocab_size, c.dim), "normal")}
        for i in range(c.n_layers):
            layer = f"model.layers.{i}"
            specs.update({
                f"{layer}.self_attn.q_proj.weight": ((c.n_heads * d, c.dim), "normal"),
                f"{layer}.self_attn.k_proj.weight": ((c.n_kv_heads * d, c.dim), "normal"),
                f"{layer}.self_attn.v_proj.weight": ((c.n_kv_heads * d, c.dim), "normal"),
                f"{layer}.self_attn.o_proj.weight": ((c.dim, c.n_heads * d), "normal"),
                f"{layer}.mlp.gate_proj.weight": ((c.ffn_dim, c.dim), "normal"),
                f"{layer}.mlp.up_proj.weight": ((c.ffn_dim, c.dim), "normal"),
                f"{layer}.mlp.down_proj.weight": ((c.dim, c.ffn_dim), "normal"),
                f"{layer}.input_layernorm.weight": ((c.dim,), "ones"),
                f"{layer}.post_attention_layernorm.weight": ((c.dim,), "ones"),
            })  # fmt: skip
        specs["model.norm.weight"] = ((c.dim,), "ones")
        specs["lm_head.weight"] = ((c.vocab_size, c.dim), "normal")
        return specs

    def build_logits(self, tokens, p):
        c = self.config
        batch, seq = tokens.shape
        h = flatten_rows(take(p["model.embed_tokens.weight"], tokens))
        attention = []
        for i in range(c.n_layers):
            layer = f"model.layers.{i}"
            a = rms_norm(h, p[f"{layer}.input_layernorm.weight"], c.norm_eps)
            out, probs = self.attention(a, p, f"{layer}.self_attn", batch, seq)
            attention.append(probs)
            h = h + out
            m = rms_norm(h, p[f"{layer}.post_attention_layernorm.weight"], c.norm_eps)
            h = h + swiglu(m, p, f"{layer}.mlp")
        h = rms_norm(h, p["model.norm.weight"], c.norm_eps)
        logits = linear(h, p["lm_head.weight"])
        return reshape(logits, (batch, seq, c.vocab_size)), attention

    def attention(self, x: Node, p: dict, prefix: str, batch: int, seq: int):
        """Causal GQA on rows ``x`` (batch·seq, dim): (projected output, probabilities)."""
        c = self.config
        d = c.head_dim

        def heads(name, n):
            return reshape(linear(x, p[f"{prefix}.{name}.weight"]), (batch, seq, n, d))

        q = rope(heads("q_proj", c.n_heads), c.rope_theta, seq_axis=1)
        k = rope(heads("k_proj", c.n_kv_heads), c.rope_theta, seq_axis=1)
        out, probs = causal_attention(q, k, heads("v_proj", c.n_kv_heads))
        out = reshape(out, (batch * seq, c.n_heads * d))
        return linear(out, p[f"{prefix}.o_proj.weight"]), probs


def swiglu(x: Node, p: dict, prefix: str) -> Node:
    """LLaMA's MLP: ``down(silu(gate(x)) · up(x))``."""
    gate = silu(linear(x, p[f"{prefix}.gate_proj.weight"]))
    return linear(gate * linear(x, p[f"{prefix}.up_proj.weight"]), p[f"{prefix}.down_proj.weight"])


_IGNORED_SUFFIXES = ("rotary_emb.inv_freq",)  # buffers recomputed from the config


def load_hf_state_dict(model: Llama, state_dict: Mapping) -> Llama:
    """Copy a Hugging Face ``LlamaForCausalLM`` state dict into ``model`` (in place).

    Values may be torch tensors or arrays; they are converted to the model's dtype.
    Missing or unexpected keys raise :class:`FeedError`, wrong shapes :class:`ShapeError`.
    """
    given = {k: v for k, v in state_dict.items() if not k.endswith(_IGNORED_SUFFIXES)}
    missing = sorted(set(model.params) - set(given))
    unexpected = sorted(set(given) - set(model.params))
    if missing or unexpected:
        raise FeedError(
            "state dict does not match the model: "
            f"missing {missing[:5]}{' ...' if len(missing) > 5 else ''}, "
            f"unexpected {unexpected[:5]}{' ...' if len(unexpected) > 5 else ''}"
        )
    arrays = {}
    for name, value in given.items():
        if hasattr(value, "detach"):  # a torch tensor (NumPy has no bfloat16: widen it)
            value = value.detach().cpu()
            value = (value.float() if str(value.dtype) == "torch.bfloat16" else value).numpy()
        array = np.asarray(value)
        if array.shape != model.params[name].shape:
            raise ShapeError(
                f"state dict entry {name} has shape {array.shape}, "
                f"the model expects {model.params[name].shape}"
            )
        arrays[name] = np.ascontiguousarray(array, dtype=model.dtype)
    model.params.update(arrays)
    return model
