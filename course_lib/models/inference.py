"""The arithmetic of serving a decoder: the KV cache, and what bounds one decoding step.

A decoding step feeds one new token per sequence. Every weight matrix is read from memory
once per step, whatever the batch, while the FLOPs grow with the batch: at batch b the
weight products do about 2·P·b FLOPs for 2·P bytes (bf16), b FLOPs per byte. Below the
GPU's ridge point (peak FLOP/s ÷ bytes/s, about 200 for an A100 in BF16) the step waits for
memory, so a larger batch costs almost nothing more; above it, compute bounds the step.
The KV cache spoils this: each sequence also reads its own cached keys and values, about
1 FLOP per byte (n/n_kv FLOPs per byte with grouped-query attention), so with long contexts
the step can stay memory-bound at any batch.

Conventions: one step reads every parameter but the embedding (a gather of b rows, which
is left out) and the whole cache of every sequence (``context`` tokens plus the new one's K
and V); activations are not counted (they stay small at one token per sequence). FLOPs are
those of :func:`~course_lib.models.flops.flops_table` with ``seq=1, past=context``. Time is the
roofline bound (:class:`~course_lib.perf.Roofline` with the GPU's peak and bandwidth): FLOPs ÷
the attainable FLOP/s at the step's intensity, min(peak, intensity × bandwidth), which is the
larger of FLOPs ÷ peak and bytes ÷ bandwidth.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .. import params
from ..errors import ParameterError
from ..kernels.gpus import GPU, get_gpu
from ..perf import Roofline
from .config import LlamaConfig, number_bytes, positive_size, require_config
from .flops import flops_table
from .gpu_time import peak_flops
from .memory import param_count


def kv_cache_bytes(
    config: LlamaConfig, tokens: int = 1, batch: int = 1, dtype_bytes: int = 2
) -> int:
    """Bytes of the keys and values cached for ``tokens`` tokens of ``batch`` sequences:
    2 (K and V) · N layers · n_kv heads · d · bytes per number, per token.

    Examples
    --------
    >>> kv_cache_bytes(LlamaConfig.llama2_7b())       # one token, bf16: 512 KiB
    524288
    """
    c = require_config(config, "kv_cache_bytes")
    t = positive_size(tokens, "tokens", "kv_cache_bytes")
    b = positive_size(batch, "batch", "kv_cache_bytes")
    per_token = 2 * c.n_layers * c.n_kv_heads * c.head_dim
    per_token *= number_bytes(dtype_bytes, "dtype_bytes", "kv_cache_bytes")
    return per_token * t * b


@dataclass(frozen=True)
class DecodeStep:
    """One decoding step of ``batch`` sequences holding ``context`` cached tokens each."""

    batch: int
    context: int
    flops: int
    weight_bytes: int
    kv_bytes: int
    roofline: Roofline  # the GPU's peak FLOP/s and DRAM bytes/s

    @property
    def bytes(self) -> int:
        return self.weight_bytes + self.kv_bytes

    @property
    def intensity(self) -> float:
        """FLOPs per byte moved."""
        return self.flops / self.bytes

    @property
    def compute_seconds(self) -> float:
        """The FLOPs at the peak rate."""
        return self.flops / self.roofline.peak_flops

    @property
    def memory_seconds(self) -> float:
        """The bytes at the DRAM bandwidth."""
        return self.bytes / self.roofline.bandwidth

    @property
    def seconds(self) -> float:
        """The roofline bound on the step's time: FLOPs ÷ attainable FLOP/s."""
        return self.flops / float(self.roofline.attainable(self.intensity))

    @property
    def bound(self) -> str:
        """``"compute"`` at or past the ridge point, else ``"memory"``."""
        return "compute" if self.intensity >= self.roofline.ridge else "memory"

    @property
    def tokens_per_second(self) -> float:
        """New tokens per second over the whole batch (one per sequence per step)."""
        return self.batch / self.seconds


def decode_step(
    config: LlamaConfig,
    batch: int,
    context: int,
    gpu: GPU | str,
    dtype_bytes: int = 2,
    precision: str = "bf16",
) -> DecodeStep:
    """FLOPs, bytes and the roofline time of one decoding step (see the module docstring).

    ``context`` is the number of tokens already cached per sequence (0: the first token).
    """
    c = require_config(config, "decode_step")
    b = positive_size(batch, "batch", "decode_step")
    p = params.integer(context, "decode_step: context")
    if p < 0:
        raise ParameterError(f"decode_step: context must be >= 0 tokens, got {context}")
    gpu = get_gpu(gpu)
    return DecodeStep(
        batch=b,
        context=p,
        flops=flops_table(c, b, 1, past=p).total,
        weight_bytes=(param_count(c) - c.vocab_size * c.dim)
        * number_bytes(dtype_bytes, "dtype_bytes", "decode_step"),
        kv_bytes=kv_cache_bytes(c, p + 1, b, dtype_bytes),
        roofline=Roofline(bandwidth=gpu.dram_gb_per_s * 1e9, peak_flops=peak_flops(gpu, precision)),
    )


def decode_crossover_batch(
    config: LlamaConfig,
    context: int,
    gpu: GPU | str,
    dtype_bytes: int = 2,
    precision: str = "bf16",
) -> int | None:
    """The smallest batch at which a decoding step is compute-bound, or None if none is.

    FLOPs grow as b·F and bytes as W + b·K (F, K per sequence, W the weights), so the
    step is compute-bound once b·F/peak >= (W + b·K)/bandwidth, i.e. for
    b >= (W/bandwidth) / (F/peak − K/bandwidth); never if F/peak <= K/bandwidth (each
    sequence's cache alone takes longer to read than its FLOPs take to compute).
    """
    one = decode_step(config, 1, context, gpu, dtype_bytes, precision)
    roof = one.roofline
    per_sequence = one.compute_seconds - one.kv_bytes / roof.bandwidth
    if per_sequence <= 0:
        return None
    return max(1, math.ceil(one.weight_bytes / roof.bandwidth / per_sequence))


def max_batch(config: LlamaConfig, context: int, gpu: GPU | str, dtype_bytes: int = 2) -> int:
    """How many sequences of ``context`` tokens fit in the GPU's memory next to the weights
    (all of them, the embedding included): (memory − weights) // KV cache per sequence.
    0 when the weights alone do not fit. Activations and fragmentation are not counted."""
    c = require_config(config, "max_batch")
    context = positive_size(context, "context", "max_batch")
    gpu = get_gpu(gpu)
    if gpu.memory_gib is None:
        raise ParameterError(f"max_batch: the table has no memory size for the {gpu.name}")
    weights = param_count(c) * number_bytes(dtype_bytes, "dtype_bytes", "max_batch")
    free = gpu.memory_gib * 2**30 - weights
    return max(0, int(free // kv_cache_bytes(c, context, 1, dtype_bytes)))
