"""Review 8: sampling, generate's prompts and parameters, the byte tokenizer and the corpus
windows refuse bad input with a course_lib error that names the function and the value."""

import re

import numpy as np
import pytest

import course_lib as cl
from course_lib.models import (
    ByteTokenizer,
    Llama,
    LlamaConfig,
    generate,
    random_windows,
    stdlib_docstrings,
)
from course_lib.models.sampling import next_token_distribution

CONFIG = LlamaConfig(dim=16, n_layers=1, n_heads=4, n_kv_heads=2, ffn_dim=32, vocab_size=256,
                     max_seq_len=16)  # fmt: skip


@pytest.fixture(scope="module")
def model():
    return Llama(CONFIG, seed=0)


# -- next_token_distribution takes one row of real logits ---------------------------------------
@pytest.mark.parametrize("temperature", [0.0, 1.0])
@pytest.mark.parametrize("shape", [(2, 3), (0,), ()])
def test_logits_that_are_not_one_row_are_a_shape_error(shape, temperature):
    # a (batch, vocab) block was normalised over all its rows at once, or crashed at T = 0
    logits = np.arange(np.prod(shape), dtype=np.float64).reshape(shape)
    with pytest.raises(cl.ShapeError, match=r"sampling: the logits must be one non-empty row "
                       rf"\(vocab_size,\), got shape {re.escape(str(shape))}"):  # fmt: skip
        next_token_distribution(logits, temperature, None)


@pytest.mark.parametrize("logits", [np.array([1 + 1j, 2.0]), np.array(["1", "2"]), ["a", "b"]])
def test_logits_that_are_not_real_numbers_are_refused(logits):
    # complex logits lost their imaginary part, text "1", "2" was parsed as numbers
    with pytest.raises(cl.GraphError, match="sampling: logits holds numbers"):
        next_token_distribution(logits, 1.0, None)


# -- generate's parameters and prompt ---------------------------------------------------------
@pytest.mark.parametrize("max_new_tokens", [0, 2])
def test_generate_refuses_a_top_k_above_the_vocabulary_before_anything_runs(max_new_tokens):
    model = Llama(CONFIG, seed=0)
    model.logits = model.decode = None  # refused before any step
    with pytest.raises(cl.ParameterError, match=r"generate: top_k must be an integer in "
                       r"\[1, 256\], got 1000"):  # fmt: skip
        generate(model, [1, 2], max_new_tokens, top_k=1000)


@pytest.mark.parametrize(("seed", "error"), [
    (-1, cl.ParameterError), (1.5, cl.GraphError), (None, cl.GraphError),
    (True, cl.GraphError), ("0", cl.GraphError),
])  # fmt: skip
def test_generate_checks_its_seed(model, seed, error):
    # -1 and 1.5 were NumPy's errors; None gave a different text on every call; True seeded 1
    with pytest.raises(error, match="generate: seed must be an integer"):
        generate(model, [1, 2], 2, seed=seed)


def test_generate_takes_a_numpy_integer_seed(model):
    assert generate(model, [1, 2], 3, seed=np.int64(4)) == generate(model, [1, 2], 3, seed=4)


@pytest.mark.parametrize("prompt", [np.array([[1, 2, 3]]), np.array(5)])
def test_a_prompt_array_that_is_not_1d_is_a_shape_error(model, prompt):
    # (1, T), the shape model.logits takes, was a bare TypeError from operator.index
    with pytest.raises(cl.ShapeError, match=r"generate: the prompt must be one sequence of "
                       r"token ids \(1-D\), got an array of shape"):  # fmt: skip
        generate(model, prompt, 2)


@pytest.mark.parametrize("prompt", [{3, 1, 2}, {1: 0, 2: 0}, frozenset([4, 5])])
def test_an_unordered_prompt_is_refused(model, prompt):
    with pytest.raises(cl.GraphError, match="which has no order"):
        generate(model, prompt, 2)


def test_a_text_prompt_with_a_lone_surrogate_is_named(model):
    with pytest.raises(cl.ParameterError, match=r"ByteTokenizer.encode: text\[1\] = '\\ud800' "
                       r"is a lone surrogate"):  # fmt: skip
        generate(model, "a\ud800b", 2)


def test_generate_says_cached_tokens_agree_only_up_to_rounding():
    # float32 logits of the two paths differ by ~1e-6, which can flip a greedy near-tie
    assert "the same tokens up to\n    rounding" in generate.__doc__


# -- the byte tokenizer ---------------------------------------------------------------------------
def test_encode_refuses_what_is_not_text_with_a_course_lib_error():
    with pytest.raises(cl.GraphError, match="ByteTokenizer.encode takes a str, got bytes"):
        ByteTokenizer().encode(b"hi")


@pytest.mark.parametrize(("ids", "dtype"), [
    ([104.7, 105.2], "float64"), ([np.nan], "float64"), ([True, False], "bool"),
    ("hi", "<U1"), ([104, None], "object"),
])  # fmt: skip
def test_decode_refuses_ids_that_are_not_integers(ids, dtype):
    # floats were truncated (104.7 -> "h"), NaN became "\x00", bools bytes 1 and 0
    with pytest.raises(cl.FeedError, match=rf"ByteTokenizer.decode: byte ids must be integers "
                       rf"in \[0, 256\), got {dtype} values"):  # fmt: skip
        ByteTokenizer().decode(ids)


@pytest.mark.parametrize("ids", [None, 5])
def test_decode_refuses_what_is_not_a_sequence(ids):
    with pytest.raises(cl.GraphError, match="ByteTokenizer.decode takes a sequence of byte ids"):
        ByteTokenizer().decode(ids)


def test_decode_names_itself_for_ids_out_of_range_and_still_takes_bytes():
    with pytest.raises(cl.FeedError, match=r"ByteTokenizer.decode: byte ids must lie in"):
        ByteTokenizer().decode([-1])
    assert ByteTokenizer().decode(b"hi") == "hi" and ByteTokenizer().decode([]) == ""


# -- random_windows, stdlib_docstrings -------------------------------------------------------------
@pytest.mark.parametrize(("batch", "seq", "what"), [
    (0, 3, "batch"), (-1, 3, "batch"), (2.5, 3, "batch"), (2, 0, "seq"), (2, -3, "seq"),
    (2, True, "seq"),
])  # fmt: skip
def test_random_windows_checks_batch_and_seq(batch, seq, what):
    # batch 0 / seq <= 0 gave empty windows; -1 and 2.5 were NumPy's errors
    with pytest.raises(cl.ShapeError, match=f"random_windows: {what} must be a positive integer"):
        random_windows(np.arange(100), batch, seq, np.random.default_rng(0))


def test_random_windows_takes_a_whole_float_size():
    windows = random_windows(np.arange(100), 2, 3.0, np.random.default_rng(0))
    assert windows.shape == (2, 3) and windows.dtype == np.arange(1).dtype


@pytest.mark.parametrize("rng", [0, None, np.random.RandomState(0)])
def test_random_windows_needs_a_generator(rng):
    with pytest.raises(cl.GraphError, match=r"random_windows: rng must be a "
                       r"numpy.random.Generator .*got"):  # fmt: skip
        random_windows(np.arange(100), 2, 3, rng)


def test_random_windows_refuses_tokens_that_are_not_ids_and_names_itself():
    with pytest.raises(cl.FeedError, match="random_windows: tokens must be integer ids"):
        random_windows(np.linspace(0, 1, 10), 1, 2, np.random.default_rng(0))
    with pytest.raises(cl.ShapeError, match="random_windows: need a 1-D token array"):
        random_windows(np.arange(5), 1, 10, np.random.default_rng(0))


@pytest.mark.parametrize(("max_chars", "error"), [
    (-5, cl.ParameterError), (1000.0, cl.GraphError), (True, cl.GraphError),
])  # fmt: skip
def test_stdlib_docstrings_checks_max_chars(max_chars, error):
    # -5 returned the text less its last 5 characters, True one character
    with pytest.raises(error, match="stdlib_docstrings: max_chars must be an integer"):
        stdlib_docstrings(max_chars)


# -- a KV cache continues only with a model of its own configuration ---------------------------
@pytest.mark.parametrize("change", [{"n_layers": 2}, {"dim": 32}, {"n_kv_heads": 4},
                                    {"vocab_size": 128}])  # fmt: skip
def test_a_cache_from_a_model_of_another_configuration_is_refused_by_name(model, change):
    _, cache = model.decode([[1, 2, 3]])
    other = Llama(LlamaConfig(**{**CONFIG.__dict__, **change}), seed=0)
    with pytest.raises(cl.ShapeError, match=r"KVCache: this cache was made by a model of "
                       r"another configuration \(parameter "):  # fmt: skip
        other.decode([[4]], cache)


def test_a_cache_continues_with_a_model_of_the_same_configuration(model):
    _, cache = model.decode([[1, 2, 3]])
    logits, grown = Llama(CONFIG, seed=1).decode([[4]], cache)
    assert logits.shape == (1, 1, 256) and grown.length == 4
