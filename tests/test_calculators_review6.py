"""Review of notebook 09's budget calculators: arguments that gave a wrong number or a raw
error, fp64 AdamW moments, and the GPUs' memory as nvidia-smi shows it."""

import dataclasses

import numpy as np
import pytest

import course_lib as cl
from course_lib.kernels.gpus import GPUS, get_gpu
from course_lib.models import LlamaConfig, param_count, training_memory
from course_lib.models.flops import LECTURE, FlopConvention
from course_lib.models.gpu_time import peak_flops
from course_lib.models.inference import decode_step, kv_cache_bytes, max_batch
from course_lib.models.parallel import parallel_memory, ring_all_reduce_bytes

LLAMA2_7B = LlamaConfig.llama2_7b()
SMALL = LlamaConfig(dim=16, n_layers=3, n_heads=4, n_kv_heads=2, ffn_dim=24, vocab_size=7,
                    max_seq_len=8)  # fmt: skip


# -- bytes per number ----------------------------------------------------------------------------
@pytest.mark.parametrize("bad", [np.True_, np.array([2, 4]), np.array([2])])
@pytest.mark.parametrize("call", [
    lambda bad: kv_cache_bytes(SMALL, 1, 1, bad),
    lambda bad: training_memory(SMALL, 1, 4, dtype_bytes=bad),
    lambda bad: training_memory(SMALL, 1, 4, grad_bytes=bad),
    lambda bad: parallel_memory(SMALL, 2, 4, 2, "data", dtype_bytes=bad),
])  # fmt: skip
def test_bytes_per_number_is_not_a_numpy_bool_or_an_array(call, bad):
    # np.True_ == 1 passed as one byte per number (kv_cache_bytes gave half the bf16 bytes);
    # an array raised NumPy's "truth value is ambiguous"
    with pytest.raises(cl.ParameterError, match="_bytes must be 1, 2, 4 or 8"):
        call(bad)


def test_a_float_byte_count_still_gives_integer_bytes():
    for dtype_bytes in (2.0, np.float64(2.0), np.int64(2)):
        mem = training_memory(SMALL, 1, 4, dtype_bytes=dtype_bytes)
        assert mem.parts() == training_memory(SMALL, 1, 4).parts()
        assert all(type(n) is int for n in mem.parts().values())
        dp = parallel_memory(SMALL, 2, 4, 2, "zero-3", dtype_bytes=dtype_bytes)
        assert all(type(n) is int for n in dp.parts().values())


def test_adamw_moments_are_as_wide_as_fp64_weights():
    p = param_count(SMALL)
    per_parameter = {d: training_memory(SMALL, 1, 4, dtype_bytes=d).optimizer // p
                     for d in (1, 2, 4, 8)}  # fmt: skip
    # fp32 moments and an fp32 master copy below fp32; fp32 weights are their own master copy;
    # fp64 weights keep fp64 moments (PyTorch's and course_lib's AdamW: zeros_like(param))
    assert per_parameter == {1: 12, 2: 12, 4: 8, 8: 16}
    assert training_memory(SMALL, 1, 4, dtype_bytes=8, optimizer="sgd").optimizer == 0


# -- ring all-reduce -----------------------------------------------------------------------------
@pytest.mark.parametrize("devices", [0, -2, True, np.True_, 2.5, "4", None])
def test_ring_all_reduce_needs_a_positive_device_count(devices):
    # 0 raised ZeroDivisionError; -2 gave 300 bytes, True 0, 2.5 120
    with pytest.raises(cl.ShapeError, match="ring_all_reduce_bytes: devices"):
        ring_all_reduce_bytes(100, devices)


@pytest.mark.parametrize("buffer", [-5, float("nan"), float("inf")])
def test_ring_all_reduce_needs_a_finite_buffer_of_at_least_zero_bytes(buffer):
    assert ring_all_reduce_bytes(np.int64(800), np.int64(8)) == 1400  # NumPy integers are fine
    with pytest.raises(cl.ParameterError, match="ring_all_reduce_bytes: buffer_bytes"):
        ring_all_reduce_bytes(buffer, 4)


# -- FLOP conventions ----------------------------------------------------------------------------
@pytest.mark.parametrize("field", ["rope_per_element", "softmax_per_score", "swish_per_element",
                                   "rms_per_element", "rms_per_row"])  # fmt: skip
def test_a_flop_convention_costs_whole_non_negative_flops(field):
    # a negative softmax cost (-1000) kept attention below the MLP at every length, so
    # attention_overtakes_mlp doubled s forever
    with pytest.raises(cl.ParameterError, match=f"FlopConvention.{field} must be >= 0"):
        FlopConvention(**{field: -1})
    with pytest.raises(cl.GraphError, match=f"FlopConvention.{field} must be an integer"):
        FlopConvention(**{field: 4.5})
    assert FlopConvention(**{field: np.int64(0)}) is not None


@pytest.mark.parametrize("field", ["rope_on_keys", "embedding_as_matmul", "causal_half"])
@pytest.mark.parametrize("bad", [2, 1, "yes", None])
def test_a_flop_convention_switch_is_true_or_false(field, bad):
    # embedding_as_matmul=2 counted the embedding twice; causal_half=2 wrote the title's
    # "causal pairs only" twice
    with pytest.raises(cl.GraphError, match=f"FlopConvention.{field} must be True or False"):
        dataclasses.replace(LECTURE, **{field: bad})


# -- GPUs by name --------------------------------------------------------------------------------
@pytest.mark.parametrize("call", [
    lambda: get_gpu(["A100"]),
    lambda: get_gpu({}),
    lambda: peak_flops("A100", ["bf16"]),
    lambda: decode_step(SMALL, 1, 0, ["A100"]),
    lambda: decode_step(SMALL, 1, 0, "A100", precision=["bf16"]),
])  # fmt: skip
def test_a_gpu_or_precision_that_is_not_a_name_is_refused(call):
    # raised "unhashable type: 'list'" from the dict lookup
    with pytest.raises(cl.ParameterError, match="unknown (GPU|precision)"):
        call()


@pytest.mark.parametrize("context", [0, -3, True, 2.5])
def test_max_batch_names_its_own_context(context):
    # the error came from kv_cache_bytes, about "tokens"
    with pytest.raises(cl.ShapeError, match="max_batch: context must be a positive integer"):
        max_batch(SMALL, context, "A100")


def test_gpu_memory_is_what_nvidia_smi_shows():
    # nvidia-smi's totals: A100 40 GB 40960 MiB, H100 80 GB HBM3 81559 MiB, T4 15360 MiB (ECC on)
    assert GPUS["A100"].memory_gib == 40960 / 1024
    assert GPUS["H100"].memory_gib == round(81559 / 1024, 1) == 79.6
    assert GPUS["T4"].memory_gib == 15360 / 1024
    weights = 2 * param_count(LLAMA2_7B)
    free = GPUS["H100"].memory_gib * 2**30 - weights
    assert max_batch(LLAMA2_7B, 4096, "H100") == int(free // 2**31) == 33
