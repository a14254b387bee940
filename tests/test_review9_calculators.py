"""Review of the LLM calculators against published figures and hand counts, and the inputs
that gave a wrong number, a hang or a raw error (occupancy, hand-built GPUs, MFU above 1,
op families, the crossover search)."""

import dataclasses

import pytest

import course_lib as cl
from course_lib.kernels.gpus import GPUS, occupancy
from course_lib.models import LlamaConfig, param_count
from course_lib.models.compute import flops_by_family, shares_table
from course_lib.models.crossover import LONGEST, first_seq_where
from course_lib.models.flops import training_flops_per_token
from course_lib.models.gpu_time import achieved_mfu, peak_flops, seconds_at_mfu
from course_lib.models.inference import decode_crossover_batch, decode_step, kv_cache_bytes
from course_lib.models.parallel import parallel_memory

LLAMA2_7B = LlamaConfig.llama2_7b()
LLAMA2_13B = LlamaConfig(dim=5120, n_layers=40, n_heads=40, n_kv_heads=40, ffn_dim=13824,
                         vocab_size=32000, max_seq_len=4096)  # fmt: skip
LLAMA2_70B = LlamaConfig(dim=8192, n_layers=80, n_heads=64, n_kv_heads=8, ffn_dim=28672,
                         vocab_size=32000, max_seq_len=4096)  # fmt: skip
LLAMA3_8B = LlamaConfig(dim=4096, n_layers=32, n_heads=32, n_kv_heads=8, ffn_dim=14336,
                        vocab_size=128256, max_seq_len=8192, rope_theta=500000.0)  # fmt: skip
SMALL = LlamaConfig(dim=16, n_layers=3, n_heads=4, n_kv_heads=2, ffn_dim=24, vocab_size=7,
                    max_seq_len=8)  # fmt: skip


# -- oracles: published counts, the 6·N·D rule, hand counts (these held before the review) -------
@pytest.mark.parametrize("config, published", [
    (LLAMA2_7B, 6_738_415_616), (LLAMA2_13B, 13_015_864_320), (LLAMA2_70B, 68_976_648_192),
    (LLAMA3_8B, 8_030_261_248),
])  # fmt: skip
def test_parameter_counts_are_the_published_ones(config, published):
    assert param_count(config) == published


def test_kv_cache_per_token_is_2_layers_kv_heads_head_size_bytes():
    assert kv_cache_bytes(LLAMA2_70B) == 2 * 80 * 8 * 128 * 2 == 320 * 2**10
    assert kv_cache_bytes(LLAMA3_8B, 8192, 4) == 2 * 32 * 8 * 128 * 2 * 8192 * 4


@pytest.mark.parametrize("config", [LLAMA2_7B, LLAMA3_8B, SMALL])
@pytest.mark.parametrize("s", [1, 4096])
def test_training_flops_per_token_is_6n_plus_12_layers_h_s_plus_the_small_terms(config, s):
    c = config
    h, n, d, i, v, N = c.dim, c.n_heads, c.head_dim, c.ffn_dim, c.vocab_size, c.n_layers
    matrices = param_count(c) - v * h - (2 * N + 1) * h  # all but the gather and the norms
    small = N * (2 * (4 * h + 2) + 3 * n * d + 3 * s * n + 5 * i + 2 * h) + 4 * h + 2
    expected = 6 * matrices + 12 * N * h * s + 3 * small
    assert training_flops_per_token(c, s) == pytest.approx(expected, rel=1e-12)


def test_zero_shards_round_up_and_send_by_hand():
    # P = 3 · (2·16² + 2·16·8 + 3·16·24 + 2·16) + 2·7·16 + 16 = 6096; over 5 devices a shard
    # holds ⌈6096 / 5⌉ = 1220 parameters
    assert param_count(SMALL) == 6096
    z3 = parallel_memory(SMALL, 5, 4, 5, "zero-3")
    assert (z3.weights, z3.gradients, z3.optimizer) == (2440, 2440, 1220 * 12)
    assert z3.communication == pytest.approx(4 / 5 * (2 * 6096 + 2 * 2 * 6096))
    z1 = parallel_memory(SMALL, 5, 4, 5, "zero-1")
    assert (z1.weights, z1.gradients, z1.optimizer) == (12192, 12192, 1220 * 12)
    assert z1.communication == pytest.approx(2 * 4 / 5 * 12192)  # an all-reduce's bytes


@pytest.mark.parametrize("config", [LLAMA2_7B, LLAMA2_70B, LLAMA3_8B])
@pytest.mark.parametrize("gpu", ["A100", "H100"])
def test_the_crossover_batch_is_where_the_decode_step_turns_compute_bound(config, gpu):
    for context in (0, 64, 128):
        b = decode_crossover_batch(config, context, gpu)
        if b is None:
            assert decode_step(config, 10**7, context, gpu).bound == "memory"
            continue
        assert decode_step(config, b, context, gpu).bound == "compute"
        assert b == 1 or decode_step(config, b - 1, context, gpu).bound == "memory"


# -- occupancy -----------------------------------------------------------------------------------
@pytest.mark.parametrize("args, error", [
    ((32.5, 32, 0), cl.GraphError),  # was 32 blocks, "limited by threads"
    ((True, 32, 0), cl.GraphError),  # was one-thread blocks
    ((256, 32.0, 0), cl.GraphError),
    (("256", 32, 0), cl.GraphError),  # was "'<=' not supported between 'int' and 'str'"
    ((256, 32, 0.5), cl.GraphError),
    ((256, 32, -50_000), cl.ParameterError),  # was -4 blocks per SM, occupancy -50 %
])  # fmt: skip
def test_occupancy_takes_whole_threads_registers_and_shared_bytes(args, error):
    with pytest.raises(error, match="occupancy"):
        occupancy("A100", *args)
    assert occupancy("A100", 256, 32, 0).blocks_per_sm == 8


# -- peaks and MFU -------------------------------------------------------------------------------
@pytest.mark.parametrize("peak, error", [
    (0.0, cl.ParameterError),  # was ZeroDivisionError in seconds_at_mfu and achieved_mfu
    (-312.0, cl.ParameterError),  # was negative seconds
    ("312", cl.GraphError),  # was "can't multiply sequence by non-int of type 'float'"
])  # fmt: skip
def test_a_hand_built_gpu_needs_a_positive_peak(peak, error):
    gpu = dataclasses.replace(GPUS["A100"], name="my A100", bf16_tflops=peak)
    for call in (lambda: peak_flops(gpu), lambda: seconds_at_mfu(1e12, gpu, 0.5),
                 lambda: achieved_mfu(1e12, 1.0, gpu)):  # fmt: skip
        with pytest.raises(error, match="the my A100's bf16_tflops"):
            call()


def test_an_mfu_above_one_is_refused():
    tokens, flops_per_token = 2e12, 6 * param_count(LLAMA2_7B)
    reported = 184_320 * 3600  # LLaMA-2-7B's A100-hours as GPU-seconds: 39 %
    assert achieved_mfu(flops_per_token * tokens, reported, "A100") == pytest.approx(0.3906, 1e-3)
    with pytest.raises(cl.ParameterError, match="cannot exceed 1 .are the seconds GPU-hours"):
        achieved_mfu(flops_per_token * tokens, 184_320, "A100")  # the hours: was 1406 (140,610 %)
    assert achieved_mfu(312e12, 1.0, "A100") == 1.0  # at the peak exactly


# -- op families ---------------------------------------------------------------------------------
def test_a_family_is_a_tuple_of_op_names_and_an_op_is_in_one_family():
    x = cl.variable("x", (2, 3))
    y = (x + x) * x
    assert flops_by_family(y, {"adds": ("add",)}) == {"adds": 6, "other": 6}
    # ("add") is the string "add": the ops were grouped by the letters a and d, so every add
    # went to "other" ({"adds": 0, "other": 12})
    with pytest.raises(cl.ParameterError, match="family 'adds': give a tuple of op names"):
        flops_by_family(y, {"adds": ("add")})
    # an op listed twice counted in the last family only ({"adds": 0, "both": 12})
    with pytest.raises(cl.ParameterError, match="op 'add' is in two families, 'adds' and 'both'"):
        flops_by_family(y, {"adds": ("add",), "both": ("add", "mul")})


def test_shares_table_lines_up_short_names_and_takes_no_rows():
    lines = shares_table({"a": 1, "b": 3}).splitlines()
    # the amounts ended under "family" when the names were shorter than the header
    assert len({len(line) for line in lines}) == 1
    assert lines[0].index("FLOPs") + len("FLOPs") == lines[1].index("1") + 1
    assert shares_table({}) == shares_table({"a": 1}).splitlines()[0]  # was max() of nothing


# -- the crossover search ------------------------------------------------------------------------
def test_a_cost_that_never_overtakes_is_reported_not_searched_forever():
    calls = []

    def never(seq):
        calls.append(seq)
        if len(calls) > 100:  # the old search doubled s forever
            raise AssertionError("still searching")
        return False

    with pytest.raises(cl.ParameterError, match="false at every length up to 1,099,511,627,776"):
        first_seq_where(never)
    assert max(calls) == LONGEST
    assert first_seq_where(lambda s: s >= LONGEST) == LONGEST
    assert first_seq_where(lambda s: s >= 8276) == 8276
