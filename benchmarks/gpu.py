"""GPU kernels side by side: achieved GB/s against a device-to-device copy, TFLOP/s against
``cupy.matmul`` (cuBLAS, FP32), and each kernel's measured time next to the roofline bound
the emulator's counts predict for this GPU.

Honest timing: every input is on the device before the clock starts, CUDA events enclose
only back-to-back launches (``gpu.median_ms(..., calls=)``), and every problem is large
enough that each kernel runs for at least 20 µs (so the ~10 µs of host time per launch
hides behind the previous kernel). Medians.

    .venv/bin/python benchmarks/gpu.py                           # needs a GPU (and CuPy)
    .venv/bin/python benchmarks/gpu.py --predict A100 [--small]  # bounds only, no GPU needed

The bound of each timed problem comes from counting a smaller one in the emulator: the timed
problem has ``scale`` times more blocks, each doing what a counted block does, so its counts
are the counted ones times ``scale`` (``Profile.scaled``). With Nsight Compute's ``ncu`` on
the PATH, the counted problems also run under ``ncu`` and the emulator's counters are printed
beside the hardware's. Without a GPU it says so and exits 0: the kernels are still verified
by NVRTC compilation and the CPU emulator (tests/test_kernels_*.py).
"""

from __future__ import annotations

import argparse
import csv
import io
import shutil
import subprocess
import sys

import numpy as np

from course_lib.backend import gpu_available
from course_lib.kernels import GPUS, FusedElementwise, launch, profile, reference
from course_lib.kernels.dispatch import Launcher
from course_lib.kernels.gpu import median_ms
from course_lib.kernels.gpus import GPU

LECTURE = FusedElementwise("fused_lecture", ("a", "b", "c", "d"), (("e", "d + (a + b) * c"),))
MIN_MS = 0.020  # every timed kernel should run at least this long
#: ncu's metric for each emulator counter compared (global loads and stores, shared banks).
NCU_METRICS = {
    "global_load_requests": "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum",
    "load_sectors": "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum",
    "store_sectors": "l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum",
    "bank_conflicts": "l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum",
}


def _cupy():
    import cupy  # noqa: PLC0415

    return cupy


def bandwidth_cases(xp, rng) -> dict:
    """name -> (call, bytes moved) for the memory-bound kernels (each array read or written
    once: the least any kernel can move)."""
    n = 1 << 26
    a, b, c, d = (xp.asarray(rng.standard_normal(n, dtype=np.float32)) for _ in range(4))
    x = xp.asarray(rng.standard_normal((8192, 4096), dtype=np.float32))
    w = xp.asarray(rng.standard_normal(4096, dtype=np.float32))
    g = xp.asarray(rng.standard_normal((8192, 4096), dtype=np.float32))
    scores = x.reshape(8, 4, 1024, 1024)  # a causal softmax's (B, H, T, T) scores
    r = xp.asarray(rng.standard_normal((8, 32, 1024, 128), dtype=np.float32))
    cos, sin = (xp.asarray(t) for t in reference.rope_tables(1024, 128))
    out, k = xp.empty_like(a), Launcher("gpu")
    return {
        "device-to-device copy": (lambda: out.__setitem__(Ellipsis, a), 2 * a.nbytes),
        "vector_add": (lambda: k.vector_add(a, b), 3 * a.nbytes),
        "vector_add_float4": (lambda: k.vector_add_float4(a, b), 3 * a.nbytes),
        "fused d + (a + b) * c": (lambda: k.fused(LECTURE, a, b, c, d), 5 * a.nbytes),
        "softmax (8192 x 4096)": (lambda: k.softmax(x), 2 * x.nbytes),
        "causal_softmax (8, 4, 1024, 1024)": (lambda: k.causal_softmax(scores, 0.125),
                                               2 * x.nbytes),
        "softmax_grad (8192 x 4096)": (lambda: k.softmax_grad(g, x), 3 * x.nbytes),
        "rms_norm (8192 x 4096)": (lambda: k.rms_norm(x, w), 2 * x.nbytes),
        "rms_norm_grad_x (8192 x 4096)": (lambda: k.rms_norm_grad_x(g, x, w), 3 * x.nbytes),
        "rms_norm_grad_w (8192 x 4096)": (lambda: k.rms_norm_grad_w(g, x), 3 * x.nbytes),
        "rope (8, 32, 1024, 128)": (lambda: k.rope(r, cos, sin), 2 * r.nbytes),
    }


def flop_cases(xp, rng) -> dict:
    """name -> (call, flops) for the matmuls (2048³) and causal GQA attention (T = 1024)."""
    size = 2048
    a, b = (xp.asarray(rng.standard_normal((size, size), dtype=np.float32)) for _ in range(2))
    q = xp.asarray(rng.standard_normal((4, 32, 1024, 64), dtype=np.float32))
    kv = xp.asarray(rng.standard_normal((4, 8, 1024, 64), dtype=np.float32))
    matmul_flops = 2 * size**3
    attention_flops = 4 * 4 * 32 * (1024 * 1025 // 2) * 64  # QK^T and PV over causal pairs
    k = Launcher("gpu")
    return {
        "cupy.matmul (cuBLAS) 2048^3": (lambda: xp.matmul(a, b), matmul_flops),
        "matmul_naive 2048^3": (lambda: k.matmul_naive(a, b), matmul_flops),
        "matmul_tiled 2048^3": (lambda: k.matmul_tiled(a, b), matmul_flops),
        "matmul_register_tiled 2048^3": (lambda: k.matmul_register_tiled(a, b), matmul_flops),
        "attention causal GQA 32/8 heads, T=1024": (
            lambda: k.attention(q, kv, kv, True),
            attention_flops,
        ),
    }


def model_cases(mode: str, rng, small: bool = False) -> dict:
    """name -> (fn(scale), timing scale): a kernel call whose grid grows ``scale`` times
    (every block alike), counted at scale 1 in the emulator and timed at the given scale on
    the GPU (``mode`` picks the arrays' device and the launcher's mode)."""
    n, side, m, t = (1 << 14, 128, 64, 64) if small else (1 << 20, 1024, 256, 256)
    room = 1 if mode == "emulator" else 32  # the largest scale the arrays must allow
    xp, k = np if mode == "emulator" else _cupy(), Launcher(mode)

    def f32(*shape):
        return xp.asarray(rng.standard_normal(shape, dtype=np.float32))

    x = f32(32 * n * min(room, 8))  # the largest use: stride-32 copy at scale 8
    tiles, rows, w = f32(side * min(room, 8), side), f32(side * room, side), f32(side)
    a, q, kv = f32(m * room, m), f32(min(room, 16), 8, t, 64), f32(min(room, 16), 2, t, 64)
    cases = {
        f"vector_add n={n}": (lambda s: k.vector_add(x[: n * s], x[n * s : 2 * n * s]), 8),
        f"copy stride 1, n={n}": (lambda s: k.copy_strided(x[: n * s], 1), 8),
        f"copy stride 32, n={n}": (lambda s: k.copy_strided(x[: 32 * n * s], 32), 8),
    }
    for variant in launch.TRANSPOSES:  # (side * s, side): s times the rows of tiles
        cases[f"transpose {variant} {side}^2"] = (
            lambda s, v=variant: k.transpose(tiles[: side * s], variant=v), 8
        )
    for name in ("matmul_naive", "matmul_tiled", "matmul_register_tiled"):
        cases[f"{name} {m}^3"] = (lambda s, f=name: getattr(k, f)(a[: m * s], a[:m]), 32)
    for variant in launch.REDUCTIONS:  # 1024 blocks either way; the 2nd launch adds < 0.1 %
        cases[f"reduce_sum {variant} n={n}"] = (
            lambda s, v=variant: k.reduce_sum(x[: n * s], variant=v), 16
        )
    cases[f"softmax {side}^2"] = (lambda s: k.softmax(rows[: side * s]), 32)
    cases[f"rms_norm {side}^2"] = (lambda s: k.rms_norm(rows[: side * s], w), 32)
    cases[f"attention causal 8/2 heads T={t}"] = (
        lambda s: k.attention(q[:s], kv[:s], kv[:s]), 16
    )
    return cases


def counted(cases: dict) -> dict:
    """name -> the emulator's Profile of each case at scale 1."""
    profiles = {}
    for name, (fn, _) in cases.items():
        with profile() as p:
            fn(1)
        profiles[name] = p
    return profiles


def timed_ms(cases: dict) -> dict[str, tuple[float, int]]:
    """name -> (median ms per call, scale), enough calls per event pair for 2 ms of work."""
    results = {}
    for name, (fn, scale) in cases.items():
        once = median_ms(lambda f=fn, s=scale: f(s), repeats=3, warmup=1)
        calls = max(1, int(2.0 / once))
        results[name] = (median_ms(lambda f=fn, s=scale: f(s), repeats=7, calls=calls), scale)
    return results


def print_rates(title: str, unit: str, cases: dict, scale: float) -> None:
    """Time each (call, work) and print ms, rate and the ratio to the first row."""
    print(f"\n{title}")
    print(f"{'kernel':42s} {'ms':>9s} {unit:>9s} {'ratio':>7s}")
    baseline = None
    for name, (fn, work) in cases.items():
        ms = median_ms(fn, repeats=7, calls=max(1, int(2.0 / median_ms(fn, repeats=3))))
        rate = work / ms / scale
        baseline = baseline or rate
        short = "  (< 20 µs!)" if ms < MIN_MS else ""
        print(f"{name:42s} {ms:9.3f} {rate:9.2f} {rate / baseline:7.2f}{short}")


def print_bounds(gpu: GPU, profiles: dict, measured: dict | None = None) -> None:
    """Each case's bound on ``gpu`` (µs, limiting roof), and measured/bound when timed."""
    print(f"\nRoofline bounds on {gpu.name} from the emulator's counts (bounds, not measurements)")
    head = f"{'kernel':36s} {'scale':>5s} {'bound µs':>10s} {'roof':>10s}"
    print(head + (f" {'measured µs':>12s} {'measured/bound':>15s}" if measured else ""))
    for name, p in profiles.items():
        ms, scale = measured[name] if measured else (None, 1)
        big = p.scaled(scale)
        bound_us = big.predicted_seconds(gpu) * 1e6
        line = f"{name:36s} {scale:5d} {bound_us:10.2f} {big.bound(gpu):>10s}"
        if measured:
            line += f" {ms * 1e3:12.2f} {ms * 1e3 / bound_us:15.2f}"
        print(line)


def ncu_counters(small: bool = False) -> list[dict[str, float]]:
    """Per launch, in order: the hardware's counters of the model cases (run under ncu, at the
    sizes the emulator counted: ``small`` or not)."""
    command = ["ncu", "--csv", "--metrics", ",".join(NCU_METRICS.values()), sys.executable,
               __file__, "--ncu-child", *(["--small"] if small else [])]  # fmt: skip
    try:
        out = subprocess.run(command, capture_output=True, text=True, timeout=240, check=False)
    except subprocess.TimeoutExpired:
        print("\nncu took over 240 s: no hardware counters to compare")
        return []
    if out.returncode:
        print(f"\nncu failed (exit {out.returncode}): {out.stderr.strip()[-300:]}")
        return []
    out = out.stdout
    lines = out[out.index('"ID"'):] if '"ID"' in out else ""
    launches: dict[str, dict[str, float]] = {}
    for row in csv.DictReader(io.StringIO(lines)):
        if row["Kernel Name"].split("(")[0] in KERNEL_NAMES:
            value = float(row["Metric Value"].replace(",", ""))
            launches.setdefault(row["ID"], {})[row["Metric Name"]] = value
    return list(launches.values())


KERNEL_NAMES = {"vector_add", "copy_strided", "transpose_naive", "transpose_shared",
                "transpose_padded", "matmul_naive", "matmul_tiled", "matmul_register_tiled",
                "reduce_sum_tree", "reduce_sum_shuffle", "softmax_rows", "rms_norm_rows",
                "attention"}  # fmt: skip


def print_ncu(profiles: dict, small: bool = False) -> None:
    """The emulator's counters beside Nsight Compute's, launch by launch (``small``: the
    problems of ``--small``, as counted)."""
    hardware = ncu_counters(small)
    if not hardware:
        return
    ours = [(name, launch) for name, p in profiles.items() for launch in p.launches]
    if len(hardware) != len(ours):
        print(f"\nncu reported {len(hardware)} launches, the emulator counted {len(ours)}: "
              "not compared")  # fmt: skip
        return
    print("\nEmulator counts / Nsight Compute (ncu) counts, per launch")
    print(f"{'kernel':36s}" + "".join(f" {c:>24s}" for c in NCU_METRICS))
    for (name, launch_), metrics in zip(ours, hardware, strict=True):
        cells = [f"{launch_.counters[c]:,} / {metrics.get(m, float('nan')):,.0f}"
                 for c, m in NCU_METRICS.items()]  # fmt: skip
        print(f"{name:36s}" + "".join(f" {cell:>24s}" for cell in cells))


def table_gpu(name: str) -> GPU | None:
    """The entry of the GPU table whose name appears in the device's name, if any."""
    return next((gpu for key, gpu in GPUS.items() if key.replace(" ", "") in name.replace(" ", "")),
                None)  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--predict", choices=list(GPUS), help="bounds only, for this GPU")
    parser.add_argument("--small", action="store_true", help="small problems (a quick check)")
    parser.add_argument("--ncu-child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    rng = np.random.default_rng(0)
    if args.predict:
        print_bounds(GPUS[args.predict], counted(model_cases("emulator", rng, args.small)))
        return 0
    if not gpu_available():
        print("no NVIDIA GPU with CuPy here: nothing to time. The kernels are still checked by")
        print("NVRTC (sm_80, sm_90) and run in the CPU emulator: pytest tests/test_kernels_*.py")
        print("(bounds without a GPU: benchmarks/gpu.py --predict A100)")
        return 0
    cupy = _cupy()
    if args.ncu_child:  # the counted problems once each, under ncu
        for fn, _ in model_cases("gpu", rng, args.small).values():
            fn(1)
        cupy.cuda.Device().synchronize()
        return 0
    name = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.runtime.getDevice())["name"]
    name = name.decode() if isinstance(name, bytes) else name
    print(f"GPU: {name}; inputs on the device, CUDA events around the kernels only")
    print_rates("Memory-bound kernels (ratio: against the copy)", "GB/s",
                bandwidth_cases(cupy, rng), 1e6)  # fmt: skip
    print_rates("Compute-bound kernels (ratio: against cuBLAS FP32)", "TFLOP/s",
                flop_cases(cupy, rng), 1e9)  # fmt: skip
    gpu = table_gpu(name)
    if gpu is None:
        print(f"\n{name} is not in course_lib.kernels.GPUS: no bounds to compare with")
        return 0
    profiles = counted(model_cases("emulator", rng, args.small))
    print_bounds(gpu, profiles, timed_ms(model_cases("gpu", rng, args.small)))
    if shutil.which("ncu"):
        print_ncu(profiles, args.small)
    else:
        print("\n(ncu is not on the PATH: no hardware counters to compare)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
