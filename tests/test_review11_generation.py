"""Text in and out of the LLaMA (a review's findings): the tokenizer's decode takes one
sequence of ids, on the host or the current device; greedy generation, with and without the
KV cache, gives what the model's own forward pass on the whole context picks each step."""

import dataclasses

import numpy as np
import pytest

import course_lib as cl
from course_lib.models import Llama, LlamaConfig, generate
from course_lib.models.tokenizer import ByteTokenizer

CONFIG = LlamaConfig(dim=16, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=24, vocab_size=32,
                     max_seq_len=8)  # fmt: skip


@pytest.mark.parametrize("text", ["", "\x00", "a\x00b", "e\u0301", "😀", "\U0010ffff", "日本語"])
def test_encode_then_decode_gives_the_text_back(text):
    ids = ByteTokenizer().encode(text)
    assert ids.dtype == np.int64 and ids.size == len(text.encode("utf-8"))
    assert ByteTokenizer().decode(ids) == text


@pytest.mark.parametrize("ids", [np.array([[104, 105], [106, 107]]), [[104], [105]],
                                 np.int64(104)], ids=["batch", "column", "scalar"])  # fmt: skip
def test_decode_refuses_what_is_not_one_sequence_instead_of_running_rows_together(ids):
    with pytest.raises(cl.ShapeError, match=r"ByteTokenizer.decode takes one sequence .*1-D"):
        ByteTokenizer().decode(ids)


def test_decode_takes_ids_on_the_current_device():
    with cl.use_device("strict"):
        assert ByteTokenizer().decode(cl.to_device(np.array([104, 105]))) == "hi"


def recomputed_greedy(model, prompt, new):
    """The oracle: each step, the argmax of the model's logits on the last window."""
    ids = list(prompt)
    for _ in range(new):
        window = np.array([ids[-model.config.max_seq_len :]])
        ids.append(int(np.argmax(model.logits(window)[0, -1])))
    return ids


@pytest.mark.parametrize("prompt", [[1], [1, 2, 3], list(range(8)), list(range(12))],
                         ids=["one token", "short", "max_seq_len", "longer"])  # fmt: skip
def test_greedy_generation_picks_what_the_whole_forward_pass_picks(prompt):
    model = Llama(CONFIG, seed=0, dtype=np.float64, init_std=0.5)
    expected = recomputed_greedy(model, prompt, 10)
    assert generate(model, prompt, 10, 0.0) == expected
    assert generate(model, prompt, 10, 0.0, kv_cache=True) == expected
    assert generate(model, prompt, 10, 2.0, top_k=1, seed=3, kv_cache=True) == expected


@pytest.mark.parametrize("change", [{"rope_theta": 500.0}, {"norm_eps": 1e-3},
                                    {"positions": "sinusoidal"}, {"max_seq_len": 16}])  # fmt: skip
def test_a_cache_from_a_model_of_another_configuration_is_refused(change):
    """Same parameter shapes, other keys: the continuation matched neither model's logits
    (off by up to 4.1), silently."""
    first = Llama(CONFIG, seed=0)
    other = Llama(dataclasses.replace(CONFIG, **change), seed=0)
    _, cache = first.decode([[1, 2, 3]])
    name = next(iter(change))
    with pytest.raises(cl.ShapeError, match=rf"another configuration \({name}="):
        other.decode([[4]], cache)
    logits, cache = first.decode([[4]], cache)  # its own model continues it
    np.testing.assert_allclose(logits[0, -1], first.logits(np.array([[1, 2, 3, 4]]))[0, -1],
                               rtol=1e-4, atol=1e-5)  # float32  # fmt: skip
