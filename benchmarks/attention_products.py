"""The attention's products on the CPU: the kernels' in-place products (each head's product on
one thread, the (batch, kv group) pairs over the shared pool; ``cpu_kernels.head_products``)
against the array module's path (heads copied into grouped layouts, one batched ``np.matmul``,
copied back), for the tiny LLaMA step's shapes: B16, T128, 8 heads, 4 kv heads, d32.

Each op's ``compute`` timed as the executor calls it, interleaved, medians; at 1 thread and at
``--threads`` (all cores by default). What to look for: the kernels' time falls with threads
(64 independent (batch, group) pairs), while a head's product is too small for BLAS to give
it more than two threads.
Run: ``.venv/bin/python benchmarks/attention_products.py [--threads N] [--repeats R]``.
"""

from __future__ import annotations

import argparse
import os
from unittest import mock

import numpy as np
from threadpoolctl import threadpool_limits

from course_lib.kernels import cpu_kernels
from course_lib.ops.attention import HeadMix, HeadMixT, HeadScores
from course_lib.perf import interleaved_medians


def cases(batch=16, seq=128, heads=8, kv=4, d=32) -> dict:
    rng = np.random.default_rng(0)
    a = rng.standard_normal((batch, seq, heads, d), dtype=np.float32)
    k = rng.standard_normal((batch, seq, kv, d), dtype=np.float32)
    p = rng.standard_normal((batch, heads, seq, seq), dtype=np.float32)
    return {
        "scores a·kᵀ": (HeadScores(), (a, k)),
        "mix p·v": (HeadMix(), (p, k)),
        "mix_t Σ pᵀ·a": (HeadMixT(), (p, a, k)),
    }


def grouped(op, args):
    """The op's array-module path (what runs without the kernels)."""

    def run():
        with mock.patch.object(cpu_kernels, "products_worth_it", lambda *a: False):
            return op.compute(np, *args)

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--repeats", type=int, default=25)
    args = parser.parse_args()
    if not cpu_kernels.products_worth_it(np.zeros(cpu_kernels.MIN_SIZE, np.float32)):
        print("no CPU kernels here (no C++ compiler): nothing to compare")
        return
    print(f"attention products, tiny step's shapes; {cpu_kernels.threads_described()}")
    for threads in sorted({1, args.threads}):
        with threadpool_limits(threads):
            runs = {}
            for name, (op, inputs) in cases().items():
                runs[name, "kernels"] = lambda op=op, inputs=inputs: op.compute(np, *inputs)
                runs[name, "grouped"] = grouped(op, inputs)
                result = runs[name, "grouped"]()  # the kernels' numbers, up to rounding
                np.testing.assert_allclose(
                    runs[name, "kernels"](),
                    result,
                    rtol=0,
                    atol=1e-5 * np.abs(result).max(),
                    err_msg=name,
                )
            medians = interleaved_medians(runs, repeats=args.repeats)
        print(f"--- {threads} thread{'s' if threads > 1 else ''}, medians of {args.repeats} ---")
        for name in cases():
            kernels, matmul = medians[name, "kernels"], medians[name, "grouped"]
            print(f"  {name:14s} kernels {kernels * 1e3:6.2f} ms   grouped matmul "
                  f"{matmul * 1e3:6.2f} ms   ratio {kernels / matmul:.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
