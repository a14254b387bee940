"""Every pass keeps results, gradients and tangents on random graphs (hypothesis)."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from op_specs import UNARY_SPECS, on_any_real
from strategies import build_graph, graph_programs

import course_lib as cl
from course_lib import passes

W1 = cl.constant(np.linspace(-1.0, 1.0, 9).reshape(3, 3), name="W1")
W2 = cl.variable("W2", (3, 3), np.float64)
# every one-input elementwise op of the library (on a bounded argument in its domain: the
# inputs are any reals), then composites that exercise the passes
ELEMENTWISE_UNARY = [
    *map(on_any_real, UNARY_SPECS), lambda x: cl.exp(-x * x), lambda x: -x * x,
    lambda x: x * (cl.constant(1.5) * 2.0) + 0.25,          # a constant subexpression to fold
]  # fmt: skip
UNARY = [
    *ELEMENTWISE_UNARY,
    lambda x: x @ W1 - cl.tanh(x @ W2),                     # matmuls sharing their input
    lambda x: cl.softmax(x, -1), lambda x: x - cl.mean(x, -1, keepdims=True),
]  # fmt: skip
BINARY = [
    cl.add, cl.sub, cl.mul, cl.maximum, lambda x, y: x / (1.0 + y * y),
    lambda x, y: cl.where(x > y, x, y * 0.5),
    lambda x, y: (x + y) * cl.tanh(y + x),                  # CSE: y + x is x + y
]  # fmt: skip
PASSES = [
    passes.fold_constants,
    passes.eliminate_common_subexpressions,
    passes.merge_matmuls,
    passes.fuse_elementwise,
    passes.optimize,
]


def _feed(xs, seed):
    rng = np.random.default_rng(seed)
    return {x: rng.standard_normal(x.shape) for x in [*xs, W2]}


def _run(outputs, feed):
    return cl.Executor(outputs).run(feed, allow_unused=True)


def _close(actual, expected):
    for a, e in zip(actual, expected):
        np.testing.assert_allclose(a, e, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("rewrite", PASSES, ids=lambda p: p.__name__)
@given(program=graph_programs, seed=st.integers(0, 2**16))
def test_pass_keeps_values_gradients_and_tangents(rewrite, program, seed):
    xs, out = build_graph(program, UNARY, BINARY)
    wrt = [*xs, W2]
    feed = _feed(xs, seed)
    new = rewrite(out)
    _close([_run(new, feed)], [_run(out, feed)])
    _close(_run(cl.grad(new, wrt), feed), _run(cl.grad(out, wrt), feed))
    tangents = {x: np.full(x.shape, 0.5) for x in xs}
    _close([_run(cl.jvp(new, tangents), feed)], [_run(cl.jvp(out, tangents), feed)])


@given(program=graph_programs, seed=st.integers(0, 2**16))
def test_optimized_backward_graph_is_equal(program, seed):
    xs, out = build_graph(program, UNARY, BINARY)
    grads = cl.grad(out, [*xs, W2])
    feed = _feed(xs, seed)
    _close(
        cl.Executor(grads, optimize=True).run(feed, allow_unused=True),
        cl.Executor(grads).run(feed, allow_unused=True),
    )


@given(program=graph_programs, seed=st.integers(0, 2**16))
def test_float32_graphs_keep_their_dtype(program, seed):
    # the elementwise steps only (the matmuls would read the float64 W2)
    xs, out = build_graph(program, ELEMENTWISE_UNARY, BINARY, dtype=np.float32)
    rng = np.random.default_rng(seed)
    feed = {x: rng.standard_normal(x.shape).astype(np.float32) for x in xs}
    expected = _run(out, feed)
    actual = cl.Executor(out, optimize=True).run(feed, allow_unused=True)
    assert actual.dtype == expected.dtype == np.float32
    np.testing.assert_allclose(actual, expected, rtol=2e-5, atol=1e-6)
