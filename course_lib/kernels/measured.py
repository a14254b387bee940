"""Kernel speeds measured on a real GPU, stored with the GPU, the date and what was timed,
next to their targets (for notebook 07: the emulator counts, a GPU measures).

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


#: Issue 21's targets, as fractions of the same baselines.
TARGETS = {"softmax": 0.8, "rms_norm": 0.8, "matmul_register_tiled": 0.5,
           "attention (causal GQA, T=1024)": 0.3}  # fmt: skip


#: The kernels after float4 row loads, attention built per head size with at most 64 registers,
#: and the attention softmax, its adjoint and RMSNorm's adjoint as row kernels: ``make
#: gpu-check``'s ``benchmarks/gpu.py`` on an H100 (2026-11-27). Earlier runs (the kernels
#: before these rewrites, an H200) are in benchmarks/README.md.
H100_AFTER = Measurement(
    gpu="H100 80GB HBM3",
    date="2026-11-27",
    source="the course's GPU check (CUDA events, inputs on the device), driver 580, CuPy 14.2",
    baselines="ratios to copy (2981 GB/s) or cuBLAS FP32 2048³ (47.3 TFLOP/s)",
    ratios={"vector_add": 0.91, "vector_add_float4": 1.00, "fused d + (a + b) * c": 0.96,
            "softmax": 0.96, "causal_softmax": 0.95, "softmax_grad": 0.99, "rms_norm": 0.96,
            "rms_norm_grad_x": 0.97, "rope": 0.88, "matmul_naive": 0.11, "matmul_tiled": 0.16,
            "matmul_register_tiled": 0.66, "attention (causal GQA, T=1024)": 0.30},  # fmt: skip
    targets=TARGETS,
)
