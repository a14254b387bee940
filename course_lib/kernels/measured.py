"""Kernel speeds measured on a real GPU, stored with the GPU, the date and what was timed,
next to the targets of issue 21 (for notebook 07: the emulator counts, a GPU measures).

Each figure is a ratio to a baseline on the same GPU: memory-bound kernels to a
device-to-device copy, compute-bound ones to cuBLAS FP32 matmul at 2048³ (``benchmarks/gpu.py``
prints both; ``make gpu-check`` runs it). Replace a :class:`Measurement` with a newer run's.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..tables import ShownAsTable, Table


@dataclass(frozen=True, repr=False)
class Measurement(ShownAsTable):
    """Ratios measured on one GPU (kernel -> fraction of its baseline) and their targets."""

    gpu: str
    date: str
    source: str
    baselines: str
    ratios: dict[str, float]
    targets: dict[str, float]

    def table(self) -> Table:
        kernels = [*self.ratios, *(k for k in self.targets if k not in self.ratios)]
        rows = [[kernel, f"{self.ratios[kernel]:.2f}" if kernel in self.ratios else "-",
                 f">= {self.targets[kernel]:.1f}" if kernel in self.targets else ""]
                for kernel in kernels]  # fmt: skip
        title = f"measured on an {self.gpu} ({self.date}; {self.source}); {self.baselines}"
        return Table(["kernel", "measured ratio", "target"], rows, title)


#: Issue 21's measurement, of the kernels before the register/shuffle/tiled rewrites.
H100_BEFORE = Measurement(
    gpu="H100 SXM",
    date="2026-11",
    source="benchmarks/gpu.py, driver 580, kernels as before issue 21's rewrite",
    baselines="ratios to copy (2852 GB/s) or cuBLAS FP32 2048³ (47.9 TFLOP/s)",
    ratios={"vector_add": 0.79, "vector_add_float4": 0.86, "fused d + (a + b) * c": 0.91,
            "softmax": 0.38, "rms_norm": 0.42, "rope": 0.60, "matmul_naive": 0.11,
            "matmul_tiled": 0.16, "attention (causal GQA, T=1024)": 0.03},  # fmt: skip
    # matmul_register_tiled had no figure in that run
    targets={"softmax": 0.8, "rms_norm": 0.8, "matmul_register_tiled": 0.5,
             "attention (causal GQA, T=1024)": 0.3},  # fmt: skip
)


#: The kernels after issue 21's rewrites, measured by ``make gpu-check`` on an H200 (a GPU with
#: an H100's arithmetic and faster memory: each ratio is to that GPU's own copy or cuBLAS).
H200_AFTER = Measurement(
    gpu="H200",
    date="2026-11-26",
    source="make gpu-check, driver 580, CuPy 14.2; softmax and rms_norm at 16 values a "
    "thread, from the same session's block-size sweep (copy 3944 GB/s there)",
    baselines="ratios to copy (4168 GB/s) or cuBLAS FP32 2048³ (48.2 TFLOP/s)",
    ratios={"vector_add": 0.81, "vector_add_float4": 1.03, "fused d + (a + b) * c": 0.99,
            "softmax": 0.67, "rms_norm": 0.71, "rope": 0.75, "matmul_naive": 0.11,
            "matmul_tiled": 0.17, "matmul_register_tiled": 0.68,
            "attention (causal GQA, T=1024)": 0.22},  # fmt: skip
    targets=H100_BEFORE.targets,
)


#: The kernels after float4 row loads, attention built per head size with at most 64 registers,
#: and the attention softmax, its adjoint and RMSNorm's adjoint as row kernels: ``make
#: gpu-check``'s ``benchmarks/gpu.py`` on an H100 (2026-11-27). The same session's sweep timed
#: the previous row kernels on this H100 at 0.90 (softmax) and 0.92 (rms_norm) of copy: the
#: H200's 0.67 and 0.71 above were its faster memory, which needs more bytes in flight.
H100_AFTER = Measurement(
    gpu="H100 80GB HBM3",
    date="2026-11-27",
    source="make gpu-check (benchmarks/gpu.py), driver 580, CuPy 14.2",
    baselines="ratios to copy (2981 GB/s) or cuBLAS FP32 2048³ (47.3 TFLOP/s)",
    ratios={"vector_add": 0.91, "vector_add_float4": 1.00, "fused d + (a + b) * c": 0.96,
            "softmax": 0.96, "causal_softmax": 0.95, "softmax_grad": 0.99, "rms_norm": 0.96,
            "rms_norm_grad_x": 0.97, "rope": 0.88, "matmul_naive": 0.11, "matmul_tiled": 0.16,
            "matmul_register_tiled": 0.66, "attention (causal GQA, T=1024)": 0.30},  # fmt: skip
    targets=H100_BEFORE.targets,
)
