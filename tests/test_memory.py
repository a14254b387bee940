"""Parameter counts and training memory (course_lib.models.memory)."""

import pytest

import course_lib as cl
from course_lib.models import Llama, LlamaConfig
from course_lib.models.memory import (
    activation_elements,
    activations_overtake_states,
    param_count,
    parameter_breakdown,
    training_memory,
)

LLAMA2_7B = LlamaConfig.llama2_7b()


def test_llama2_7b_has_6_74_billion_parameters():
    # Hugging Face's LlamaForCausalLM for Llama-2-7b reports 6,738,415,616 parameters.
    assert param_count(LLAMA2_7B) == 6_738_415_616


def test_parameters_by_hand_for_a_gqa_config():
    c = LlamaConfig(dim=16, n_layers=3, n_heads=4, n_kv_heads=1, ffn_dim=24, vocab_size=7,
                    max_seq_len=8)
    per_block = 16 * 16 + 16 * 4 + 16 * 4 + 16 * 16 + 3 * 16 * 24 + 2 * 16  # q k v o, mlp, norms
    assert param_count(c) == 7 * 16 + 3 * per_block + 16 + 16 * 7
    assert parameter_breakdown(c)["LM head"] == parameter_breakdown(c)["embedding"] == 7 * 16


@pytest.mark.parametrize("n_kv_heads", [4, 2, 1], ids=["MHA", "GQA", "MQA"])
def test_param_count_equals_the_models_arrays(n_kv_heads):
    c = LlamaConfig(dim=16, n_layers=2, n_heads=4, n_kv_heads=n_kv_heads, ffn_dim=24,
                    vocab_size=11, max_seq_len=8)
    model = Llama(c, seed=0)
    assert param_count(c) == model.n_params
    norms = sum(a.size for name, a in model.params.items() if "norm" in name)
    assert parameter_breakdown(c)["RMSNorm weights"] == norms


def test_mixed_precision_adamw_is_16_bytes_per_parameter():
    mem = training_memory(LLAMA2_7B, 1, 4096, dtype_bytes=2)
    p = param_count(LLAMA2_7B)
    assert (mem.weights, mem.gradients, mem.optimizer) == (2 * p, 2 * p, 12 * p)
    assert mem.weights + mem.gradients + mem.optimizer == 16 * p


def test_fp32_adamw_has_no_master_copy_and_sgd_no_state():
    p = param_count(LLAMA2_7B)
    assert training_memory(LLAMA2_7B, 1, 16, dtype_bytes=4).optimizer == 8 * p
    assert training_memory(LLAMA2_7B, 1, 16, dtype_bytes=4, optimizer="sgd").optimizer == 0
    assert training_memory(LLAMA2_7B, 1, 16, dtype_bytes=2, optimizer="sgd").optimizer == 4 * p


def test_activations_by_hand_for_a_small_config():
    c = LlamaConfig(dim=8, n_layers=2, n_heads=2, n_kv_heads=1, ffn_dim=12, vocab_size=5,
                    max_seq_len=8)
    b, s = 3, 4
    per_block = 4 * b * s * 8 + b * s * (8 + 2 * 4) + b * 2 * s * s + b * s * 8 + 4 * b * s * 12
    once = 2 * b * s * 8 + 2 * b * s * 5
    assert sum(activation_elements(c, b, s).values()) == 2 * per_block + once
    assert training_memory(c, b, s, dtype_bytes=4).activations == 4 * (2 * per_block + once)


def test_activations_grow_linearly_in_batch_and_quadratically_through_attention():
    one, two = activation_elements(LLAMA2_7B, 1, 1024), activation_elements(LLAMA2_7B, 2, 1024)
    assert all(two[k] == 2 * one[k] for k in one)
    longer = activation_elements(LLAMA2_7B, 1, 2048)
    assert longer["attention probabilities P"] == 4 * one["attention probabilities P"]
    assert longer["Q, K, V"] == 2 * one["Q, K, V"]


def test_total_and_table():
    mem = training_memory(LLAMA2_7B, 1, 4096)
    assert mem.total == sum(mem.parts().values())
    text = repr(mem)
    assert text.splitlines()[0].startswith("training memory, b=1, s=4096, 2-byte numbers, adamw")
    assert text.splitlines()[-1].split()[0] == "total" and "<table>" in mem._repr_html_()


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="unknown optimizer 'adam'"):
        training_memory(LLAMA2_7B, 1, 16, optimizer="adam")
    with pytest.raises(ValueError, match="dtype_bytes must be 1, 2, 4 or 8"):
        training_memory(LLAMA2_7B, 1, 16, dtype_bytes=3)
    with pytest.raises(cl.ShapeError, match="training_memory: seq must be a positive"):
        training_memory(LLAMA2_7B, 1, 0)
    with pytest.raises(cl.ShapeError, match="training_memory: batch must be a positive"):
        training_memory(LLAMA2_7B, 1.5, 16)
    with pytest.raises(TypeError, match="training_memory needs a LlamaConfig, got dict"):
        training_memory({}, 1, 16)
    with pytest.raises(cl.ShapeError, match="activation_elements: seq must be a positive"):
        activation_elements(LLAMA2_7B, 1, -2)
    with pytest.raises(TypeError, match="parameter_breakdown needs a LlamaConfig, got str"):
        param_count("llama2_7b")


def test_activations_overtake_weights_gradients_and_adam_at_6125_tokens():
    s = activations_overtake_states(LLAMA2_7B)
    before, at = training_memory(LLAMA2_7B, 1, s - 1), training_memory(LLAMA2_7B, 1, s)
    assert before.activations <= before.total - before.activations
    assert at.activations > at.total - at.activations
    assert s == 6125
    # fp32 without a master copy: states are 16 bytes per parameter, activations 4 per number
    fp32 = activations_overtake_states(LLAMA2_7B, dtype_bytes=4)
    assert fp32 < s and activations_overtake_states(LLAMA2_7B, batch=8) < s
