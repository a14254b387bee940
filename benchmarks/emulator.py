"""How fast the CPU emulator runs the kernels, and what counting memory traffic costs
(medians; every library is built before timing).

    .venv/bin/python benchmarks/emulator.py

The emulator is for checking results and counting accesses, not for speed: these numbers say
how long the tests and notebook 07 wait, nothing about a GPU. matmul_naive has no barrier
(threads run one after another); matmul_tiled has two per tile (every CUDA thread is a fiber).

Counting off runs the plain build, which has no counting code compiled in (its launches are
the same machine code as before counting existed); counting on (inside ``kernels.profile()``)
runs a second build in which every load and store calls a hook.
"""

from __future__ import annotations

import numpy as np

from course_lib.kernels import launch, profile
from course_lib.perf import median_seconds


def counted(fn):
    """``fn`` run inside ``profile()``: the counting build."""

    def run():
        with profile():
            fn()

    return run


def main() -> None:
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((257, 257), dtype=np.float32) for _ in range(2))
    q, k, v = (rng.standard_normal((1, 8, 257, 64), dtype=np.float32) for _ in range(3))
    cases = {
        "matmul_naive 257^3 (no barriers)": lambda: launch.matmul_naive(a, b, mode="emulator"),
        "matmul_tiled 257^3 (fibers)": lambda: launch.matmul_tiled(a, b, mode="emulator"),
        "softmax 257 x 257 (fibers)": lambda: launch.softmax(a, mode="emulator"),
        "attention 8 heads, T=257, D=64": lambda: launch.attention(q, k, v, mode="emulator"),
        "numpy a @ b (for scale)": lambda: a @ b,
    }
    for name, fn in cases.items():
        print(f"{name:34s} {median_seconds(fn, repeats=5) * 1e3:9.1f} ms")

    m = rng.standard_normal((128, 128), dtype=np.float32)
    x = rng.standard_normal(1 << 18, dtype=np.float32)
    counting = {
        "vector_add 2^18": lambda: launch.vector_add(x, x, mode="emulator"),
        "matmul_naive 128^3": lambda: launch.matmul_naive(m, m, mode="emulator"),
        "matmul_tiled 128^3": lambda: launch.matmul_tiled(m, m, mode="emulator"),
        "matmul_register_tiled 128^3": lambda: launch.matmul_register_tiled(m, m, mode="emulator"),
        "transpose padded 512 x 512": lambda: launch.transpose(
            x.reshape(512, 512), variant="padded", mode="emulator"
        ),
        "reduce_sum shuffle 2^18": lambda: launch.reduce_sum(x, mode="emulator"),
    }
    print(f"\n{'counting memory traffic':34s} {'off ms':>9s} {'on ms':>9s} {'on/off':>7s}")
    for name, fn in counting.items():
        counted(fn)()  # builds the counting library before anything is timed
        off = median_seconds(fn, repeats=5)
        on = median_seconds(counted(fn), repeats=5)
        print(f"{name:34s} {off * 1e3:9.1f} {on * 1e3:9.1f} {on / off:7.1f}")


if __name__ == "__main__":
    main()
