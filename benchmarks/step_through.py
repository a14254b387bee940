"""How long ``StepThrough`` takes to draw every step of a long chain, and where the time goes.

``x`` through ``--ops`` elementwise ops (sin, exp, × 0.5, cos in turn): 2 × ops + 1 steps.
Prints the seconds for ``StepThrough(trace, feed).html()``, each graphviz run (sizes, layout,
drawing) and the size of the HTML. Run: ``.venv/bin/python benchmarks/step_through.py``.
Target: 200 steps in at most 10 s on the 2-core development machine.
"""

from __future__ import annotations

import argparse
import time

from graphviz.backend import execute

import course_lib as cl
from course_lib.viz import StepThrough

OPS = [cl.sin, cl.exp, lambda v: v * 0.5, cl.cos]


def chain_trace(ops: int):
    """The trace of ``gradient(out)`` for the chain, and its variable."""
    x = cl.variable("x", shape=())
    y = x
    for i in range(ops):
        y = OPS[i % len(OPS)](y)
    return cl.gradient_trace(y, [x])[1], x


def timed_graphviz() -> list[float]:
    """Record the seconds of every graphviz run from now on (in the list returned)."""
    runs, run_check = [], execute.run_check

    def timed(*args, **kwargs):
        start = time.perf_counter()
        try:
            return run_check(*args, **kwargs)
        finally:
            runs.append(time.perf_counter() - start)

    execute.run_check = timed
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ops", type=int, default=100, help="ops in the chain (default 100)")
    args = parser.parse_args()
    trace, x = chain_trace(args.ops)
    runs = timed_graphviz()
    start = time.perf_counter()
    page = StepThrough(trace, feed={x: 0.3}).html()
    seconds = time.perf_counter() - start
    graphviz = ", ".join(f"{s:.2f}" for s in runs)
    print(f"{len(trace.steps)} steps: {seconds:.2f} s (graphviz runs: {graphviz} s), "
          f"HTML {len(page) / 1e6:.1f} MB")  # fmt: skip


if __name__ == "__main__":
    main()
