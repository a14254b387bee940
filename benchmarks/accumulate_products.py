"""Sums of products accumulated by BLAS (``passes.accumulate_products``) against the plain sum.

At the tiny LLaMA step's sizes (B16 T128: 2048 rows, dim 256, 4 kv heads of 32, ffn 688):
- the two sums its backward pass builds per layer, products included, each graph run by an
  executor: ``x̄ = q̄·W_q + k̄·W_k + v̄·W_v`` (``sum_n`` of three products) and the gated MLP's
  ``ḡ·W_gate + ū·W_up``;
- the whole training step's executor (forward, backward, AdamW's update nodes) built from the
  same graph with and without the pass, on the same feed.
Interleaved runs, medians; ``ratio`` is accumulated / plain (below 1: the pass is faster).
Run: ``.venv/bin/python benchmarks/accumulate_products.py [--threads N] [--repeats R]``.
"""

from __future__ import annotations

import argparse

import numpy as np
from threadpoolctl import threadpool_limits

import course_lib as cl
from course_lib.kernels import blas
from course_lib.models import Llama, LlamaConfig
from course_lib.models.optim import AdamW
from course_lib.passes import accumulate_products
from course_lib.perf import interleaved_medians
from course_lib.runtime.host_memory import keep_freed_memory


def sums(rows=2048, dim=256, kv=128, ffn=688) -> dict:
    """name -> (plain sum node, accumulated node, feed) for the backward pass's two sums."""
    rng = np.random.default_rng(0)

    def term(name, inner):
        g = cl.variable(f"g_{name}", (rows, inner), np.float32)
        w = cl.variable(f"W_{name}", (inner, dim), np.float32)
        return g @ w, {g: rng.standard_normal(g.shape, dtype=np.float32),
                       w: rng.standard_normal(w.shape, dtype=np.float32)}  # fmt: skip

    cases = {}
    for title, parts in (("x̄ from Q, K, V", (("q", dim), ("k", kv), ("v", kv))),
                         ("x̄ from gate, up", (("gate", ffn), ("up", ffn)))):  # fmt: skip
        products, feed = zip(*(term(n, inner) for n, inner in parts))
        plain = cl.sum_n(*products)
        cases[title] = plain, accumulate_products(plain), {k: v for f in feed for k, v in f.items()}
    return cases


def step(batch=16, seq=128) -> tuple:
    """The tiny LLaMA's training outputs, the same outputs accumulated, and a feed."""
    model = Llama(LlamaConfig.tiny(), seed=0)
    optimizer = AdamW(model.params, lr=1e-4)
    graph, grads = model.loss_graph(batch, seq)
    outputs = [graph.loss, *optimizer.update_nodes(graph.params, grads)]
    tokens = np.random.default_rng(0).integers(0, model.config.vocab_size, (batch, seq))
    feed = model.feed(graph, tokens) | optimizer.feed()
    return outputs, accumulate_products(outputs), feed


def runner(outputs, feed):
    """A function that runs ``outputs`` on ``feed`` (compiled once)."""
    executor = cl.Executor(outputs)
    return lambda: executor.run(feed)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()
    keep_freed_memory()  # as every executor run does: freed arrays reused, no page faults
    print(f"BLAS's β = 1 from NumPy's OpenBLAS: {'yes' if blas.available() else 'no (plain +=)'}")
    with threadpool_limits(args.threads):
        runs, titles = {}, []
        for title, (plain, accumulated, feed) in sums().items():
            for kind, node in (("plain", plain), ("accumulated", accumulated)):
                runs[title, kind] = runner(node, feed)
            np.testing.assert_allclose(runs[title, "accumulated"](), runs[title, "plain"](),
                                       rtol=1e-4, atol=1e-3)  # fmt: skip
            titles.append(title)
        plain, accumulated, feed = step()
        for kind, outputs in (("plain", plain), ("accumulated", accumulated)):
            runs["training step", kind] = runner(outputs, feed)
        titles.append("training step")
        medians = interleaved_medians(runs, repeats=args.repeats)
    print(f"--- {args.threads} thread(s), medians of {args.repeats}, interleaved ---")
    for title in titles:
        p, a = medians[title, "plain"], medians[title, "accumulated"]
        print(f"  {title:17s} plain {p * 1e3:7.2f} ms   accumulated {a * 1e3:7.2f} ms   "
              f"ratio {a / p:.3f}")  # fmt: skip


if __name__ == "__main__":
    main()
