"""GPU kernels side by side: achieved GB/s against a device-to-device copy, and matmul
TFLOP/s against ``cupy.matmul`` (cuBLAS). Medians of CUDA-event timings.

    .venv/bin/python benchmarks/gpu.py

Without an NVIDIA GPU (and CuPy) it says so and exits 0: the kernels are still verified on
such machines by NVRTC compilation and the CPU emulator (see tests/test_kernels_*.py).
"""

from __future__ import annotations

import sys

import numpy as np

from course_lib.backend import gpu_available
from course_lib.kernels import FusedElementwise, launch, reference
from course_lib.kernels.gpu import median_ms

LECTURE = FusedElementwise("fused_lecture", ("a", "b", "c", "d"), (("e", "d + (a + b) * c"),))


def bandwidth_rows(cupy, rng) -> list[tuple[str, float, float]]:
    """(kernel, ms, GB/s) for the memory-bound kernels, counting each array read/written once."""
    n = 1 << 26
    a, b, c, d = (cupy.asarray(rng.standard_normal(n, dtype=np.float32)) for _ in range(4))
    x = cupy.asarray(rng.standard_normal((8192, 4096), dtype=np.float32))
    w = cupy.asarray(rng.standard_normal(4096, dtype=np.float32))
    r = cupy.asarray(rng.standard_normal((8, 32, 1024, 128), dtype=np.float32))
    cos, sin = (cupy.asarray(t) for t in reference.rope_tables(1024, 128))
    out = cupy.empty_like(a)
    cases = {
        "device-to-device copy": (lambda: out.__setitem__(Ellipsis, a), 2 * a.nbytes),
        "vector_add": (lambda: launch.vector_add(a, b, mode="gpu"), 3 * a.nbytes),
        "vector_add_float4": (lambda: launch.vector_add_float4(a, b, mode="gpu"), 3 * a.nbytes),
        "fused d + (a + b) * c": (
            lambda: launch.fused(LECTURE, a, b, c, d, mode="gpu"),
            5 * a.nbytes,
        ),
        "softmax (8192 x 4096)": (lambda: launch.softmax(x, mode="gpu"), 2 * x.nbytes),
        "rmsnorm (8192 x 4096)": (lambda: launch.rmsnorm(x, w, mode="gpu"), 2 * x.nbytes),
        "rope (8, 32, 1024, 128)": (lambda: launch.rope(r, cos, sin, mode="gpu"), 2 * r.nbytes),
    }
    rows = []
    for name, (fn, nbytes) in cases.items():
        ms = median_ms(fn)
        rows.append((name, ms, nbytes / ms / 1e6))
    return rows


def flop_rows(cupy, rng) -> list[tuple[str, float, float]]:
    """(kernel, ms, TFLOP/s) for the matmuls and attention."""
    m = n = k = 2048
    a = cupy.asarray(rng.standard_normal((m, k), dtype=np.float32))
    b = cupy.asarray(rng.standard_normal((k, n), dtype=np.float32))
    q = cupy.asarray(rng.standard_normal((4, 32, 1024, 64), dtype=np.float32))
    kv = cupy.asarray(rng.standard_normal((4, 8, 1024, 64), dtype=np.float32))
    attention_flops = 4 * 4 * 32 * 1024 * 1024 * 64 / 2  # QK^T and PV, half the pairs (causal)
    cases = {
        "cupy.matmul (cuBLAS) 2048^3": (lambda: cupy.matmul(a, b), 2 * m * n * k),
        "matmul_naive 2048^3": (lambda: launch.matmul_naive(a, b, mode="gpu"), 2 * m * n * k),
        "matmul_tiled 2048^3": (lambda: launch.matmul_tiled(a, b, mode="gpu"), 2 * m * n * k),
        "attention causal GQA 32/8 heads, T=1024": (
            lambda: launch.attention(q, kv, kv, True, mode="gpu"),
            attention_flops,
        ),
    }
    rows = []
    for name, (fn, flops) in cases.items():
        ms = median_ms(fn, repeats=10)
        rows.append((name, ms, flops / ms / 1e9))
    return rows


def print_table(title: str, unit: str, rows, baseline: float) -> None:
    print(f"\n{title}")
    print(f"{'kernel':42s} {'ms':>9s} {unit:>9s} {'ratio':>7s}")
    for name, ms, rate in rows:
        print(f"{name:42s} {ms:9.3f} {rate:9.2f} {rate / baseline:7.2f}")


def main() -> int:
    if not gpu_available():
        print("no NVIDIA GPU with CuPy here: nothing to time. The kernels are still checked by")
        print("NVRTC (sm_80, sm_90) and run in the CPU emulator: pytest tests/test_kernels_*.py")
        return 0
    import cupy  # noqa: PLC0415

    rng = np.random.default_rng(0)
    name = cupy.cuda.runtime.getDeviceProperties(0)["name"]
    print(f"GPU: {name.decode() if isinstance(name, bytes) else name}")
    memory = bandwidth_rows(cupy, rng)
    print_table("Memory-bound kernels (ratio: against the copy)", "GB/s", memory, memory[0][2])
    compute = flop_rows(cupy, rng)
    print_table("Compute-bound kernels (ratio: against cuBLAS)", "TFLOP/s", compute, compute[0][2])
    return 0


if __name__ == "__main__":
    sys.exit(main())
