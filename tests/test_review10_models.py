"""Review 10 of sampling, generation, the KV cache, the tokenizer and the small modules:
top-k chosen on the logits with ties to the lowest ids, ragged ids for decode, and oracle
checks (torch, hand counts) of sampling, generation and the layers."""

import numpy as np
import pytest

from conftest import oracle_import
from course_lib.errors import ShapeError
from course_lib.models import Llama, LlamaConfig, generate
from course_lib.models.batchnorm import conv2d, fold_batchnorm
from course_lib.models.sampling import next_token_distribution
from course_lib.models.tokenizer import ByteTokenizer

CONFIG = LlamaConfig(dim=16, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=24, vocab_size=32,
                     max_seq_len=8)  # fmt: skip


@pytest.fixture(scope="module")
def model():
    return Llama(CONFIG, seed=0, dtype=np.float64, init_std=0.4)


def test_top_k_is_chosen_on_the_logits_even_when_a_huge_temperature_ties_them():
    # /1e308 rounds the differences of 1e-20 to 0: the kept token must still be the argmax
    probs = next_token_distribution(np.array([0.0, -1e-20, -2e-20]), 1e308, 1)
    np.testing.assert_array_equal(probs, [1.0, 0.0, 0.0])


@pytest.mark.parametrize("temperature", [1e-300, 0.5, 1.0, 1e300])
def test_top_k_of_1_is_greedy_decoding_with_ties_too(temperature):
    logits = np.array([0.0, 2.0, 2.0, 1.0, 2.0])
    greedy = next_token_distribution(logits, 0, None)
    np.testing.assert_array_equal(greedy, [0, 1, 0, 0, 0])  # argmax: the lowest tied id
    np.testing.assert_array_equal(next_token_distribution(logits, temperature, 1), greedy)
    kept = next_token_distribution(logits, temperature, 2)  # exactly k, the lowest tied ids
    np.testing.assert_allclose(kept, [0, 0.5, 0.5, 0, 0])


def test_decode_of_ragged_ids_is_a_shape_error():
    with pytest.raises(ShapeError, match="ByteTokenizer.decode.*different lengths"):
        ByteTokenizer().decode([[104, 105], [106]])


@pytest.mark.oracle
@pytest.mark.parametrize("temperature, top_k", [(0.7, None), (1.3, 5), (2.0, 50), (1.0, 1)])
def test_the_distribution_is_torchs_softmax_of_the_top_k(temperature, top_k):
    torch = oracle_import("torch")
    logits = np.random.default_rng(0).normal(size=50) * 3
    scaled = torch.tensor(logits) / temperature
    if top_k is not None:  # Hugging Face's TopKLogitsWarper (no ties here)
        scaled[scaled < torch.topk(scaled, top_k).values[-1]] = -torch.inf
    expected = torch.softmax(scaled, 0).numpy()
    got = next_token_distribution(logits, temperature, top_k)
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-15)


def test_generate_draws_from_the_softmax_and_leaves_the_global_rng_alone(model):
    state = np.random.get_state()[1].copy()
    probs = next_token_distribution(model.logits(np.array([[1, 2, 3]]))[0, -1], 1.0, None)
    draws = 1500
    counts = np.bincount([generate(model, [1, 2, 3], 1, seed=s)[-1] for s in range(draws)],
                         minlength=CONFIG.vocab_size)  # fmt: skip
    expected = draws * probs
    chi2 = ((counts - expected) ** 2 / expected).sum()
    assert chi2 < 70  # 31 degrees of freedom: P(chi2 > 70) < 1e-4
    np.testing.assert_array_equal(np.random.get_state()[1], state)
    assert generate(model, [1, 2, 3], 12, seed=4) == generate(model, [1, 2, 3], 12, seed=4)


@pytest.mark.parametrize("prompt", [[5], list(range(20))])  # one token; past the window
def test_cached_generation_matches_recomputation_past_the_window(model, prompt):
    args = (model, prompt, 14)
    assert generate(*args, seed=3, top_k=7) == generate(*args, seed=3, top_k=7, kv_cache=True)


@pytest.mark.oracle
def test_a_folded_conv_is_torchs_conv_then_eval_batchnorm():
    torch = oracle_import("torch")
    rng = np.random.default_rng(0)
    x, w, b = rng.normal(size=(2, 3, 6, 5)), rng.normal(size=(4, 3, 3, 2)), rng.normal(size=4)
    gamma, beta, mean = rng.normal(size=(3, 4))
    var = rng.uniform(0.1, 2, 4)
    conv = torch.nn.Conv2d(3, 4, (3, 2)).double()
    bn = torch.nn.BatchNorm2d(4, eps=1e-3).double().eval()
    with torch.no_grad():
        conv.weight.copy_(torch.tensor(w))
        conv.bias.copy_(torch.tensor(b))
        bn.weight.copy_(torch.tensor(gamma))
        bn.bias.copy_(torch.tensor(beta))
        bn.running_mean.copy_(torch.tensor(mean))
        bn.running_var.copy_(torch.tensor(var))
        expected = bn(conv(torch.tensor(x))).numpy()
    folded = conv2d(x, *fold_batchnorm(w, b, gamma, beta, mean, var, eps=1e-3))
    np.testing.assert_allclose(folded, expected, rtol=1e-12, atol=1e-12)
