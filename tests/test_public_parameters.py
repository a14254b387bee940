"""Validation in one place: every public parameter of the optimisers, ``train``,
``generate``, sampling, ``LlamaConfig`` and state-dict loading is checked where it enters,
by the shared validators of ``course_lib.params``, with a message naming the parameter and
the accepted range (wrong type: GraphError, a TypeError; wrong value: ParameterError)."""

import numpy as np
import pytest

import course_lib as cl
from course_lib import params
from course_lib.errors import GraphError, ParameterError
from course_lib.models import Llama, LlamaConfig, generate, load_hf_state_dict, train
from course_lib.models.optim import SGD, AdamW
from course_lib.models.sampling import next_token_distribution

NAN, INF = float("nan"), float("inf")


@pytest.mark.parametrize(("value", "error"), [
    (NAN, ParameterError), (-1.0, ParameterError), (INF, ParameterError), (-INF, ParameterError),
    (True, GraphError), ("0.1", GraphError), (None, GraphError), (np.array([0.1]), GraphError),
])  # fmt: skip
def test_in_range_refuses_and_names_the_range(value, error):
    with pytest.raises(error, match=r"AdamW: lr must be a real number >= 0"):
        params.in_range(value, "AdamW: lr", 0.0)


def test_in_range_accepts_numpy_scalars_and_bounds():
    assert params.in_range(np.float32(0.5), "b", 0.0, 1.0, open_high=True) == 0.5
    assert params.in_range(np.array(0.0), "b", 0.0, 1.0) == 0.0
    with pytest.raises(ParameterError, match=r"\[0, 1\), got 1.0"):
        params.in_range(1.0, "b", 0.0, 1.0, open_high=True)


@pytest.mark.parametrize(("value", "error"), [(-3, ParameterError), (2.5, GraphError),
                                              (3.0, GraphError), (True, GraphError),
                                              (NAN, GraphError), ("3", GraphError)])  # fmt: skip
def test_count_refuses_non_integers_and_negatives(value, error):
    with pytest.raises(error, match="train: steps must be an integer"):
        params.count(value, "train: steps", 0)
    assert params.count(np.int64(3), "train: steps", 0) == 3


ARRAYS = {"w": np.ones(3, dtype=np.float32)}
BAD_OPTIMISERS = {
    "AdamW lr nan": (lambda: AdamW(ARRAYS, lr=NAN), "AdamW: lr"),
    "AdamW lr -1": (lambda: AdamW(ARRAYS, lr=-1), "AdamW: lr"),
    "AdamW beta1 = 1": (lambda: AdamW(ARRAYS, betas=(1.0, 0.9)), r"betas\[0\]"),
    "AdamW beta2 nan": (lambda: AdamW(ARRAYS, betas=(0.9, NAN)), r"betas\[1\]"),
    "AdamW beta -0.1": (lambda: AdamW(ARRAYS, betas=(-0.1, 0.9)), r"betas\[0\]"),
    "AdamW one beta": (lambda: AdamW(ARRAYS, betas=(0.9,)), "pair"),
    "AdamW eps -1e-8": (lambda: AdamW(ARRAYS, eps=-1e-8), "eps"),
    "AdamW eps inf": (lambda: AdamW(ARRAYS, eps=INF), "eps"),
    "AdamW weight_decay nan": (lambda: AdamW(ARRAYS, weight_decay=NAN), "weight_decay"),
    "SGD lr nan": (lambda: SGD(lr=NAN), "SGD: lr"),
    "SGD lr inf": (lambda: SGD(lr=INF), "SGD: lr"),
    "SGD weight_decay -1": (lambda: SGD(weight_decay=-1.0), "weight_decay"),
    "AdamW int64 parameter": (lambda: AdamW({"w": np.ones(3, dtype=np.int64)}), "floating"),
    "feed lr nan": (lambda: SGD().feed(lr=NAN), "SGD: lr"),
}


@pytest.mark.parametrize("case", BAD_OPTIMISERS)
def test_optimisers_refuse_bad_hyperparameters_as_torch_does(case):
    make, match = BAD_OPTIMISERS[case]
    with pytest.raises((ParameterError, GraphError), match=match):
        make()


def test_sgd_refuses_an_integer_parameter():
    w = cl.variable("w", (3,), np.int64)
    g = cl.variable("g", (3,), np.int64)
    with pytest.raises(GraphError, match="floating-point"):
        SGD(lr=0.1).update_nodes({"w": w}, {"w": g})


@pytest.mark.parametrize(("kwargs", "error", "match"), [
    ({"temperature": NAN}, ParameterError, "temperature"),
    ({"temperature": -1.0}, ParameterError, "temperature"),
    ({"top_k": 2.5}, GraphError, "top_k"), ({"top_k": 0}, ParameterError, "top_k"),
    ({"top_k": 5}, ParameterError, r"top_k must be an integer in \[1, 4\]"),
])  # fmt: skip
def test_sampling_refuses_bad_parameters(kwargs, error, match):
    args = {"temperature": 1.0, "top_k": None, **kwargs}
    with pytest.raises(error, match=match):
        next_token_distribution(np.zeros(4), args["temperature"], args["top_k"])


def _tiny_model():
    config = LlamaConfig(dim=16, n_layers=1, n_heads=2, n_kv_heads=1, ffn_dim=32,
                         vocab_size=256, max_seq_len=16)  # fmt: skip
    return Llama(config, seed=0)


@pytest.mark.parametrize(("kwargs", "error", "match"), [
    ({"max_new_tokens": -5}, ParameterError, "max_new_tokens"),
    ({"max_new_tokens": 2.0}, GraphError, "max_new_tokens"),
    ({"temperature": NAN}, ParameterError, "temperature"),
    ({"top_k": 2.5}, GraphError, "top_k"),
])  # fmt: skip
def test_generate_refuses_bad_parameters_before_running(kwargs, error, match):
    with pytest.raises(error, match=match):
        generate(_tiny_model(), "ab", **kwargs)


def test_generate_zero_new_tokens_returns_the_prompt():
    assert generate(_tiny_model(), "ab", max_new_tokens=0) == "ab"


@pytest.mark.parametrize(("steps", "error"), [(-3, ParameterError), (2.5, GraphError)])
def test_train_refuses_bad_step_counts(steps, error):
    model = _tiny_model()
    before = {k: cl.to_numpy(v).copy() for k, v in model.params.items()}
    with pytest.raises(error, match="train: steps"):
        train(model, np.zeros(64, dtype=np.int64), steps=steps, batch=2, seq=8, progress=False)
    for k, v in model.params.items():
        np.testing.assert_array_equal(cl.to_numpy(v), before[k])


SIZES = {"dim": 16, "n_layers": 1, "n_heads": 2, "n_kv_heads": 1, "ffn_dim": 32,
         "vocab_size": 256, "max_seq_len": 16}  # fmt: skip


@pytest.mark.parametrize(("field", "value"), [("dim", 16.5), ("dim", 0), ("n_layers", True),
                                              ("vocab_size", -1), ("ffn_dim", NAN)])  # fmt: skip
def test_llama_config_refuses_bad_sizes_at_once(field, value):
    with pytest.raises(cl.ShapeError, match=f"LlamaConfig.{field} must be a positive integer"):
        LlamaConfig(**{**SIZES, field: value})


def test_llama_config_stores_whole_float_sizes_as_ints():
    config = LlamaConfig(**{**SIZES, "dim": 16.0, "vocab_size": np.int64(256)})
    assert type(config.dim) is int and type(config.vocab_size) is int
    assert Llama(config, seed=0).params["model.embed_tokens.weight"].shape == (256, 16)


@pytest.mark.parametrize("bad", [NAN, INF, -INF])
def test_load_hf_state_dict_refuses_non_finite_weights(bad):
    model = _tiny_model()
    state = {k: cl.to_numpy(v).copy() for k, v in model.params.items()}
    name = next(iter(state))
    before = state[name].copy()
    state[name].reshape(-1)[0] = bad
    with pytest.raises(ParameterError, match=f"state dict entry {name}"):
        load_hf_state_dict(model, state)
    np.testing.assert_array_equal(cl.to_numpy(model.params[name]), before)
