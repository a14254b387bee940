"""Review 8: the model layer at its edges (config, decoder, Llama, state dicts, ablation,
BatchNorm folding): configs too big for memory, configs equal but not alike, sizes that are
not integers, parameters that do not fit the config, ragged tokens, swapped arguments, the
interleaved-RoPE permutation's arguments and copy, BatchNorm's variances and conv2d's shapes."""

import dataclasses
import itertools

import numpy as np
import pytest

import course_lib as cl
from course_lib.models import ARCHITECTURE, Llama, LlamaConfig, load_hf_state_dict
from course_lib.models.ablation import variant
from course_lib.models.batchnorm import batchnorm_affine, conv2d, fold_batchnorm
from course_lib.models.llama import interleaved_to_half_split

CONFIG = LlamaConfig(dim=16, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=24, vocab_size=32,
                     max_seq_len=8)  # fmt: skip
TOKENS = np.arange(10).reshape(2, 5)
Q = "model.layers.0.self_attn.q_proj.weight"
EVERY_COMBINATION = [dict(zip(ARCHITECTURE, c)) for c in itertools.product(*ARCHITECTURE.values())]


# -- configs too big for memory -------------------------------------------------------------------
def test_a_config_too_big_for_memory_is_refused_before_any_spec_or_array(monkeypatch):
    """Llama(LlamaConfig.llama2_7b()) drew 27 GB of weights; n_layers=10**9 built the names
    of nine billion parameters before anything else."""

    def every_block(self):
        raise AssertionError("the specs of every block were built before the size check")

    monkeypatch.setattr(Llama, "parameter_specs", every_block)
    for config in (LlamaConfig.llama2_7b(), dataclasses.replace(CONFIG, n_layers=10**9)):
        with pytest.raises(cl.ParameterError, match=r"Llama: the config has [\d,]+ parameters "
                                                    r"\(.* GiB of float32\), more than "
                                                    r"Llama.max_params = 134,217,728"):  # fmt: skip
            Llama(config)


@pytest.mark.parametrize("switches", EVERY_COMBINATION)
def test_max_params_counts_what_the_specs_ask_for(switches):
    config = dataclasses.replace(CONFIG, **switches)
    numbers = Llama(config).n_params

    class Capped(Llama):
        max_params = numbers

    assert Capped(config).parameter_numbers() == numbers
    Capped.max_params = numbers - 1
    with pytest.raises(cl.ParameterError, match="Capped.max_params"):
        Capped(config)


# -- configs equal but not alike ------------------------------------------------------------------
def test_equal_configs_hash_alike_and_build_the_same_model():
    """norm_eps=np.float32(1e-3) compared equal to 1e-3 but hashed apart (and is another eps)."""
    narrow = dataclasses.replace(CONFIG, norm_eps=np.float32(1e-3), rope_theta=np.float32(500))
    wide = dataclasses.replace(CONFIG, norm_eps=1e-3, rope_theta=500.0)
    assert type(narrow.norm_eps) is float and type(narrow.rope_theta) is float
    assert (narrow == wide) == (hash(narrow) == hash(wide))
    same = dataclasses.replace(CONFIG, norm_eps=np.float64(1e-3), rope_theta=500)
    assert same == wide and hash(same) == hash(wide) and same in {wide}
    np.testing.assert_array_equal(Llama(same).logits(TOKENS), Llama(wide).logits(TOKENS))


# -- sizes that are not integers ------------------------------------------------------------------
@pytest.mark.parametrize("shape", [(2.7, 3), ("2", 3), (True, 3), (2, 3.5), (2, "3")])
def test_graph_shapes_are_integers(shape):
    """forward_graph(2.7, 3) built a graph for batch 2; loss_graph(2, "3") was a TypeError
    comparing a str with an int."""
    model = Llama(CONFIG)
    wording = r"Llama.forward_graph: (batch|seq) must be an integer"
    with pytest.raises(cl.GraphError, match=wording):
        model.forward_graph(*shape)
    with pytest.raises(cl.GraphError, match=wording):
        model.loss_graph(*shape)
    assert model.forward_graph(np.int64(2), 3).batch == 2


# -- parameters that do not fit the config --------------------------------------------------------
def test_a_parameter_of_the_wrong_shape_is_named_before_and_after_the_first_run():
    """The graph took its shapes from ``params`` as they were at the first run: a wrong array
    then failed deep in a matmul, and only later by its name."""
    wording = (r"Llama: params\['model.layers.0.self_attn.q_proj.weight'\] has shape \(16, 8\), "
               r"the config's is \(16, 16\)")  # fmt: skip
    model = Llama(CONFIG)
    good = model.params[Q]
    model.params[Q] = cl.to_device(np.zeros((16, 8), np.float32))
    with pytest.raises(cl.ShapeError, match=wording):
        model.logits(TOKENS)
    with pytest.raises(cl.ShapeError, match=wording):
        model.decode(TOKENS)
    model.params[Q] = good
    assert model.logits(TOKENS).shape == (2, 5, CONFIG.vocab_size)


def test_a_missing_or_misspelt_parameter_is_a_feed_error():
    """A missing one was a bare KeyError; a misspelt one was ignored once a graph existed."""
    model = Llama(CONFIG)
    expected = model.logits(TOKENS)
    model.params["lm_head.weights"] = model.params.pop("lm_head.weight")
    for run in (model.logits, model.loss, model.loss_and_grads, model.attention_maps,
                model.decode):  # fmt: skip
        with pytest.raises(cl.FeedError, match=r"Llama: params must have the config's parameter "
                                               r"names; missing \['lm_head.weight'\], "
                                               r"unexpected \['lm_head.weights'\]"):  # fmt: skip
            run(TOKENS)
    model.params["lm_head.weight"] = model.params.pop("lm_head.weights")
    np.testing.assert_array_equal(model.logits(TOKENS), expected)


def test_a_state_dict_loads_into_a_model_whose_parameters_were_broken():
    """The expected shapes were those of ``params``, not the config's."""
    source = Llama(CONFIG, seed=1)
    state = {name: cl.to_numpy(a) for name, a in source.params.items()}
    model = Llama(CONFIG, seed=2)
    model.params[Q] = cl.to_device(np.zeros((3, 3), np.float32))
    load_hf_state_dict(model, state)
    np.testing.assert_array_equal(model.logits(TOKENS), source.logits(TOKENS))


# -- tokens and arguments -------------------------------------------------------------------------
def test_ragged_tokens_are_a_shape_error():
    model = Llama(CONFIG)
    for run in (model.logits, model.decode):
        with pytest.raises(cl.ShapeError, match=r"tokens must have shape \(batch, seq\), got rows "
                                                r"of different lengths"):  # fmt: skip
            run([[1, 2], [3]])


def test_the_model_names_a_config_of_the_wrong_type():
    """It was a bare TypeError, not a course_lib error."""
    with pytest.raises(cl.GraphError, match="Llama needs a LlamaConfig, got dict"):
        Llama(dataclasses.asdict(CONFIG))


@pytest.mark.parametrize("swap", ["swapped", "pairs", "none"])
def test_load_hf_state_dict_names_arguments_of_the_wrong_type(swap):
    """They were AttributeErrors: 'dict' object has no attribute 'check_device', ..."""
    model = Llama(CONFIG)
    state = {name: cl.to_numpy(a) for name, a in model.params.items()}
    args = {"swapped": (state, model), "pairs": (model, list(state.items())),
            "none": (model, None)}[swap]  # fmt: skip
    with pytest.raises(cl.GraphError, match=r"load_hf_state_dict\(model, state_dict\) takes a "
                                            r"Llama and a mapping"):  # fmt: skip
        load_hf_state_dict(*args)


# -- the interleaved-RoPE permutation -------------------------------------------------------------
@pytest.mark.parametrize(("n_heads", "error"), [
    (0, cl.ParameterError), (-2, cl.ParameterError), (2.0, cl.GraphError), (True, cl.GraphError),
    ("2", cl.GraphError),
])  # fmt: skip
def test_interleaved_to_half_split_checks_n_heads(n_heads, error):
    """0 was a ZeroDivisionError, -2 NumPy's "can only specify one unknown dimension", 2.0 and
    "2" TypeErrors."""
    with pytest.raises(error, match="interleaved_to_half_split: n_heads must be an integer"):
        interleaved_to_half_split(np.ones((8, 3)), n_heads)


@pytest.mark.parametrize("n_heads", [1, 2, 4])
def test_interleaved_to_half_split_returns_a_new_array(n_heads):
    """With a head size of 2 (n_heads=4 here) it returned a view of the caller's weights."""
    weight = np.arange(24.0).reshape(8, 3)
    converted = interleaved_to_half_split(weight, n_heads)
    assert not np.shares_memory(converted, weight)
    d = 8 // n_heads
    order = [h * d + i for h in range(n_heads) for i in [*range(0, d, 2), *range(1, d, 2)]]
    np.testing.assert_array_equal(converted, weight[order])


# -- BatchNorm folding ----------------------------------------------------------------------------
@pytest.mark.parametrize(("var", "eps"), [([1.0, -2.0, 1.0], 1e-5), ([1.0, 0.0, 1.0], 0.0),
                                          ([1.0, np.nan, 1.0], 1e-5)])  # fmt: skip
def test_batchnorm_refuses_a_variance_it_cannot_divide_by(var, eps):
    """A negative variance gave NaN, a zero one with eps=0 inf, with only a RuntimeWarning."""
    ones = np.ones(3)
    with pytest.raises(cl.ParameterError, match=r"batchnorm_affine: var \+ eps must be above 0"):
        batchnorm_affine(ones, ones, ones, np.array(var), eps)
    with pytest.raises(cl.ParameterError, match=r"batchnorm_affine: var \+ eps must be above 0"):
        fold_batchnorm(np.ones((3, 1, 1, 1)), ones, ones, ones, ones, np.array(var), eps)


@pytest.mark.parametrize(("eps", "error"), [("1e-5", cl.GraphError), (np.ones(3), cl.GraphError),
                                            (True, cl.GraphError), (-1.0, cl.ParameterError),
                                            (float("nan"), cl.ParameterError)])  # fmt: skip
def test_batchnorm_eps_is_one_number_at_least_0(eps, error):
    """An array eps was broadcast over the channels, a str a NumPy UFuncTypeError."""
    ones = np.ones(3)
    with pytest.raises(error, match="batchnorm_affine: eps must be"):
        batchnorm_affine(ones, ones, ones, ones, eps)


def test_batchnorm_and_conv2d_take_real_numbers_only():
    """A complex gamma lost its imaginary part (a ComplexWarning), text was a NumPy error."""
    ones = np.ones(3)
    with pytest.raises(cl.GraphError, match="batchnorm_affine: gamma holds numbers"):
        batchnorm_affine(ones * 1j, ones, ones, ones)
    with pytest.raises(cl.GraphError, match="conv2d: x holds numbers"):
        conv2d(np.full((1, 2, 3, 3), "a"), np.ones((4, 2, 2, 2)), np.zeros(4))


@pytest.mark.parametrize(("weight", "bias", "message"), [
    (np.ones((4, 2, 2, 2)), np.zeros(1), r"conv2d: bias \(1,\) must have shape \(4,\)"),
    (np.ones((4, 2, 2, 2)), 0.0, r"conv2d: bias \(\) must have shape \(4,\)"),
    (np.ones((4, 2, 2, 2)), np.zeros(5), r"conv2d: bias \(5,\) must have shape \(4,\)"),
    (np.ones((4, 2, 5, 2)), np.zeros(4), r"conv2d: the kernel \(5, 2\) is larger than the "
                                         r"image \(3, 3\)"),
])  # fmt: skip
def test_conv2d_checks_the_bias_and_the_kernel_size(weight, bias, message):
    """A bias of one value was broadcast over every channel; a scalar bias, a kernel larger
    than the image were NumPy errors."""
    with pytest.raises(cl.ShapeError, match=message):
        conv2d(np.ones((1, 2, 3, 3)), weight, bias)


# -- the ablation's variants ----------------------------------------------------------------------
def test_variant_takes_a_config_and_switches_only():
    """variant(config, {"dim": 64}) changed the model's size, which no row of the ablation may;
    a config of the wrong type was dataclasses' TypeError."""
    with pytest.raises(cl.ParameterError, match=r"ablation: \['dim'\] are not switches"):
        variant(CONFIG, {"dim": 64, "mlp": "relu"})
    with pytest.raises(cl.GraphError, match="ablation: config must be a LlamaConfig, got dict"):
        variant(dataclasses.asdict(CONFIG), {"mlp": "relu"})
    assert variant(CONFIG, {"mlp": "relu"}).ffn_dim == 4 * CONFIG.dim
