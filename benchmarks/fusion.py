"""Fusion and merged QKV, measured: E = D + (A + B) * C and Q, K, V = x @ Wq, x @ Wk, x @ Wv.

Part 1, N = 2**24 float32: the lecture's Program 1 (three NumPy kernels through the
temporaries tmp1, tmp2; every array allocated beforehand, as in the lecture) against Program
2, the kernel ``fuse_elementwise`` generates for the graph, in its two CPU forms: the same
expression as a C++ loop compiled for this CPU (on one thread, like NumPy, and on two: its
blocks split over the pool it shares with BLAS) and the numexpr expression (one blocked pass;
on one thread, and on two: it is limited by its interpreter's work, not by memory, so a free
second core speeds it up). Both write into the preallocated E, like Program 1. Also NumPy
written naturally (it allocates its result) and the Executor with and without the pass, on
one thread like NumPy (a fused node on large float32 arrays runs the compiled loop,
allocating its result). The byte model predicts 9N / 5N = 1.8x.
Part 2: three matmuls against one on the concatenated weights (``merge_matmuls``): the
same FLOPs, x read once, one call instead of three. On a busy 2-core machine each BLAS call
with two threads can wait milliseconds for its second thread, so the per-call saving
dominates; with ``OPENBLAS_NUM_THREADS=1`` the products alone are compared.
Run: ``.venv/bin/python benchmarks/fusion.py``. Target: fused >= 1.5x unfused.
"""

from __future__ import annotations

import argparse

import numexpr
import numpy as np
from threadpoolctl import ThreadpoolController

import course_lib as cl
from course_lib.passes import fold_constants, fuse_elementwise, merge_matmuls
from course_lib.perf import arithmetic_intensity, interleaved_medians


def fusion(n: int, repeats: int) -> None:
    rng = np.random.default_rng(0)
    a, b, c, d = rng.standard_normal((4, n), dtype=np.float32)
    tmp1, tmp2, e = (np.empty_like(a) for _ in range(3))
    nodes = [cl.variable(name, (n,), np.float32) for name in "ABCD"]
    graph = nodes[3] + (nodes[0] + nodes[1]) * nodes[2]
    fused = fuse_elementwise(graph)
    unfused_cost, fused_cost = arithmetic_intensity(graph), arithmetic_intensity(fused)
    feed = dict(zip(nodes, (a, b, c, d)))
    arrays = [feed[x] for x in fused.inputs]
    run_unfused, run_fused = cl.Executor(graph), cl.Executor(fused)

    def program_1():
        np.add(a, b, out=tmp1)
        np.multiply(tmp1, c, out=tmp2)
        np.add(tmp2, d, out=e)

    def numexpr_on(threads: int):
        def run():
            numexpr.set_num_threads(threads)
            fused.op.numexpr.evaluate(arrays, out=e)

        return run

    pools = ThreadpoolController()  # found once: threadpool_limits looks for them each time

    def loop_on(threads: int):
        def run():
            with pools.limit(limits=threads):  # the pool's count: BLAS's (one knob)
                fused.op.run_kernel(np, *arrays, mode="cpu", out=e)

        return run

    threads = numexpr.get_num_threads()
    with pools.limit(limits=1):  # one thread but where a row says two (the Executor's too)
        medians = interleaved_medians(
            {
                "Program 1: NumPy, 3 kernels": program_1,
                "Program 2: C++ loop 1 thread": loop_on(1),
                "Program 2: C++ loop 2 threads": loop_on(2),
                "Program 2: numexpr 1 thread": numexpr_on(1),
                "Program 2: numexpr 2 threads": numexpr_on(2),
                "NumPy d + (a + b) * c": lambda: d + (a + b) * c,
                "Executor, unfused graph": lambda: run_unfused.run(feed),
                "Executor, fused graph": lambda: run_fused.run(feed),
            },
            repeats=repeats,
        )
    numexpr.set_num_threads(threads)
    print(f"E = D + (A + B) * C, N = {n} float32, median of {repeats} interleaved runs")
    print(
        f"  counted from the graphs: {unfused_cost.bytes / 2**20:.0f} MiB vs "
        f"{fused_cost.bytes / 2**20:.0f} MiB moved, AI {unfused_cost.intensity} -> "
        f"{fused_cost.intensity}, byte model {unfused_cost.bytes / fused_cost.bytes:.2f}x"
    )
    for name, seconds in medians.items():
        moved = fused_cost.bytes if "Program 2" in name or "fused" in name else unfused_cost.bytes
        print(f"  {name:28s} {seconds * 1e3:8.2f} ms  {moved / seconds / 1e9:6.1f} GB/s")
    base = medians["Program 1: NumPy, 3 kernels"]
    for name in medians:
        if name.startswith("Program 2"):
            note = "  (target >= 1.5, byte model 1.8)" if "C++ loop 1" in name else ""
            print(f"  ratio Program 1 / {name[11:]:17s} = {base / medians[name]:.2f}{note}")
    print(
        f"  ratio Executor unfused / fused     = "
        f"{medians['Executor, unfused graph'] / medians['Executor, fused graph']:.2f}"
    )


def merged_qkv(tokens: int, dim: int, repeats: int) -> None:
    rng = np.random.default_rng(1)
    x = rng.standard_normal((tokens, dim), dtype=np.float32)
    ws = [rng.standard_normal((dim, dim), dtype=np.float32) for _ in range(3)]
    xv = cl.variable("x", x.shape, np.float32)
    qkv = [xv @ cl.constant(w, name=f"W{k}") for k, w in zip("qkv", ws)]
    merged = fold_constants(merge_matmuls(qkv))  # the weights are concatenated once
    run_three, run_merged = cl.Executor(qkv), cl.Executor(merged)
    w_cat = np.concatenate(ws, axis=1)
    medians = interleaved_medians(
        {
            "three matmuls (NumPy)": lambda: [x @ w for w in ws],
            "one merged matmul (NumPy)": lambda: x @ w_cat,
            "Executor, three matmuls": lambda: run_three.run({xv: x}),
            "Executor, merge_matmuls": lambda: run_merged.run({xv: x}),
        },
        repeats=repeats,
    )
    print(f"Q, K, V = x @ Wq, x @ Wk, x @ Wv; x {tokens}x{dim}, W {dim}x{dim} float32")
    for name, seconds in medians.items():
        print(f"  {name:28s} {seconds * 1e3:8.2f} ms")
    print(
        f"  ratio three / merged (NumPy)    = "
        f"{medians['three matmuls (NumPy)'] / medians['one merged matmul (NumPy)']:.2f}"
    )
    print(
        f"  ratio three / merged (Executor) = "
        f"{medians['Executor, three matmuls'] / medians['Executor, merge_matmuls']:.2f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--log2n", type=int, default=24)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--dim", type=int, default=512)
    args = parser.parse_args()
    fusion(2**args.log2n, args.repeats)
    merged_qkv(args.tokens, args.dim, args.repeats)


if __name__ == "__main__":
    main()
