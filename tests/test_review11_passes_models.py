"""Review 11: the graph optimisation passes on the graphs the course optimises (the LLaMA's
training step, attention with RoPE and GQA), and the passes' own input checks."""

import numpy as np
import pytest

import course_lib as cl
from course_lib import passes
from course_lib.errors import GraphError
from course_lib.graph import topological_order
from course_lib.models import AdamW, Llama, LlamaConfig
from course_lib.passes import matmuls
from course_lib.runtime.executor import Executor

TINY = LlamaConfig(dim=16, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=24, vocab_size=11,
                   max_seq_len=8)  # fmt: skip
NAME = "model.embed_tokens.weight"


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_optimized_llama_training_graph_matches_and_leaves_the_graph_alone(dtype):
    model = Llama(TINY, seed=1, dtype=dtype)
    graph, grads = model.loss_graph(2, 6)
    optimizer = AdamW(model.params)
    outs = [graph.loss, graph.logits, graph.logits, *optimizer.update_nodes(graph.params, grads)]
    before = {n: n.inputs for n in topological_order(outs)}
    feed = model.feed(graph, np.random.default_rng(0).integers(0, 11, (2, 6)))
    feed.update(optimizer.feed())
    optimized = passes.optimize(outs)
    plain, fast = Executor(outs).run(feed), Executor(optimized).run(feed)
    assert {n: n.inputs for n in topological_order(outs)} == before  # the input graph untouched
    assert passes.optimize(optimized) == optimized  # idempotent: the very same nodes
    tol = 1e-5 if dtype == np.float32 else 1e-13  # fused silu_grad: numexpr's exp, not NumPy's
    for want, got in zip(plain, fast):
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol * np.max(np.abs(want)))
    fast[1][...] = 0.0  # the logits asked twice: two arrays, and the feed is not changed
    assert np.array_equal(fast[2], plain[2]) and np.array_equal(feed[graph.params[NAME]],
                                                               model.params[NAME])  # fmt: skip


def _chain_of_products(n: int):
    """n products x @ w_k sharing x, where w_k = 1.5 · w_{k-1}: each other operand has k
    ancestors."""
    x = cl.variable("x", (2, 3), np.float64)
    w = cl.variable("w", (3, 3), np.float64)
    products = []
    for _ in range(n):
        w = w * 1.5
        products.append(x @ w)
    return x, products


def test_merge_matmuls_checks_the_operands_in_one_pass(monkeypatch):
    # each operand's ancestors were listed again for every product: quadratic in the graph
    visited = []
    listing = matmuls.topological_order
    monkeypatch.setattr(matmuls, "topological_order",
                        lambda outs: visited.append(len(o := listing(outs))) or o)  # fmt: skip
    x, products = _chain_of_products(300)
    merged = passes.merge_matmuls(products)
    size = len(topological_order(products))
    assert sum(visited) <= 2 * size, (sum(visited), size)
    feed = {x: np.arange(6.0).reshape(2, 3), "w": np.eye(3)}  # (by name: the first node may be
    # a cached constant 1.5 made earlier, in another test)
    for got, want in zip(Executor(merged).run(feed), Executor(products).run(feed)):
        np.testing.assert_allclose(got, want, rtol=1e-12)


def test_merge_matmuls_still_refuses_an_operand_computed_from_a_merged_product():
    x = cl.variable("x", (3, 3), np.float64)
    a, b = cl.variable("a", (3, 3), np.float64), cl.variable("b", (3, 3), np.float64)
    first = x @ a
    outs = [first, x @ b, x @ (first * 2.0)]
    merged = passes.merge_matmuls(outs)
    feed = {x: np.eye(3) + 1.0, a: np.arange(9.0).reshape(3, 3), b: np.ones((3, 3))}
    for got, want in zip(Executor(merged).run(feed), Executor(outs).run(feed)):
        np.testing.assert_allclose(got, want, rtol=1e-12)


def test_merge_matmuls_promises_values_only_to_rounding():
    # one GEMM of the concatenated weights is blocked differently from three: the last bits
    # of some elements differ (8 x 64 by 64 x 1 and 64 x 64 in OpenBLAS), as matmul_sum says
    assert "rounding" in passes.merge_matmuls.__doc__


@pytest.mark.parametrize("wrong", [passes.fuse_elementwise, [None], "cse", 3])
def test_optimize_names_passes_that_are_not_functions(wrong):
    x = cl.variable("x", (2, 3), np.float64)
    with pytest.raises(GraphError, match="optimize: passes must be a sequence of functions"):
        passes.optimize(cl.exp(x) * 2.0, passes=wrong)


def test_optimize_takes_any_iterable_of_passes():
    x = cl.variable("x", (2, 3), np.float64)
    y = cl.exp(x) * 2.0
    assert passes.optimize(y, passes=[]) is y
    fused = passes.optimize(y, passes=(p for p in passes.PIPELINE))
    assert isinstance(fused.op, passes.Fused)


def test_find_regions_and_select_are_checked():
    x = cl.variable("x")  # a shapeless node was iterated (x[0], x[1], ...) as if a list
    y = cl.exp(x) * 2.0
    assert list(passes.find_regions(y)) == [y]
    with pytest.raises(GraphError, match="find_regions: expected graph nodes"):
        passes.find_regions([y, 3])
    with pytest.raises(GraphError, match="fuse_elementwise: select must be a function"):
        passes.fuse_elementwise(y, select=True)
