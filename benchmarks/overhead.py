"""Per-op overhead: course_lib's executor and eager Tensor against PyTorch eager autograd.

The chain ``a = a * 1.0001 + 0.0001`` repeated 10,000 times on a 1-element float64 array,
forward + backward. Run: ``.venv/bin/python benchmarks/overhead.py``.
Targets: static executor <= 1.0x PyTorch, eager Tensor <= 2.0x PyTorch.
"""

from __future__ import annotations

import argparse

import numpy as np

import course_lib as cl
from course_lib.perf import interleaved_medians


def static_chain(n: int):
    a0 = cl.variable("a", shape=(1,), dtype=np.float64)
    a = a0
    for _ in range(n):
        a = a * 1.0001 + 0.0001
    run = cl.Executor([a, cl.grad(a, a0)])  # built once, outside the timed region
    feed = {a0: np.array([1.0])}
    return lambda: run.run(feed)


def eager_chain(n: int):
    def step():
        a0 = cl.Tensor(np.array([1.0]), requires_grad=True)
        a = a0
        for _ in range(n):
            a = a * 1.0001 + 0.0001
        a.backward()
        return a0.grad

    return step


def torch_chain(n: int):
    import torch

    def step():
        a0 = torch.tensor([1.0], dtype=torch.float64, requires_grad=True)
        a = a0
        for _ in range(n):
            a = a * 1.0001 + 0.0001
        a.backward()
        return a0.grad

    return step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--length", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    fns = {"static Executor": static_chain(args.length), "eager Tensor": eager_chain(args.length)}
    try:
        import torch

        torch.set_num_threads(2)
        fns["PyTorch eager"] = torch_chain(args.length)
    except ImportError:
        print("PyTorch is not installed (pip install -e '.[oracle]'); showing course_lib only")
    medians = interleaved_medians(fns, repeats=args.repeats)
    print(f"chain of {args.length} x (mul, add), forward + backward, median of {args.repeats} runs")
    for name, seconds in medians.items():
        print(f"  {name:16s} {seconds * 1e3:8.1f} ms")
    if "PyTorch eager" in medians:
        base = medians["PyTorch eager"]
        print(f"  ratio static/PyTorch = {medians['static Executor'] / base:.2f}  (target <= 1.0)")
        print(f"  ratio eager/PyTorch  = {medians['eager Tensor'] / base:.2f}  (target <= 2.0)")


if __name__ == "__main__":
    main()
