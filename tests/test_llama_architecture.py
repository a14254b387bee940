"""The config's architecture switches (LLaMA -> the original Transformer, one at a time): each
wires what the docs say, checked against NumPy written from the formulas; the parameters are
the ones each choice needs; the default stays LLaMA; the calculators refuse what they do not
count."""

import dataclasses
import itertools

import numpy as np
import pytest

import course_lib as cl
from course_lib.models import ARCHITECTURE, Llama, LlamaConfig, param_count, training_memory
from course_lib.models.flops import flops_table
from course_lib.models.inference import kv_cache_bytes

CONFIG = LlamaConfig(dim=16, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=24, vocab_size=32,
                     max_seq_len=16)  # fmt: skip
ORIGINAL = {field: choices[1] for field, choices in ARCHITECTURE.items()}
EVERY_COMBINATION = [dict(zip(ARCHITECTURE, c)) for c in itertools.product(*ARCHITECTURE.values())]


def sinusoids(seq, dim):
    t, i = np.arange(seq)[:, None], np.arange(0, dim, 2)[None, :]
    table = np.empty((seq, dim))
    table[:, 0::2], table[:, 1::2] = np.sin(t / 10000 ** (i / dim)), np.cos(t / 10000 ** (i / dim))
    return table


def rotate(x, theta):
    """Half-split RoPE of x (batch, seq, heads, d)."""
    d = x.shape[-1]
    angles = np.arange(x.shape[1])[:, None] * theta ** (-np.arange(0, d, 2) / d)
    cos, sin = np.cos(angles)[None, :, None], np.sin(angles)[None, :, None]
    a, b = x[..., : d // 2], x[..., d // 2 :]
    return np.concatenate([a * cos - b * sin, a * sin + b * cos], axis=-1)


def norm(c, p, x, name):
    """RMSNorm, or LayerNorm (centred first, a bias after), with the weights ``name``."""
    if c.norm == "layer":
        x = x - x.mean(-1, keepdims=True)
    x = x / np.sqrt((x * x).mean(-1, keepdims=True) + c.norm_eps) * p[f"{name}.weight"]
    return x + p[f"{name}.bias"] if c.norm == "layer" else x


def attention(c, p, x, layer):
    """Causal grouped-query attention of x (batch, seq, dim), RoPE on q and k if asked."""
    (b, s, _), n, kv, d = x.shape, c.n_heads, c.n_kv_heads, c.head_dim
    w = {k: p[f"{layer}.self_attn.{k}_proj.weight"] for k in "qkvo"}
    q, k, v = ((x @ w[k].T).reshape(b, s, heads, d) for k, heads in zip("qkv", (n, kv, kv)))
    if c.positions == "rope":
        q, k = rotate(q, c.rope_theta), rotate(k, c.rope_theta)
    k, v = np.repeat(k, n // kv, axis=2), np.repeat(v, n // kv, axis=2)
    scores = np.einsum("bthd,bshd->bhts", q, k) / np.sqrt(d)
    scores = np.where(np.tril(np.ones((s, s), bool)), scores, -np.inf)
    weights = np.exp(scores - scores.max(-1, keepdims=True))
    weights /= weights.sum(-1, keepdims=True)
    return np.einsum("bhts,bshd->bthd", weights, v).reshape(b, s, n * d) @ w["o"].T


def mlp(c, p, x, layer):
    """down(silu(gate x) · up x) or down(relu(up x))."""
    up = x @ p[f"{layer}.mlp.up_proj.weight"].T
    if c.mlp == "swiglu":
        gate = x @ p[f"{layer}.mlp.gate_proj.weight"].T
        hidden = gate / (1 + np.exp(-gate)) * up
    else:
        hidden = np.maximum(up, 0)
    return hidden @ p[f"{layer}.mlp.down_proj.weight"].T


def reference_logits(model, tokens):
    """The decoder in NumPy, written from the formulas of each switch."""
    c, p = model.config, {name: cl.to_numpy(a) for name, a in model.params.items()}
    h = p["model.embed_tokens.weight"][tokens].astype(np.float64)
    if c.positions == "sinusoidal":
        h = h * np.sqrt(c.dim) + sinusoids(tokens.shape[1], c.dim)
    for i in range(c.n_layers):
        layer = f"model.layers.{i}"
        if c.norm_position == "pre":  # h + f(norm(h))
            h = h + attention(c, p, norm(c, p, h, f"{layer}.input_layernorm"), layer)
            h = h + mlp(c, p, norm(c, p, h, f"{layer}.post_attention_layernorm"), layer)
        else:  # norm(h + f(h))
            h = norm(c, p, h + attention(c, p, h, layer), f"{layer}.post_attention_layernorm")
            h = norm(c, p, h + mlp(c, p, h, layer), f"{layer}.post_feedforward_layernorm")
    if c.norm_position == "pre":
        h = norm(c, p, h, "model.norm")
    return h @ p["lm_head.weight"].T


def perturbed(config, seed=0):
    """A float64 model whose norm weights and biases are not 1 and 0 (so they matter)."""
    model = Llama(config, seed=seed, dtype=np.float64, init_std=0.4)
    rng = np.random.default_rng(seed + 1)
    for name, value in model.params.items():
        if "norm" in name:
            value += cl.to_device(0.3 * rng.standard_normal(value.shape))
    return model


@pytest.mark.parametrize("switches", EVERY_COMBINATION, ids=lambda s: "-".join(s.values()))
def test_every_combination_is_the_formulas(switches):
    model = perturbed(dataclasses.replace(CONFIG, **switches))
    tokens = np.random.default_rng(2).integers(0, CONFIG.vocab_size, (2, 9))
    tol = 1e-6 if switches["positions"] == "rope" else 1e-10  # float32 RoPE tables, as in HF
    np.testing.assert_allclose(model.logits(tokens), reference_logits(model, tokens),
                               rtol=tol, atol=tol)  # fmt: skip


@pytest.mark.parametrize("field", list(ARCHITECTURE))
def test_each_switch_changes_the_model(field):
    """The same weights (where the two share them) give other logits with the switch flipped."""
    llama = perturbed(CONFIG)
    switched = perturbed(dataclasses.replace(CONFIG, **{field: ARCHITECTURE[field][1]}))
    shared = set(llama.params) & set(switched.params)
    switched.params.update({name: llama.params[name] for name in shared})
    tokens = np.random.default_rng(3).integers(0, CONFIG.vocab_size, (1, 8))
    assert not np.allclose(llama.logits(tokens), switched.logits(tokens), atol=1e-3)


def test_each_choice_has_the_parameters_it_needs():
    h, i, N = CONFIG.dim, CONFIG.ffn_dim, CONFIG.n_layers
    llama = Llama(CONFIG).params
    assert Llama(dataclasses.replace(CONFIG)).n_params == param_count(CONFIG)
    changes = {  # field -> (names added, names removed, change in the count)
        "norm_position": ({"model.layers.0.post_feedforward_layernorm.weight"},
                          {"model.layers.0.input_layernorm.weight", "model.norm.weight"}, -h),
        "norm": ({"model.layers.1.input_layernorm.bias", "model.norm.bias"}, set(),
                 (2 * N + 1) * h),
        "mlp": (set(), {"model.layers.0.mlp.gate_proj.weight"}, -N * h * i),
        "positions": (set(), set(), 0),  # sinusoids are a constant, not a parameter
    }  # fmt: skip
    for field, (added, removed, count) in changes.items():
        params = Llama(dataclasses.replace(CONFIG, **{field: ARCHITECTURE[field][1]})).params
        assert added <= set(params) - set(llama) and removed <= set(llama) - set(params), field
        assert sum(a.size for a in params.values()) - param_count(CONFIG) == count, field
    original = Llama(dataclasses.replace(CONFIG, **ORIGINAL)).params
    assert not any("gate_proj" in name or name == "model.norm.weight" for name in original)


def test_the_default_is_llama_and_bad_choices_are_named():
    assert {f: getattr(CONFIG, f) for f in ARCHITECTURE} == {"norm_position": "pre",
            "norm": "rms", "mlp": "swiglu", "positions": "rope"}  # fmt: skip
    assert CONFIG.changes_from_llama == {}
    assert dataclasses.replace(CONFIG, **ORIGINAL).changes_from_llama == ORIGINAL
    for field, bad in [("norm", "batch"), ("mlp", "gelu"), ("positions", None),
                       ("norm_position", "Pre")]:  # fmt: skip
        with pytest.raises(cl.ParameterError, match=f"LlamaConfig.{field} must be one of"):
            dataclasses.replace(CONFIG, **{field: bad})


@pytest.mark.parametrize("calculator", [
    lambda c: param_count(c), lambda c: flops_table(c, 1, 8), lambda c: kv_cache_bytes(c),
    lambda c: training_memory(c, 1, 8),
], ids=["param_count", "flops_table", "kv_cache_bytes", "training_memory"])  # fmt: skip
def test_calculators_count_llamas_block_only(calculator):
    calculator(CONFIG)
    with pytest.raises(cl.ParameterError, match=r"counts LLaMA's block .* mlp='relu'"):
        calculator(dataclasses.replace(CONFIG, mlp="relu"))
