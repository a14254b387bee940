"""From FLOPs to GPU-hours, serving arithmetic, recomputation and the counting conventions
(course_lib.models.gpu_time, .inference, and the conventions of .flops and .memory)."""

import dataclasses
import math

import pytest

import course_lib as cl
from course_lib.kernels.gpus import GPUS
from course_lib.models import LlamaConfig, flops_table, param_count, training_memory
from course_lib.models.flops import (
    LECTURE,
    attention_overtakes_mlp,
    recomputed_flops,
    training_flops_per_token,
)
from course_lib.models.gpu_time import achieved_mfu, peak_flops, seconds_at_mfu
from course_lib.models.inference import (
    decode_crossover_batch,
    decode_step,
    kv_cache_bytes,
    max_batch,
)
from course_lib.models.memory import activation_elements, activations_overtake_states

LLAMA2_7B = LlamaConfig.llama2_7b()
GQA_7B = dataclasses.replace(LLAMA2_7B, n_kv_heads=8)
HALF = dataclasses.replace(LECTURE, causal_half=True)
P = 6_738_415_616
SMALL = LlamaConfig(dim=8, n_layers=2, n_heads=2, n_kv_heads=1, ffn_dim=12, vocab_size=5,
                    max_seq_len=8)  # fmt: skip


# -- peaks, seconds at an MFU, the MFU of a reported time ----------------------------------------
def test_peaks_come_from_the_gpu_table():
    assert peak_flops("A100") == 312e12 and peak_flops("H100") == 989.5e12
    assert peak_flops("A100", "fp32") == 19.5e12 and peak_flops(GPUS["T4"], "fp32") == 8.1e12
    with pytest.raises(cl.ParameterError, match="the T4 has no bf16 rate"):
        peak_flops("T4")
    with pytest.raises(cl.ParameterError, match="unknown precision 'fp8'"):
        peak_flops("A100", "fp8")
    with pytest.raises(cl.ParameterError, match="unknown GPU 'V100'"):
        peak_flops("V100")


def test_seconds_at_mfu_by_hand():
    # one LLaMA-2-7B training step (b = 1, s = 4096): 192.18 TFLOPs at 40 % of 312 TFLOP/s
    assert seconds_at_mfu(192.18e12, "A100", 0.4) == pytest.approx(192.18 / (0.4 * 312))
    assert seconds_at_mfu(192.18e12, "A100", 0.4, n_gpus=8) == pytest.approx(
        192.18 / (0.4 * 312 * 8)
    )
    assert seconds_at_mfu(0, "H100", 1.0) == 0.0


def test_llama2_7b_reported_gpu_hours_imply_39_percent_mfu_under_6p():
    # Touvron et al. (2023): 184,320 A100-80GB hours for 2T tokens. 6·P·D model FLOPs:
    # 6 · 6,738,415,616 · 2e12 = 8.0860987392e22; 184,320 h · 3600 s · 312e12 FLOP/s
    # = 2.07028224e23 FLOPs at peak; MFU = 0.390575...
    flops = 6 * P * 2e12
    mfu = achieved_mfu(flops, 184_320 * 3600, "A100")
    assert mfu == pytest.approx(8.0860987392e22 / 2.07028224e23, rel=1e-12)
    assert round(mfu, 4) == 0.3906
    assert seconds_at_mfu(flops, "A100", mfu) == pytest.approx(184_320 * 3600)


@pytest.mark.parametrize("mfu", [0, -0.1, 1.5, float("nan"), float("inf")])
def test_mfu_must_be_a_fraction(mfu):
    with pytest.raises(cl.ParameterError, match="mfu"):
        seconds_at_mfu(1e12, "A100", mfu)


def test_time_arguments_are_checked():
    with pytest.raises(cl.ShapeError, match="n_gpus must be a positive integer"):
        seconds_at_mfu(1e12, "A100", 0.5, n_gpus=0)
    with pytest.raises(cl.ParameterError, match="flops must be finite and at least 0"):
        seconds_at_mfu(-1.0, "A100", 0.5)
    with pytest.raises(cl.ParameterError, match="gpu_seconds must be finite and above 0"):
        achieved_mfu(1e12, 0.0, "A100")
    with pytest.raises(cl.GraphError, match="flops must be a real number"):
        achieved_mfu("1e12", 10.0, "A100")


# -- FLOP conventions: per token, causal half, a KV cache's past ---------------------------------
def test_training_flops_per_token_is_three_forwards_over_s():
    for s in (1, 7, 4096):
        per_token = training_flops_per_token(LLAMA2_7B, s)
        assert per_token == 3 * flops_table(LLAMA2_7B, 1, s).total / s
    # longer sequences cost more per token (the s² rows), and more than 6·P at s = 4096
    assert training_flops_per_token(LLAMA2_7B, 4096) > training_flops_per_token(LLAMA2_7B, 512)
    assert training_flops_per_token(LLAMA2_7B, 4096) > 6 * P


def test_causal_half_counts_s_times_s_plus_1_over_2_pairs():
    c, s, N = LLAMA2_7B, 4096, 32
    n, d = c.n_heads, c.head_dim
    full, half = flops_table(c, 1, s), flops_table(c, 1, s, HALF)
    pairs = s * (s + 1) // 2
    assert half.row("PV").total == N * 2 * pairs * n * d
    assert half.row("softmax(QKᵀ/√d)").total == N * (2 * pairs * n * d + 3 * pairs * n)
    assert full.total - half.total == N * (4 * n * d + 3 * n) * (s * s - pairs)
    assert half.row("PV").formula == "2b·s(s+1)/2·nd" and "causal pairs only" in half.title
    per_token_gap = training_flops_per_token(c, s) - training_flops_per_token(c, s, HALF)
    assert per_token_gap == pytest.approx(3 * N * (4 * n * d + 3 * n) * (s * s - pairs) / s)


def test_attention_overtakes_the_mlp_later_when_only_the_causal_half_counts():
    # attention = 8bsh² + 3bsh + (4h + 3n)·b·pairs, MLP = 6bshi + 5bsi; with pairs = s(s+1)/2:
    # s + 1 > 2(6hi + 5i − 8h² − 3h)/(4h + 3n) = 16548.26, so s = 16548 (full: 8274.1 -> 8275)
    h, i, n = 4096, 11008, 32
    bound = 2 * (6 * h * i + 5 * i - 8 * h * h - 3 * h) / (4 * h + 3 * n)
    assert math.floor(bound) == 16548  # the smallest s with s + 1 > bound
    assert attention_overtakes_mlp(LLAMA2_7B, convention=HALF) == 16548
    assert attention_overtakes_mlp(LLAMA2_7B) == 8275


@pytest.mark.parametrize("convention", [LECTURE, HALF], ids=["full", "causal half"])
def test_past_tokens_only_add_attended_pairs(convention):
    b, s, p = 2, 3, 5
    with_past = flops_table(SMALL, b, s, convention, past=p)
    without = flops_table(SMALL, b, s, convention)
    attended = {"PV", "softmax(QKᵀ/√d)"}
    for row, plain in zip(with_past.rows, without.rows):
        if row.term not in attended:
            assert row == plain
    pairs = s * p + s * (s + 1) // 2 if convention.causal_half else s * (p + s)
    n, d = SMALL.n_heads, SMALL.head_dim
    assert with_past.row("PV").flops == 2 * b * pairs * n * d
    assert with_past.row("PV").formula == ("2b·(sp + s(s+1)/2)·nd" if convention.causal_half
                                           else "2b·s(p+s)·nd")  # fmt: skip
    assert with_past.title.endswith(f"p={p}" + ", causal pairs only" * convention.causal_half)


def test_one_decoding_step_is_the_growth_of_the_causal_table():
    # counting only the causal pairs, the cost of one more token is one step with a cache
    for p in (1, 4, 100):
        longer, shorter = (flops_table(LLAMA2_7B, 2, s, HALF).total for s in (p + 1, p))
        assert flops_table(LLAMA2_7B, 2, 1, HALF, past=p).total == longer - shorter


@pytest.mark.parametrize("past, error", [(-1, cl.ParameterError), (1.5, cl.GraphError),
                                         (True, cl.GraphError)])  # fmt: skip
def test_past_must_be_a_count(past, error):
    with pytest.raises(error, match="flops_table: past"):
        flops_table(SMALL, 1, 2, past=past)


# -- recomputation: FLOPs added, activations kept, where the crossover goes ------------------------
def test_recomputed_flops_by_rows():
    for config in (LLAMA2_7B, dataclasses.replace(SMALL, n_layers=1)):
        table = flops_table(config, 2, 6)
        assert recomputed_flops(config, 2, 6) == 0
        assert recomputed_flops(config, 2, 6, "selective") == (
            table.row("softmax(QKᵀ/√d)").total + table.row("PV").total
        )
        once = sum(table.row(t).total for t in ("embedding", "RMSNorm (final)", "LM head"))
        assert recomputed_flops(config, 2, 6, "full") == table.total - once
    with pytest.raises(cl.ParameterError, match="recompute must be one of none, selective, full"):
        recomputed_flops(SMALL, 1, 2, "some")


def test_activations_with_recomputation_by_hand():
    b, s, N, h, kv, i, n, v = 3, 4, 2, 8, 4, 12, 2, 5
    per_block_no_p = 4 * b * s * h + b * s * (h + 2 * kv) + b * s * h + 4 * b * s * i
    once = 2 * b * s * h + 2 * b * s * v
    p = b * n * s * s
    total = {r: sum(activation_elements(SMALL, b, s, r).values()) for r in
             ("none", "selective", "full")}  # fmt: skip
    assert total["none"] == N * (per_block_no_p + p) + once
    assert total["selective"] == N * per_block_no_p + once
    assert activation_elements(SMALL, b, s, "selective")["attention probabilities P"] == 0
    assert total["full"] == N * b * s * h + per_block_no_p + p + once
    mem = training_memory(SMALL, b, s, dtype_bytes=4, recompute="full")
    assert mem.activations == 4 * total["full"] and "full recomputation" in mem.title


def test_recomputation_moves_the_memory_crossover():
    states = 16 * P
    # selective: linear in s; per token 2 bytes · (N(6h + 2kv + 4i) + 2h + 2v) = 5,059,584
    per_token = 2 * (32 * (6 * 4096 + 2 * 4096 + 4 * 11008) + 2 * 4096 + 2 * 32000)
    assert per_token == 5_059_584
    assert activations_overtake_states(LLAMA2_7B, recompute="selective") == states // per_token + 1
    # full: N·s·h kept + one block (with its 32·s² probabilities) + the final part:
    # 64 s² + 560,128 s bytes > 16 P
    a, bb = 64, 2 * (32 * 4096 + (6 * 4096 + 2 * 4096 + 4 * 11008) + 2 * 4096 + 2 * 32000)
    root = (-bb + math.sqrt(bb * bb + 4 * a * states)) / (2 * a)
    assert bb == 560_128
    assert activations_overtake_states(LLAMA2_7B, recompute="full") == math.floor(root) + 1
    assert activations_overtake_states(LLAMA2_7B) == 6125
    with pytest.raises(cl.ParameterError, match="activations_overtake_states: recompute"):
        activations_overtake_states(LLAMA2_7B, recompute="partial")


def test_fp32_gradients_make_18_bytes_per_parameter():
    zero = training_memory(LLAMA2_7B, 1, 16)
    hf = training_memory(LLAMA2_7B, 1, 16, grad_bytes=4)
    assert zero.weights + zero.gradients + zero.optimizer == 16 * P
    assert hf.weights + hf.gradients + hf.optimizer == 18 * P
    assert hf.activations == zero.activations and "4-byte gradients" in hf.title
    assert "gradients" not in zero.title
    with pytest.raises(cl.ParameterError, match="grad_bytes must be 1, 2, 4 or 8, got 3"):
        training_memory(LLAMA2_7B, 1, 16, grad_bytes=3)
    with pytest.raises(cl.ParameterError, match="grad_bytes must be 1, 2, 4 or 8, got True"):
        training_memory(LLAMA2_7B, 1, 16, grad_bytes=True)


# -- serving: the KV cache and one decoding step -----------------------------------------------
def test_kv_cache_bytes_by_hand():
    assert kv_cache_bytes(LLAMA2_7B) == 2 * 32 * 32 * 128 * 2 == 524_288  # 512 KiB per token
    assert kv_cache_bytes(LLAMA2_7B, 4096) == 2**31  # 2 GiB per 4096-token sequence
    assert kv_cache_bytes(GQA_7B, 4096, batch=3) == 3 * 2**31 // 4
    assert kv_cache_bytes(LLAMA2_7B, 10, dtype_bytes=4) == 2 * kv_cache_bytes(LLAMA2_7B, 10)
    with pytest.raises(cl.ShapeError, match="kv_cache_bytes: tokens must be a positive"):
        kv_cache_bytes(LLAMA2_7B, 0)
    with pytest.raises(cl.ParameterError, match="kv_cache_bytes: dtype_bytes must be"):
        kv_cache_bytes(LLAMA2_7B, 1, dtype_bytes=3)


def test_decode_step_by_hand():
    step = decode_step(LLAMA2_7B, 4, 100, "A100")
    assert step.weight_bytes == 2 * (P - 32000 * 4096) == 13_214_687_232
    assert step.kv_bytes == 4 * 101 * 524_288
    assert step.flops == flops_table(LLAMA2_7B, 4, 1, past=100).total
    assert step.flops == 4 * decode_step(LLAMA2_7B, 1, 100, "A100").flops  # linear in batch
    assert step.compute_seconds == step.flops / 312e12
    assert step.memory_seconds == (step.weight_bytes + step.kv_bytes) / 1555e9
    assert step.roofline == cl.perf.Roofline(bandwidth=1555e9, peak_flops=312e12)
    assert step.bound == "memory" and step.intensity < step.roofline.ridge
    assert step.seconds == pytest.approx(step.memory_seconds, rel=1e-12)
    assert step.tokens_per_second == 4 / step.seconds
    assert step.intensity == pytest.approx(step.flops / (step.weight_bytes + step.kv_bytes))
    with pytest.raises(cl.ParameterError, match="decode_step: context must be >= 0"):
        decode_step(LLAMA2_7B, 1, -1, "A100")


def test_decoding_becomes_compute_bound_at_the_crossover_batch():
    # no cache (context 0): W/BW / (F/peak − K/BW), about the ridge point 312e12/1555e9 ≈ 200.6
    one = decode_step(LLAMA2_7B, 1, 0, "A100")
    by_hand = (13_214_687_232 / 1555e9) / (one.flops / 312e12 - 524_288 / 1555e9)
    b = decode_crossover_batch(LLAMA2_7B, 0, "A100")
    assert b == math.ceil(by_hand) == 203
    assert decode_step(LLAMA2_7B, b - 1, 0, "A100").bound == "memory"
    assert decode_step(LLAMA2_7B, b, 0, "A100").bound == "compute"
    for batch in (1, b - 1, b, 4 * b):  # the roofline's bound is the slower of the two
        step = decode_step(LLAMA2_7B, batch, 0, "A100")
        slower = max(step.compute_seconds, step.memory_seconds)
        assert step.seconds == pytest.approx(slower, rel=1e-12)
        assert (step.bound == "compute") == (step.compute_seconds >= step.memory_seconds)
    # grouped-query attention reads 4x less cache per sequence: compute-bound sooner
    assert decode_crossover_batch(GQA_7B, 100, "A100") < decode_crossover_batch(LLAMA2_7B, 100,
                                                                                "A100")


def test_with_a_long_cache_decoding_is_memory_bound_at_any_batch():
    assert decode_crossover_batch(LLAMA2_7B, 4096, "A100") is None
    assert decode_crossover_batch(GQA_7B, 4096, "H100") is None
    assert decode_step(LLAMA2_7B, 10**6, 4096, "A100").bound == "memory"


def test_max_batch_by_hand():
    weights = 2 * P
    assert max_batch(LLAMA2_7B, 4096, "A100") == (40 * 2**30 - weights) // 2**31 == 13
    assert max_batch(LLAMA2_7B, 4096, "H100") == (80 * 2**30 - weights) // 2**31 == 33
    assert max_batch(GQA_7B, 4096, "A100") == (40 * 2**30 - 2 * param_count(GQA_7B)) // 2**29
    assert max_batch(LLAMA2_7B, 4096, "RTX 4090", dtype_bytes=4) == 0  # 27 GB of fp32 weights
    no_memory = dataclasses.replace(GPUS["A100"], memory_gib=None)
    with pytest.raises(cl.ParameterError, match="no memory size for the A100"):
        max_batch(LLAMA2_7B, 16, no_memory)
