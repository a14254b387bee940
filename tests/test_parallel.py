"""Per-device memory and communication of data, tensor and ZeRO parallelism
(course_lib.models.parallel)."""

import pytest

import course_lib as cl
from course_lib.models import LlamaConfig
from course_lib.models.memory import param_count, training_memory
from course_lib.models.parallel import STRATEGIES, parallel_memory, ring_all_reduce_bytes

LLAMA2_7B = LlamaConfig.llama2_7b()
SMALL = LlamaConfig(dim=16, n_layers=3, n_heads=4, n_kv_heads=2, ffn_dim=24, vocab_size=7,
                    max_seq_len=8)


def test_a_ring_all_reduce_sends_two_n_minus_one_over_n_of_the_buffer():
    assert ring_all_reduce_bytes(800, 1) == 0
    assert ring_all_reduce_bytes(800, 2) == 800
    assert ring_all_reduce_bytes(800, 8) == 1400


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_one_device_is_the_whole_training_step_and_sends_nothing(strategy):
    whole, one = training_memory(SMALL, 4, 8), parallel_memory(SMALL, 4, 8, 1, strategy)
    assert one.parts() == whole.parts() and one.communication == 0


def test_data_parallelism_keeps_the_model_and_splits_the_batch():
    dp = parallel_memory(SMALL, 8, 8, 4, "data")
    whole, quarter = training_memory(SMALL, 8, 8), training_memory(SMALL, 2, 8)
    assert (dp.weights, dp.gradients, dp.optimizer) == (
        whole.weights, whole.gradients, whole.optimizer)
    assert dp.activations == quarter.activations
    assert dp.communication == 2 * 3 / 4 * 2 * param_count(SMALL)


def test_tensor_parallelism_by_hand_for_a_small_config():
    b, s, h, kv, i, N, n = 2, 8, 16, 8, 24, 3, 2
    tp = parallel_memory(SMALL, b, s, n, "tensor")
    split = N * (2 * h * h + 2 * h * kv + 3 * h * i)
    replicated = 2 * 7 * h + (2 * N + 1) * h  # embedding, LM head, RMSNorm weights
    assert tp.weights == tp.gradients == 2 * (split // n + replicated)
    assert tp.optimizer == 12 * (split // n + replicated)
    per_block = 4 * b * s * h + (b * s * (h + 2 * kv) + b * 4 * s * s + b * s * h
                                 + 4 * b * s * i) // n
    assert tp.activations == 2 * (N * per_block + 2 * b * s * h + 2 * b * s * 7)
    assert tp.communication == N * 4 * (2 * (n - 1) / n) * b * s * h * 2  # 2 fwd + 2 bwd


def test_tensor_parallelism_with_recomputation():
    b, s, h, N, n = 2, 8, 16, 3, 2
    none = parallel_memory(SMALL, b, s, n, "tensor")
    selective = parallel_memory(SMALL, b, s, n, "tensor", recompute="selective")
    full = parallel_memory(SMALL, b, s, n, "tensor", recompute="full")
    assert none.activations - selective.activations == 2 * N * b * 4 * s * s // n
    final = 2 * (2 * b * s * h + 2 * b * s * 7)
    one_block = (none.activations - final) // N
    assert full.activations == 2 * N * b * s * h + one_block + final
    assert full.communication == 1.5 * none.communication  # the recomputed forward's two


def test_zero_shards_states_then_gradients_then_weights():
    P, n = param_count(LLAMA2_7B), 8
    shard = -(-P // n)
    dp = parallel_memory(LLAMA2_7B, 8, 512, n, "data")
    z1, z2, z3 = (parallel_memory(LLAMA2_7B, 8, 512, n, f"zero-{k}") for k in (1, 2, 3))
    assert (z1.weights, z1.gradients, z1.optimizer) == (2 * P, 2 * P, 12 * shard)
    assert (z2.weights, z2.gradients) == (2 * P, 2 * shard)
    assert (z3.weights, z3.gradients, z3.optimizer) == (2 * shard, 2 * shard, 12 * shard)
    assert dp.communication == z1.communication == z2.communication
    assert z3.communication == 1.5 * dp.communication
    assert dp.activations == z3.activations


def test_llama2_7b_over_eight_gpus_fits_with_tensor_parallelism():
    tp = parallel_memory(LLAMA2_7B, 8, 4096, 8, "tensor")
    assert tp.weights == 2 * (param_count(LLAMA2_7B) - 6_476_005_376 * 7 // 8)
    assert tp.communication == 4 * 32 * (2 * 7 / 8) * (8 * 4096 * 4096 * 2) == 56 * 2**30
    assert "sent per step" in repr(tp)


@pytest.mark.parametrize(("call", "error", "match"), [
    (lambda: parallel_memory(SMALL, 6, 8, 4, "data"), cl.ParameterError, "cannot share"),
    (lambda: parallel_memory(SMALL, 4, 8, 4, "tensor"), cl.ParameterError, "n_kv_heads=2"),
    (lambda: parallel_memory(SMALL, 4, 8, 4, "pipeline"), cl.ParameterError, "strategy"),
    (lambda: parallel_memory(SMALL, 4, 8, 0, "data"), cl.ShapeError, "devices"),
    (lambda: parallel_memory(SMALL, 4, 8, 2, "data", recompute="some"), cl.ParameterError,
     "recompute"),
    (lambda: parallel_memory({}, 4, 8, 2, "data"), TypeError, "LlamaConfig"),
    (lambda: parallel_memory(SMALL, 4, 0, 2, "tensor"), cl.ShapeError, "parallel_memory: seq"),
    (lambda: parallel_memory(SMALL, 4, 8, 2, "data", dtype_bytes=3), cl.ParameterError,
     "parallel_memory: dtype_bytes"),
])  # fmt: skip
def test_bad_arguments_are_refused(call, error, match):
    with pytest.raises(error, match=match):
        call()
