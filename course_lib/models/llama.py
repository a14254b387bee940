"""The LLaMA decoder on course_lib ops, numerically the same model as Hugging Face's
``LlamaForCausalLM``: pre-norm RMSNorm (ε inside the square root), RoPE (half-split) on
queries and keys, causal grouped-query attention (query head h reads kv head h // (H/KV)),
SwiGLU MLP ``down(silu(gate(x)) · up(x))``, weights (out, in) used as ``x @ W.T``, no biases.

The config switches each of the four back to the original Transformer (Vaswani et al., 2017)
for an ablation, one at a time, in the same block:

=============  ==============================  ===================================
switch         LLaMA (the default)             original
=============  ==============================  ===================================
norm_position  "pre": ``h + f(norm(h))``       "post": ``norm(h + f(h))``, no final norm
norm           "rms": RMSNorm (scale only)     "layer": LayerNorm (centre, scale, bias)
mlp            "swiglu": gate, up, down        "relu": ``down(relu(up(x)))``
positions      "rope": rotating q and k        "sinusoidal": added to embeddings · √h
=============  ==============================  ===================================
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from .. import backend, params
from ..backend import to_numpy
from ..errors import DeviceError, FeedError, GraphError, ShapeError
from ..graph import constant
from ..ops import layer_norm, reshape, rms_norm, take
from ..runtime import Tensor, no_grad
from .decoder import DecoderLM, flatten_rows, spec_numbers
from .kv_cache import KVCache
from .layers import attention_specs, linear, relu_mlp, self_attention, sinusoidal_positions, swiglu


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
            specs.update(self.block_specs(i))
        if c.norm_position == "pre":
            specs.update(self._norm_specs("model.norm"))
        specs["lm_head.weight"] = ((c.vocab_size, c.dim), "normal")
        return specs

    def block_specs(self, i: int) -> dict:
        """The parameter specs of block ``i``: attention, MLP, the two norms."""
        c, layer = self.config, f"model.layers.{i}"
        specs = attention_specs(c, f"{layer}.self_attn", _PROJECTIONS)
        mlp = ("gate", "up") if c.mlp == "swiglu" else ("up",)
        specs.update({f"{layer}.mlp.{n}_proj.weight": ((c.ffn_dim, c.dim), "normal")
                      for n in mlp})  # fmt: skip
        specs[f"{layer}.mlp.down_proj.weight"] = ((c.dim, c.ffn_dim), "normal")
        for norm in _NORMS[c.norm_position]:
            specs.update(self._norm_specs(f"{layer}.{norm}"))
        return specs

    def parameter_numbers(self):
        """The number of parameters, counted from block 0's specs (those of every block of a
        huge ``n_layers`` would fill the memory before the check)."""
        c = self.config
        final_norm = spec_numbers(self._norm_specs("model.norm")) if c.norm_position == "pre" else 0
        blocks = c.n_layers * spec_numbers(self.block_specs(0))
        return 2 * c.vocab_size * c.dim + blocks + final_norm

    def _norm_specs(self, name: str) -> dict:
        specs = {f"{name}.weight": ((self.config.dim,), "ones")}
        if self.config.norm == "layer":
            specs[f"{name}.bias"] = ((self.config.dim,), "zeros")
        return specs

    def build_logits(self, tokens, p):
        logits, attention, _ = self.build_decoder(tokens, p)
        return logits, attention

    def build_decoder(self, tokens, p, past=None):
        """The decoder on ``tokens`` (batch, seq) with parameters ``p`` (name -> node):
        logits, each layer's attention probabilities, and each layer's (keys, values).

        ``past`` is a KV cache, one (keys, values) pair per layer of earlier tokens, which
        the new tokens follow (see :func:`~course_lib.models.layers.self_attention`). The
        nodes may be symbolic (a graph to run or count) or eager tensors (computed now).
        """
        c = self.config
        batch, seq = tokens.shape
        x = take(p["model.embed_tokens.weight"], tokens)
        if c.positions == "sinusoidal":  # the embeddings scaled by √dim, as in the paper
            start = 0 if past is None else past[0][0].shape[1]
            table = sinusoidal_positions(seq, c.dim, start).astype(self.dtype)
            x = x * float(np.sqrt(c.dim)) + constant(table, "positions")
        h = flatten_rows(x)
        attention, present = [], []
        for i in range(c.n_layers):
            h, probs, kv = self.block(h, p, i, batch, seq, None if past is None else past[i])
            attention.append(probs)
            present.append(kv)
        if c.norm_position == "pre":  # a post-norm block already ends with a norm
            h = self.norm(h, p, "model.norm")
        logits = linear(h, p["lm_head.weight"])
        return reshape(logits, (batch, seq, c.vocab_size)), attention, present

    def block(self, h, p, i, batch, seq, past=None):
        """Block ``i`` on the rows ``h`` (batch·seq, dim): attention, then the MLP, each a
        residual sublayer, ``h + f(norm(h))`` (pre-norm) or ``norm(h + f(h))`` (post-norm).

        Returns the new rows, the attention probabilities and the keys and values (those of
        ``past``, the layer's KV cache, and the new ones).
        """
        c, pre, layer = self.config, self.config.norm_position == "pre", f"model.layers.{i}"
        norm1, norm2 = (f"{layer}.{name}" for name in _NORMS[c.norm_position])
        weights = tuple(p[f"{layer}.self_attn.{n}.weight"] for n in _PROJECTIONS)
        x = self.norm(h, p, norm1) if pre else h
        out, probs, kv = self_attention(x, weights, c, batch, seq, c.positions == "rope", past)
        h = h + out if pre else self.norm(h + out, p, norm1)
        out = self.mlp(self.norm(h, p, norm2) if pre else h, p, layer)
        h = h + out if pre else self.norm(h + out, p, norm2)
        return h, probs, kv

    def norm(self, x, p, name: str):
        """RMSNorm or LayerNorm (the config's ``norm``) with the weights called ``name``."""
        weight, eps = p[f"{name}.weight"], self.config.norm_eps
        if self.config.norm == "rms":
            return rms_norm(x, weight, eps)
        return layer_norm(x, weight, p[f"{name}.bias"], eps)

    def mlp(self, x, p, layer: str):
        """SwiGLU or the ReLU MLP (the config's ``mlp``) of block ``layer``."""
        up, down = p[f"{layer}.mlp.up_proj.weight"], p[f"{layer}.mlp.down_proj.weight"]
        if self.config.mlp == "swiglu":
            return swiglu(x, p[f"{layer}.mlp.gate_proj.weight"], up, down)
        return relu_mlp(x, up, down)

    def decode(self, tokens, cache: KVCache | None = None) -> tuple[np.ndarray, KVCache]:
        """Logits (batch, seq, vocab) of ``tokens`` that follow the tokens in ``cache``, and
        the cache grown by them; computed eagerly, one op at a time (no graph to compile
        for each new length).

        Without a cache this is the *prefill* (the same logits as :meth:`logits`); with one,
        ``tokens`` are usually one new token per sequence. The cache's parameters are those
        of the prefill: train the model further and the next prefill takes the new ones.

        >>> logits, cache = model.decode(prompt)               # prefill: (1, T, vocab)
        >>> logits, cache = model.decode([[next_id]], cache)   # one step: (1, 1, vocab)
        """
        self.check_device()
        tokens = self.check_tokens(tokens)
        cache = KVCache.empty(self.params, self.config) if cache is None else cache
        if cache.device != backend.get_device():
            raise DeviceError(
                f"this KVCache was made on the {cache.device!r} device, but course_lib runs on "
                f"{backend.get_device()!r}; prefill again (decode without a cache) after "
                "model.to(...)"
            )
        batch, seq = tokens.shape
        if batch < 1 or (seq < 1 and not cache.length):
            raise self.shape_error(batch, seq)
        self.check_params()
        cache.check_params(self.params, self.config)
        cache.check_room(batch, seq, self.config.max_seq_len)
        with no_grad():
            logits, _, present = self.build_decoder(Tensor(tokens), cache.params, cache.past())
        keys, values = zip(*present)
        return logits.numpy(), KVCache(cache.params, keys, values, config=cache.config)


_PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj")
#: Each block's two norms, in Hugging Face's style of names: before attention and before the
#: MLP (pre-norm, LLaMA's names), or after attention's residual add and after the MLP's
#: (post-norm, each named after the sublayer it follows).
_NORMS = {"pre": ("input_layernorm", "post_attention_layernorm"),
          "post": ("post_attention_layernorm", "post_feedforward_layernorm")}  # fmt: skip
_IGNORED_SUFFIXES = ("rotary_emb.inv_freq",)  # buffers recomputed from the config
_NUMPY_FLOATS = ("torch.float16", "torch.float32", "torch.float64")


def _host_array(value) -> np.ndarray:
    """``value`` as a host array; a torch tensor is detached and copied to the CPU, its
    floats of a dtype NumPy lacks (bfloat16, float8) widened to float32 (a course_lib
    Tensor, which has ``detach`` too, goes to ``to_numpy``)."""
    if type(value).__module__.partition(".")[0] == "torch":
        value = value.detach().cpu()
        if value.is_floating_point() and str(value.dtype) not in _NUMPY_FLOATS:
            value = value.float()
        value = value.numpy()
    return to_numpy(value)


def interleaved_to_half_split(weight, n_heads: int) -> np.ndarray:
    """The rows of a query or key projection (n_heads·d, dim) reordered for half-split RoPE.

    Meta's original LLaMA code rotates the pairs (x[2i], x[2i + 1]) (*interleaved*, as
    complex numbers); Hugging Face and this package rotate (x[i], x[i + d/2]) (*half-split*,
    ``rotate_half``). Within each head, put rows 0, 2, 4, ... first and 1, 3, 5, ... after:
    the half-split rotation of the new projection is the interleaved rotation of the old one,
    its entries reordered the same way, so every score q·k is unchanged. This is the
    permutation Hugging Face applies when it converts Meta's checkpoints. Returns a new
    NumPy array (``weight``, an array or a torch tensor, is left as it is).
    """
    n_heads = params.count(n_heads, "interleaved_to_half_split: n_heads", 1)
    w = _host_array(weight)
    if w.ndim != 2 or w.shape[0] % n_heads or (w.shape[0] // n_heads) % 2:
        raise ShapeError(
            f"interleaved_to_half_split: need a (n_heads·d, dim) matrix with an even head size "
            f"d, got shape {w.shape} for n_heads={n_heads}"
        )
    rows = np.arange(w.shape[0]).reshape(n_heads, -1, 2)  # head, pair i, (2i, 2i + 1)
    return w[rows.transpose(0, 2, 1).reshape(-1)]  # indexing copies, even when d = 2


def load_hf_state_dict(model: Llama, state_dict: Mapping) -> Llama:
    """Copy a Hugging Face ``LlamaForCausalLM`` state dict into ``model`` (in place).

    Values may be torch tensors or arrays; they are converted to the model's dtype and
    always copied: each parameter gets its own writable array, so training changes neither
    the caller's tensors nor, for tied weights (one tensor under two names), the twin.
    Missing or unexpected keys raise :class:`FeedError`, wrong shapes :class:`ShapeError`.
    """
    if not isinstance(model, Llama) or not isinstance(state_dict, Mapping):
        raise GraphError(
            f"load_hf_state_dict(model, state_dict) takes a Llama and a mapping of names to "
            f"tensors, got {type(model).__name__} and {type(state_dict).__name__}"
        )
    model.check_device()
    expected = {name: shape for name, (shape, _) in model.parameter_specs().items()}
    given = {k: v for k, v in state_dict.items()
             if not (isinstance(k, str) and k.endswith(_IGNORED_SUFFIXES))}  # fmt: skip
    missing = sorted(set(expected) - set(given))
    unexpected = sorted(set(given) - set(expected), key=str)  # a key may be no string
    if missing or unexpected:
        tied = missing == ["lm_head.weight"] and "model.embed_tokens.weight" in given
        raise FeedError(
            "state dict does not match the model: "
            f"missing {missing[:5]}{' ...' if len(missing) > 5 else ''}, "
            f"unexpected {unexpected[:5]}{' ...' if len(unexpected) > 5 else ''}"
            + ("; a checkpoint of tied embeddings stores them once: pass {**state_dict, "
               "'lm_head.weight': state_dict['model.embed_tokens.weight']}" if tied else "")
        )
    arrays = {}
    for name, value in given.items():
        array = _host_array(value)
        if array.shape != expected[name]:
            raise ShapeError(
                f"state dict entry {name} has shape {array.shape}, "
                f"the model expects {expected[name]}"
            )
        params.numeric_array(array, f"state dict entry {name}")  # before a cast drops any part
        array = np.array(array, dtype=model.dtype, order="C", copy=True)
        params.finite_array(array, f"state dict entry {name}")
        arrays[name] = backend.to_device(array, f"state dict entry {name}")
    model.params.update(arrays)
    return model
