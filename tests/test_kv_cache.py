"""Decoding with a KV cache gives what recomputing the prefix gives (course_lib.models.kv_cache,
Llama.decode, generate(kv_cache=True)), and costs what the FLOP table and 09's formulas say."""

import dataclasses

import numpy as np
import pytest

import course_lib as cl
from course_lib.models import (
    ARCHITECTURE,
    DecoderLM,
    Llama,
    LlamaConfig,
    count_flops,
    flops_table,
    generate,
)
from course_lib.models.flops import COURSE_LIB
from course_lib.models.inference import kv_cache_bytes

CONFIG = LlamaConfig(dim=16, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=24, vocab_size=32,
                     max_seq_len=16)  # fmt: skip


@pytest.fixture
def model():
    # float64 and a large init: a wrong position or a missing key would show far above 1e-12
    return Llama(CONFIG, seed=0, dtype=np.float64, init_std=0.4)


@pytest.fixture
def tokens():
    return np.random.default_rng(1).integers(0, CONFIG.vocab_size, (2, 11))


def test_prefill_gives_the_logits_of_the_whole_sequence(model, tokens):
    logits, cache = model.decode(tokens)
    np.testing.assert_allclose(logits, model.logits(tokens), rtol=0, atol=1e-12)
    assert cache.length == 11 and cache.batch == 2 and len(cache.keys) == CONFIG.n_layers
    assert cache.keys[0].shape == (2, 11, CONFIG.n_kv_heads, CONFIG.head_dim)


@pytest.mark.parametrize("prefill", [1, 4, 10])
def test_one_token_at_a_time_gives_the_recomputed_logits(model, tokens, prefill):
    full = model.logits(tokens)
    logits, cache = model.decode(tokens[:, :prefill])
    np.testing.assert_allclose(logits, full[:, :prefill], rtol=0, atol=1e-12)
    for t in range(prefill, tokens.shape[1]):
        logits, cache = model.decode(tokens[:, t : t + 1], cache)
        assert logits.shape == (2, 1, CONFIG.vocab_size) and cache.length == t + 1
        np.testing.assert_allclose(logits[:, 0], full[:, t], rtol=0, atol=1e-12)


def test_several_new_tokens_attend_causally_to_each_other(model, tokens):
    full = model.logits(tokens)
    _, cache = model.decode(tokens[:, :5])
    logits, cache = model.decode(tokens[:, 5:9], cache)  # four new tokens at once
    np.testing.assert_allclose(logits, full[:, 5:9], rtol=0, atol=1e-12)
    logits, _ = model.decode(tokens[:, 9:], cache)
    np.testing.assert_allclose(logits, full[:, 9:], rtol=0, atol=1e-12)


def test_a_step_leaves_the_old_cache_as_it_was(model, tokens):
    _, cache = model.decode(tokens[:, :6])
    keys = [k.numpy() for k in cache.keys]
    a, grown = model.decode(tokens[:, 6:7], cache)
    b, _ = model.decode(tokens[:, 6:7], cache)  # the same step again from the same prefix
    np.testing.assert_array_equal(a, b)
    assert cache.length == 6 and grown.length == 7
    for before, after in zip(keys, cache.keys):
        np.testing.assert_array_equal(before, after.numpy())
    other, _ = model.decode(tokens[:, 7:8], cache)  # another continuation of the prefix
    np.testing.assert_allclose(other[:, 0], model.logits(
        np.concatenate([tokens[:, :6], tokens[:, 7:8]], axis=1))[:, 6], atol=1e-12)


def test_the_cache_holds_the_weights_of_its_prefill(model, tokens):
    _, cache = model.decode(tokens[:, :5])
    old, _ = model.decode(tokens[:, 5:6], cache)
    model.params["lm_head.weight"] *= 2.0  # "trained further"
    again, _ = model.decode(tokens[:, 5:6], cache)
    np.testing.assert_array_equal(old, again)
    fresh, _ = model.decode(tokens[:, :6])
    np.testing.assert_allclose(fresh[:, 5], 2.0 * old[:, 0], atol=1e-12)


def test_float32_decoding_agrees_to_rounding(tokens):
    model = Llama(CONFIG, seed=0, init_std=0.4)
    full = model.logits(tokens)
    _, cache = model.decode(tokens[:, :3])
    for t in range(3, tokens.shape[1]):
        logits, cache = model.decode(tokens[:, t : t + 1], cache)
        np.testing.assert_allclose(logits[:, 0], full[:, t], rtol=1e-5, atol=1e-5)
        assert logits.dtype == np.float32


def test_cache_bytes_are_the_inference_formula(model, tokens):
    _, cache = model.decode(tokens)
    assert cache.nbytes == kv_cache_bytes(CONFIG, 11, batch=2, dtype_bytes=8)
    gqa_to_mha = dataclasses.replace(CONFIG, n_kv_heads=CONFIG.n_heads)
    _, mha_cache = Llama(gqa_to_mha, dtype=np.float64).decode(tokens)
    assert mha_cache.nbytes == 2 * cache.nbytes


@pytest.mark.parametrize("b, s, p", [(1, 1, 7), (2, 1, 1), (2, 3, 4)])
def test_a_decoding_graph_costs_the_tables_flops_with_past_tokens(model, b, s, p):
    c, d = CONFIG, CONFIG.head_dim
    tokens = cl.variable("tokens", (b, s), np.int64)
    params = {n: cl.variable(n, a.shape) for n, a in model.params.items()}
    past = [(cl.variable(f"k{i}", (b, p, c.n_kv_heads, d)),
             cl.variable(f"v{i}", (b, p, c.n_kv_heads, d))) for i in range(c.n_layers)]  # fmt: skip
    logits, _, present = model.build_decoder(tokens, params, past)
    assert present[0][0].shape == (b, p + s, c.n_kv_heads, d)
    assert count_flops(logits).total == flops_table(c, b, s, COURSE_LIB, past=p).total


def test_cache_limits_are_named(model, tokens):
    _, cache = model.decode(tokens)  # 11 of 16 positions
    with pytest.raises(cl.ShapeError, match="11 cached \\+ 6 new tokens exceed max_seq_len=16"):
        model.decode(np.zeros((2, 6), np.int64), cache)
    with pytest.raises(cl.ShapeError, match="holds 2 sequence\\(s\\), got tokens for 1"):
        model.decode(np.zeros((1, 1), np.int64), cache)
    with pytest.raises(cl.FeedError, match="token ids must lie in"):
        model.decode(np.full((2, 1), 99), cache)
    with pytest.raises(cl.ShapeError, match="max_seq_len=16"):
        model.decode(np.zeros((1, 17), np.int64))


@pytest.mark.parametrize("temperature, top_k", [(0.0, None), (1.0, None), (0.8, 5)])
@pytest.mark.parametrize("prompt, new", [([1, 2, 3], 10), ([4, 5], 30), (list(range(20)), 4)],
                         ids=["inside the window", "past the window", "long prompt"])
def test_generate_with_a_cache_gives_the_same_tokens(temperature, top_k, prompt, new):
    model = Llama(CONFIG, seed=0, init_std=0.5)  # float32, as the notebooks sample
    recomputed = generate(model, prompt, new, temperature, top_k, seed=4)
    assert generate(model, prompt, new, temperature, top_k, seed=4, kv_cache=True) == recomputed


class Bigram(DecoderLM):
    """A decoder with logits but no decode method: each token's row of one matrix."""

    def parameter_specs(self):
        return {"table": ((CONFIG.vocab_size, CONFIG.vocab_size), "normal")}

    def build_logits(self, tokens, p):
        return cl.take(p["table"], tokens), []


def test_generate_with_a_cache_needs_a_decode_method():
    assert len(generate(Bigram(CONFIG), [1, 2], 3)) == 5  # recomputing needs only logits
    with pytest.raises(cl.GraphError, match="Bigram has none"):
        generate(Bigram(CONFIG), [1, 2], 3, kv_cache=True)


@pytest.mark.parametrize("switches", [{f: c[1]} for f, c in ARCHITECTURE.items()]
                         + [{f: c[1] for f, c in ARCHITECTURE.items()}],
                         ids=[*(c[1] for c in ARCHITECTURE.values()), "original"])  # fmt: skip
def test_every_architecture_decodes_as_it_recomputes(switches, tokens):
    """Sinusoids at the cache's positions, post-norm, LayerNorm and ReLU decode as well."""
    model = Llama(dataclasses.replace(CONFIG, **switches), seed=0, dtype=np.float64, init_std=0.4)
    full = model.logits(tokens)
    logits, cache = model.decode(tokens[:, :4])
    steps = [logits]
    for t in range(4, tokens.shape[1]):
        logits, cache = model.decode(tokens[:, t : t + 1], cache)
        steps.append(logits)
    np.testing.assert_allclose(np.concatenate(steps, axis=1), full, rtol=0, atol=1e-12)
