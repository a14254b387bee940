"""GPU kernels side by side: achieved GB/s against a device-to-device copy, matmul TFLOP/s
against ``cupy.matmul`` (cuBLAS), and each kernel's measured time next to the roofline bound
the emulator's counts predict for this GPU. Medians of CUDA-event timings.

    .venv/bin/python benchmarks/gpu.py
    .venv/bin/python benchmarks/gpu.py --predict A100 [--small]   # bounds only, no GPU needed

Without an NVIDIA GPU (and CuPy) it says so and exits 0: the kernels are still verified on
such machines by NVRTC compilation and the CPU emulator (see tests/test_kernels_*.py).
``--predict`` prints the bounds for a GPU of ``course_lib.kernels.GPUS`` from the counts
alone; ``--small`` shrinks the problems (a quick check of this script).
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from course_lib.backend import gpu_available
from course_lib.kernels import GPUS, FusedElementwise, launch, profile, reference
from course_lib.kernels.gpu import median_ms
from course_lib.kernels.gpus import GPU

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


def model_cases(rng, small: bool) -> dict:
    """Kernel calls small enough to count in the emulator: name -> fn(mode)."""
    n, side, m = (1 << 14, 128, 64) if small else (1 << 20, 1024, 256)
    x = rng.standard_normal(32 * n, dtype=np.float32)
    t = rng.standard_normal((side, side), dtype=np.float32)
    a = rng.standard_normal((m, m), dtype=np.float32)
    cases = {
        f"vector_add n={n}": lambda mode: launch.vector_add(x[:n], x[n : 2 * n], mode=mode),
        f"copy stride 1, n={n}": lambda mode: launch.copy_strided(x[:n], 1, mode=mode),
        f"copy stride 32, n={n}": lambda mode: launch.copy_strided(x, 32, mode=mode),
    }
    for variant in launch.TRANSPOSES:
        cases[f"transpose {variant} {side}^2"] = lambda mode, v=variant: launch.transpose(
            t, variant=v, mode=mode
        )
    for matmul in (launch.matmul_naive, launch.matmul_tiled, launch.matmul_register_tiled):
        cases[f"{matmul.__name__} {m}^3"] = lambda mode, f=matmul: f(a, a, mode=mode)
    for variant in launch.REDUCTIONS:
        cases[f"reduce_sum {variant} n={n}"] = lambda mode, v=variant: launch.reduce_sum(
            x[:n], variant=v, mode=mode
        )
    return cases


def predicted_rows(gpu: GPU, cases: dict) -> list[tuple[str, float, str]]:
    """(kernel, bound in µs, limiting roof) from the emulator's counts."""
    rows = []
    for name, fn in cases.items():
        with profile() as counted:
            fn("emulator")
        rows.append((name, counted.predicted_seconds(gpu) * 1e6, counted.bound(gpu)))
    return rows


def table_gpu(name: str) -> GPU | None:
    """The entry of the GPU table whose name appears in the device's name, if any."""
    return next((gpu for key, gpu in GPUS.items() if key.replace(" ", "") in name.replace(" ", "")),
                None)  # fmt: skip


def print_predictions(gpu: GPU, rows, measured: dict[str, float] | None = None) -> None:
    """The bounds (µs), and the measured times (µs) when there are some."""
    print(f"\nRoofline bounds on {gpu.name} from the emulator's counts (bounds, not measurements)")
    print(
        f"{'kernel':34s} {'bound µs':>10s} {'roof':>10s}"
        + (f" {'measured µs':>12s} {'measured/bound':>15s}" if measured else "")
    )
    for name, bound_us, roof in rows:
        line = f"{name:34s} {bound_us:10.2f} {roof:>10s}"
        if measured:
            line += f" {measured[name]:12.2f} {measured[name] / bound_us:15.1f}"
        print(line)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--predict", choices=list(GPUS), help="bounds only, for this GPU")
    parser.add_argument("--small", action="store_true", help="small problems (a quick check)")
    args = parser.parse_args(argv)
    rng = np.random.default_rng(0)
    if args.predict:
        gpu = GPUS[args.predict]
        print_predictions(gpu, predicted_rows(gpu, model_cases(rng, args.small)))
        return 0
    if not gpu_available():
        print("no NVIDIA GPU with CuPy here: nothing to time. The kernels are still checked by")
        print("NVRTC (sm_80, sm_90) and run in the CPU emulator: pytest tests/test_kernels_*.py")
        print("(bounds without a GPU: benchmarks/gpu.py --predict A100)")
        return 0
    import cupy  # noqa: PLC0415

    name = cupy.cuda.runtime.getDeviceProperties(0)["name"]
    name = name.decode() if isinstance(name, bytes) else name
    print(f"GPU: {name}")
    memory = bandwidth_rows(cupy, rng)
    print_table("Memory-bound kernels (ratio: against the copy)", "GB/s", memory, memory[0][2])
    compute = flop_rows(cupy, rng)
    print_table("Compute-bound kernels (ratio: against cuBLAS)", "TFLOP/s", compute, compute[0][2])
    gpu = table_gpu(name)
    if gpu is None:
        print(f"\n{name} is not in course_lib.kernels.GPUS: no bounds to compare with")
        return 0
    cases = model_cases(rng, args.small)
    measured = {key: 1e3 * median_ms(lambda f=fn: f("gpu")) for key, fn in cases.items()}
    print_predictions(gpu, predicted_rows(gpu, cases), measured)
    return 0


if __name__ == "__main__":
    sys.exit(main())
