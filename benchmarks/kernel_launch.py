"""Host time per kernel launch: course_lib's launchers against CuPy's own launch paths.

On a GPU: ``launch.<kernel>(..., mode="gpu")`` on small arrays already on the device, next to
the bare ``RawKernel`` call and a CuPy ``ElementwiseKernel`` doing the same addition. Each
figure is host µs per call: ``--calls`` calls queued back to back, one synchronisation at the
end (the kernels are tiny, so the host is the limit), median of ``--repeats`` runs.
Target (issue 21): ≤ 15 µs per launch.

Without a GPU it measures what the host does around a launch, and says so: each launcher in
emulator mode with the kernel replaced by a no-op (argument checks, output allocation,
argument packing, the cached kernel lookup), and what reading the source on every launch
used to add. Run: ``.venv/bin/python benchmarks/kernel_launch.py``.
"""

from __future__ import annotations

import argparse
from unittest import mock

import numpy as np

from course_lib.backend import gpu_available
from course_lib.kernels import launch, sources
from course_lib.perf import interleaved_medians


def per_call(fn, calls: int, finish=lambda: None):
    """A function running ``fn`` ``calls`` times (then ``finish``), for the medians."""

    def run():
        for _ in range(calls):
            fn()
        finish()

    return run


def launcher_cases(xp, mode: str) -> dict:
    """Small calls of the launchers, on arrays of ``xp`` (already where the kernels run)."""
    rng = np.random.default_rng(0)

    def f32(*shape):
        return xp.asarray(rng.standard_normal(shape, dtype=np.float32))

    a, b, x, w, m = f32(1024), f32(1024), f32(8, 128), f32(128), f32(64, 64)
    q, kv = f32(1, 4, 64, 64), f32(1, 2, 64, 64)
    return {
        "launch.vector_add (1,024)": lambda: launch.vector_add(a, b, mode=mode),
        "launch.softmax (8 x 128)": lambda: launch.softmax(x, mode=mode),
        "launch.rms_norm (8 x 128)": lambda: launch.rms_norm(x, w, mode=mode),
        "launch.matmul_register_tiled (64^3)": lambda: launch.matmul_register_tiled(
            m, m, mode=mode
        ),
        "launch.attention (1, 4/2, 64, 64)": lambda: launch.attention(q, kv, kv, mode=mode),
    }


def gpu_rows(calls: int, repeats: int) -> dict[str, float]:
    import cupy  # noqa: PLC0415

    cases = launcher_cases(cupy, "gpu")
    a = cupy.ones(1024, dtype=np.float32)
    c = cupy.empty_like(a)
    raw = launch.get_kernel("vector_add.cu", "vector_add", "gpu")
    add = cupy.ElementwiseKernel("float32 x, float32 y", "float32 z", "z = x + y", "add")
    cases["RawKernel call (vector_add.cu)"] = lambda: raw((4,), (256,), (a, a, c, np.int32(1024)))
    cases["cupy.ElementwiseKernel (x + y)"] = lambda: add(a, a, c)
    sync = cupy.cuda.Device().synchronize
    for fn in cases.values():  # compiled and cached before the timing
        fn()
    sync()
    fns = {name: per_call(fn, calls, sync) for name, fn in cases.items()}
    return interleaved_medians(fns, repeats=repeats)


def host_rows(calls: int, repeats: int) -> dict[str, float]:
    cases = launcher_cases(np, "emulator")
    for fn in cases.values():  # the emulator's libraries are built before the timing
        fn()

    def noop(*args, **kwargs):
        return None

    fns = {name: per_call(fn, calls) for name, fn in cases.items()}
    fns["read_source('softmax.cu'), uncached"] = per_call(
        lambda: sources.read_source.__wrapped__("softmax.cu"), calls
    )
    with mock.patch.object(launch, "_kernel", lambda *key: noop):
        return interleaved_medians(fns, repeats=repeats)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args(argv)
    if gpu_available():
        print("host µs per launch on the GPU (arrays on the device; target <= 15)")
        rows = gpu_rows(args.calls, args.repeats)
    else:
        print("no GPU here: host µs per launch WITHOUT the kernel (launchers in emulator mode")
        print("with a no-op kernel: checks, allocation, argument packing, the cached lookup);")
        print("the last line is what reading the source on every launch used to add")
        rows = host_rows(args.calls, args.repeats)
    for name, seconds in rows.items():
        print(f"  {name:40s} {seconds / args.calls * 1e6:8.2f} µs")


if __name__ == "__main__":
    main()
