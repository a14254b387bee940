"""The LLaMA decoder on course_lib ops, numerically the same model as Hugging Face's
``LlamaForCausalLM``: pre-norm RMSNorm (ε inside the square root), RoPE (half-split) on
queries and keys, causal grouped-query attention (query head h reads kv head h // (H/KV)),
SwiGLU MLP ``down(silu(gate(x)) · up(x))``, weights (out, in) used as ``x @ W.T``, no biases.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from ..errors import FeedError, ShapeError
from ..ops import reshape, rms_norm, take
from .decoder import DecoderLM, flatten_rows
from .layers import attention_specs, linear, self_attention, swiglu


class Llama(DecoderLM):
    """A LLaMA-style decoder with parameters keyed by Hugging Face names.

    >>> model = Llama(LlamaConfig.tiny(), seed=0)
    >>> model.logits(tokens)                  # (batch, seq, vocab)
    >>> loss, grads = model.loss_and_grads(tokens)
    >>> grads["model.layers.0.self_attn.q_proj.weight"].shape
    """

    def parameter_specs(self):
        c = self.config
        specs = {"model.embed_tokens.weight": ((c.vocab_size, c.dim), "normal")}
        for i in range(c.n_layers):
            layer = f"model.layers.{i}"
            specs.update(attention_specs(c, f"{layer}.self_attn", _PROJECTIONS))
            specs.update({
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
            weights = tuple(p[f"{layer}.self_attn.{n}.weight"] for n in _PROJECTIONS)
            out, probs = self_attention(a, weights, c, batch, seq, rotary=True)
            attention.append(probs)
            h = h + out
            m = rms_norm(h, p[f"{layer}.post_attention_layernorm.weight"], c.norm_eps)
            mlp = (p[f"{layer}.mlp.{n}_proj.weight"] for n in ("gate", "up", "down"))
            h = h + swiglu(m, *mlp)
        h = rms_norm(h, p["model.norm.weight"], c.norm_eps)
        logits = linear(h, p["lm_head.weight"])
        return reshape(logits, (batch, seq, c.vocab_size)), attention


_PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj")
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
