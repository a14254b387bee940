"""From FLOPs to time on a GPU: seconds at a stated MFU, and the MFU a reported time implies.

Model FLOPs utilisation (MFU, Chowdhery et al., 2022, the PaLM paper) is the FLOPs the model
needs per second — a training step counted as 3 × forward, whatever the implementation
recomputes — as a fraction of the GPU's peak rate. It folds everything a FLOP count leaves
out (memory-bound ops, communication, pipeline bubbles, restarts) into one number, so

    seconds = FLOPs / (GPUs × MFU × peak)        and        MFU = FLOPs / (GPU-seconds × peak).

The peaks are the published ones of :data:`course_lib.kernels.gpus.GPUS` (dense tensor-core
BF16 by default, the precision LLMs train in).
"""

from __future__ import annotations

from .. import params
from ..errors import ParameterError
from ..kernels.gpus import GPU, get_gpu

#: Precision -> the field of :class:`~course_lib.kernels.gpus.GPU` holding its peak TFLOP/s.
PRECISIONS = {"bf16": "bf16_tflops", "tf32": "tf32_tflops", "fp32": "fp32_tflops"}


def peak_flops(gpu: GPU | str, precision: str = "bf16") -> float:
    """The GPU's published peak rate in FLOP/s for ``precision`` (``"bf16"``, ``"tf32"``,
    ``"fp32"``): A100 BF16 is 312e12."""
    gpu = get_gpu(gpu)
    if not isinstance(precision, str) or precision not in PRECISIONS:
        raise ParameterError(f"unknown precision {precision!r}; use one of {', '.join(PRECISIONS)}")
    tflops = getattr(gpu, PRECISIONS[precision])
    if tflops is None:
        raise ParameterError(f"the {gpu.name} has no {precision} rate (its table entry is None)")
    # a GPU built by hand: 0 divided by zero in seconds_at_mfu, a negative gave negative seconds
    return params.real(tflops, f"peak_flops: the {gpu.name}'s {PRECISIONS[precision]}",
                       positive=True) * 1e12  # fmt: skip


def seconds_at_mfu(
    flops: float, gpu: GPU | str, mfu: float, n_gpus: int = 1, precision: str = "bf16"
) -> float:
    """Wall-clock seconds for ``flops`` model FLOPs on ``n_gpus`` GPUs running at ``mfu``
    (a fraction in (0, 1]) of their peak.

    Examples
    --------
    >>> round(seconds_at_mfu(192.18e12, "A100", 0.4), 2)   # one LLaMA-2-7B step, b=1, s=4096
    1.54
    """
    flops = params.real(flops, "seconds_at_mfu: flops", minimum=0.0)
    if not 0 < params.real(mfu, "seconds_at_mfu: mfu") <= 1:
        raise ParameterError(f"seconds_at_mfu: mfu is a fraction of the peak in (0, 1], got {mfu}")
    n_gpus = params.positive_size(n_gpus, "seconds_at_mfu: n_gpus")
    return flops / (n_gpus * mfu * peak_flops(gpu, precision))


def achieved_mfu(
    flops: float, gpu_seconds: float, gpu: GPU | str, precision: str = "bf16"
) -> float:
    """The MFU at which ``flops`` model FLOPs took ``gpu_seconds`` (seconds × GPUs, e.g.
    reported GPU-hours × 3600). More than 1 (beyond round-off, which gives 1) is a
    ParameterError: no GPU beats its peak, so the FLOPs or the seconds are wrong (GPU-hours
    passed as seconds give 3600 times the MFU)."""
    flops = params.real(flops, "achieved_mfu: flops", minimum=0.0)
    seconds = params.real(gpu_seconds, "achieved_mfu: gpu_seconds", positive=True)
    mfu = flops / (seconds * peak_flops(gpu, precision))
    # round-off: the seconds of seconds_at_mfu(flops, gpu, 1.0) can give back 1 + 2**-52
    if mfu > 1 + 1e-12:
        raise ParameterError(
            f"achieved_mfu: {flops:.4g} FLOPs in {seconds:.4g} GPU-seconds is {mfu:.4g} times "
            f"the peak; an MFU cannot exceed 1 (are the seconds GPU-hours?)"
        )
    return min(mfu, 1.0)
