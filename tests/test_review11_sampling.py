"""Sampling from the LLaMA (a review's findings): generate's tokens follow softmax(logits / T)
cut to the top k, greedy decoding is Hugging Face's; a batch of prompts, or a prompt entry
whose ``__index__`` raises, is a course_lib error naming it; next_token_distribution takes
logits of the current device."""

import numpy as np
import pytest

import course_lib as cl
from conftest import oracle_import
from course_lib.models import Llama, LlamaConfig, generate, load_hf_state_dict
from course_lib.models.decoder import DecoderLM
from course_lib.models.sampling import next_token_distribution

CONFIG = LlamaConfig(dim=16, n_layers=1, n_heads=4, n_kv_heads=2, ffn_dim=32, vocab_size=8,
                     max_seq_len=4)  # fmt: skip
ROW = np.array([2.0, 1.0, 1.0, 1.0, 0.5, -1.0, -np.inf, 0.0])  # ties at 2nd-4th, one -inf


class Fixed(DecoderLM):
    """Every position's logits are ``ROW``: each sampled token is an independent draw."""

    def parameter_specs(self):
        return {"table": ((CONFIG.vocab_size, CONFIG.vocab_size), "normal")}

    def build_logits(self, tokens, p):
        return cl.take(p["table"], tokens), []


def softmax_top_k(logits, temperature, top_k):
    """The definition: the k largest logits (the lowest ids among ties), softmax(l / T)."""
    keep = sorted(range(logits.size), key=lambda i: (-logits[i], i))[: top_k or logits.size]
    scaled = np.full(logits.size, -np.inf)
    scaled[keep] = logits[keep] / temperature
    probs = np.exp(scaled - scaled.max())
    return probs / probs.sum()


@pytest.mark.parametrize(("temperature", "top_k"), [(1.0, None), (0.5, 3), (1.0, 2),
                         (1.0, 8), (100.0, None), (1e-9, None), (5.0, 1)])  # fmt: skip
def test_sampled_frequencies_follow_the_softmax_of_the_top_k(temperature, top_k):
    model = Fixed(CONFIG, seed=0, dtype=np.float64)
    model.params["table"] = np.tile(ROW, (CONFIG.vocab_size, 1))
    n = 4000
    counts = np.bincount(generate(model, [0], n, temperature, top_k, seed=7)[1:], minlength=8)
    expected = n * softmax_top_k(ROW, temperature, top_k)
    assert counts[expected == 0].sum() == 0  # never a token outside the top k, nor the -inf
    np.testing.assert_array_less(np.abs(counts - expected),
                                 5 * np.sqrt(expected * (1 - expected / n)) + 1)  # fmt: skip


def test_hugging_faces_greedy_generate_is_ours_with_and_without_the_cache():
    torch = oracle_import("torch")
    transformers = oracle_import("transformers")
    config = LlamaConfig(dim=32, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=48, vocab_size=64,
                         max_seq_len=16, rope_theta=500.0)  # fmt: skip
    hf_config = transformers.LlamaConfig(
        vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=16,
        rms_norm_eps=config.norm_eps, rope_theta=500.0, initializer_range=0.5,
        tie_word_embeddings=False, attn_implementation="eager",
    )  # fmt: skip
    torch.manual_seed(0)
    hf = transformers.LlamaForCausalLM(hf_config).double().eval()
    ours = load_hf_state_dict(Llama(config, dtype=np.float64), hf.state_dict())
    prompt = [0, 1, 2, 3, 4, 5]  # 0 is no padding: the attention mask says so
    x = torch.tensor([prompt])
    out = hf.generate(x, attention_mask=torch.ones_like(x), do_sample=False, max_new_tokens=10,
                      min_new_tokens=10, pad_token_id=63, eos_token_id=None)  # fmt: skip
    theirs = out[0].tolist()
    assert generate(ours, prompt, 10, 0.0) == theirs
    assert generate(ours, prompt, 10, 0.0, kv_cache=True) == theirs


@pytest.fixture(scope="module")
def model():
    return Llama(CONFIG, seed=0)


@pytest.mark.parametrize("make", [lambda torch: [[1, 2], [3, 4]], lambda torch: ([1, 2],),
                                  lambda torch: [np.array([1, 2])],
                                  lambda torch: torch.tensor([[1, 2, 3]]),
                                  lambda torch: torch.tensor([[5]])],
                         ids=["lists", "tuple of a list", "list of arrays", "2-D tensor",
                              "(1, 1) tensor"])  # fmt: skip
def test_a_batch_of_prompts_is_a_shape_error_saying_one_prompt_per_call(model, make):
    # a FeedError "prompt[0] = [1, 2] is not a token id", a bare TypeError from operator.index
    # (arrays, 2-D tensors), or a (1, 1) tensor silently taken as one token
    prompt = make(oracle_import("torch"))
    with pytest.raises(cl.ShapeError, match=r"generate: the prompt must be one sequence of "
                       r"token ids \(1-D\), but prompt\[0\] is a sequence; generate takes one "
                       "prompt"):  # fmt: skip
        generate(model, prompt, 2)


@pytest.mark.parametrize("make", [lambda torch: torch.tensor([1.5, 2.0]),
                                  lambda torch: [torch.tensor(1.5)]],
                         ids=["float tensor", "list of float tensors"])  # fmt: skip
def test_a_prompt_entry_whose_index_raises_is_a_feed_error(model, make):
    # a torch tensor has __index__, which raised a bare TypeError for floats
    prompt = make(oracle_import("torch"))
    with pytest.raises(cl.FeedError, match=r"generate: prompt\[0\] = tensor\(1.5000\) is not "
                       r"a token id \(an integer\)"):  # fmt: skip
        generate(model, prompt, 2)


def test_a_one_dimensional_integer_tensor_is_still_a_prompt(model):
    torch = oracle_import("torch")
    assert generate(model, torch.tensor([1, 2]), 3, seed=2) == generate(model, [1, 2], 3, seed=2)


def test_next_token_distribution_takes_logits_of_the_current_device():
    # a bare TypeError: implicit conversion to a NumPy array is not allowed on the device
    with cl.use_device("strict"):
        probs = next_token_distribution(cl.to_device(np.array([0.0, np.log(3.0)])), 1.0, None)
    assert isinstance(probs, np.ndarray)
    np.testing.assert_allclose(probs, [0.25, 0.75])
