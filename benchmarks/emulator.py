"""How fast the CPU emulator runs the kernels (medians; the library is built before timing).

    .venv/bin/python benchmarks/emulator.py

The emulator is for checking results, not for speed: these numbers say how long the tests
and notebook 07 wait, nothing about a GPU. matmul_naive has no barrier (threads run one
after another); matmul_tiled has two per tile (every CUDA thread is a fiber).
"""

from __future__ import annotations

import numpy as np

from course_lib.kernels import launch
from course_lib.perf import median_seconds


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


if __name__ == "__main__":
    main()
