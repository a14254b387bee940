"""Fusion and merged QKV, measured: E = D + (A + B) * C and Q, K, V = x @ Wq, x @ Wk, x @ Wv.

Part 1, N = 2**24 float32 elements: unfused NumPy (three kernels through temporaries, as
Program 1 of the lecture) against the fused numexpr expression (one blocked pass: Program
2), side by side, medians. The byte model predicts 9N / 5N = 1.8x. numexpr runs with one
thread, like NumPy, so the ratio measures fusion, not threads; the all-threads figure is
printed too. Part 2: three matmuls against one on concatenated weights.
Run: ``.venv/bin/python benchmarks/fusion.py``. Target: fused >= 1.5x unfused.
"""

from __future__ import annotations

import argparse

import numexpr
import numpy as np
from _timing import interleaved_medians

import course_lib as cl
from course_lib.passes import fuse_elementwise, merge_matmuls
from course_lib.perf import arithmetic_intensity


def fusion(n: int, repeats: int) -> None:
    rng = np.random.default_rng(0)
    a, b, c, d = rng.standard_normal((4, n), dtype=np.float32)
    tmp1, tmp2, e = (np.empty_like(a) for _ in range(3))
    names = "ABCD"
    nodes = [cl.variable(name, (n,), np.float32) for name in names]
    graph = nodes[3] + (nodes[0] + nodes[1]) * nodes[2]
    fused_graph = fuse_elementwise(graph)
    unfused, fused = arithmetic_intensity(graph), arithmetic_intensity(fused_graph)
    feed = dict(zip(names, (a, b, c, d)))
    run_unfused, run_fused = cl.Executor(graph), cl.Executor(fused_graph)
    threads = numexpr.detect_number_of_cores()

    def program_1():  # three kernels through preallocated temporaries
        np.add(a, b, out=tmp1)
        np.multiply(tmp1, c, out=tmp2)
        np.add(tmp2, d, out=e)

    arrays = {"a": a, "b": b, "c": c, "d": d}

    def threads_then(k, fn):
        def run():
            numexpr.set_num_threads(k)
            return fn()

        return run

    def program_2():  # one fused kernel
        numexpr.evaluate("d + (a + b) * c", local_dict=arrays, out=e)

    medians = interleaved_medians(
        {
            "NumPy d + (a + b) * c": lambda: d + (a + b) * c,
            "NumPy, out= buffers": program_1,
            "numexpr fused, 1 thread": threads_then(1, program_2),
            f"numexpr fused, {threads} threads": threads_then(threads, program_2),
            "Executor, unfused graph": lambda: run_unfused.run(feed),
            "Executor, fuse_elementwise": threads_then(1, lambda: run_fused.run(feed)),
        },
        repeats=repeats,
    )
    numexpr.set_num_threads(threads)
    print(f"E = D + (A + B) * C, N = {n} float32, median of {repeats} interleaved runs")
    print(
        f"  byte model: {unfused.bytes / 2**20:.0f} MiB vs {fused.bytes / 2**20:.0f} MiB moved, "
        f"AI {unfused.intensity} -> {fused.intensity}, predicted {unfused.bytes / fused.bytes:.2f}x"
    )
    for name, seconds in medians.items():
        gbs = unfused.bytes / seconds / 1e9 if "fused" not in name else fused.bytes / seconds / 1e9
        print(f"  {name:28s} {seconds * 1e3:8.2f} ms  {gbs:6.1f} GB/s")
    base = medians["NumPy d + (a + b) * c"]
    print(
        f"  ratio NumPy / fused (1 thread)      = {base / medians['numexpr fused, 1 thread']:.2f}"
        "  (target >= 1.5, byte model 1.8)"
    )
    print(
        f"  ratio NumPy out= / fused (1 thread) = "
        f"{medians['NumPy, out= buffers'] / medians['numexpr fused, 1 thread']:.2f}"
    )
    print(
        f"  ratio NumPy / fused ({threads} threads)     = "
        f"{base / medians[f'numexpr fused, {threads} threads']:.2f}"
    )
    print(
        f"  ratio Executor unfused / fused      = "
        f"{medians['Executor, unfused graph'] / medians['Executor, fuse_elementwise']:.2f}"
    )


def merged_qkv(tokens: int, dim: int, repeats: int) -> None:
    rng = np.random.default_rng(1)
    x = rng.standard_normal((tokens, dim), dtype=np.float32)
    ws = [rng.standard_normal((dim, dim), dtype=np.float32) for _ in range(3)]
    xv = cl.variable("x", x.shape, np.float32)
    qkv = [xv @ cl.constant(w, name=f"W{k}") for k, w in zip("qkv", ws)]
    merged = cl.passes.fold_constants(merge_matmuls(qkv))  # the weights concatenated once
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
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--dim", type=int, default=1024)
    args = parser.parse_args()
    fusion(2**args.log2n, args.repeats)
    merged_qkv(args.tokens, args.dim, args.repeats)


if __name__ == "__main__":
    main()
