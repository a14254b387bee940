"""Each pass on small graphs: what it rewrites, what it leaves, and its errors."""

import warnings

import numpy as np
import pytest

import course_lib as cl
from course_lib import passes
from course_lib.errors import GraphError
from course_lib.graph import apply, topological_order
from course_lib.ops.linalg import MatMul
from course_lib.passes import Fused
from course_lib.viz import draw_graph


def lecture_graph(n=8, dtype=np.float32):
    a, b, c, d = (cl.variable(name, (n,), dtype) for name in "ABCD")
    return (a, b, c, d), d + (a + b) * c


def ops_of(outputs):
    return [n for n in topological_order(outputs if isinstance(outputs, list) else [outputs])
            if n.inputs]  # fmt: skip


def feed_for(nodes, seed=0, dtype=np.float32):
    rng = np.random.default_rng(seed)
    return {v: rng.standard_normal(v.shape).astype(dtype) for v in nodes}


# -- fusion -------------------------------------------------------------------------------
def test_fusion_turns_the_lecture_program_into_one_kernel():
    xs, e = lecture_graph()
    fused = passes.fuse_elementwise(e)
    assert len(ops_of(e)) == 3 and len(ops_of(fused)) == 1
    assert isinstance(fused.op, Fused) and fused.inputs == xs and fused.name == e.name
    assert fused.op.formula(["A", "B", "C", "D"]) == "D + (A + B) * C"
    assert [m.op.name for m in fused.op.members()] == ["add", "mul", "add"]
    feed = feed_for(xs)
    np.testing.assert_array_equal(cl.evaluate(fused, feed), cl.evaluate(e, feed))
    assert ops_of(e)[0].op.name == "add"  # the original graph is untouched


def test_fusion_keeps_values_used_elsewhere_and_outputs():
    x, y = cl.variable("x", (4,)), cl.variable("y", (4,))
    t = cl.tanh(x + y)
    u = t * 2.0 - 1.0
    out = [cl.sum(u) + cl.exp(t), t]  # t is an output and has two users
    new = passes.fuse_elementwise(out)
    fused = [n for n in ops_of(new) if isinstance(n.op, Fused)]
    # t = tanh(x + y) stays a value of its own (an output with two users); t * 2 - 1 and
    # sum(...) + exp(t) are the other two kernels; the sum is no elementwise op
    assert [f.op.formula(["x", "y"]) for f in fused][0] == "tanh(x + y)" and new[1] is fused[0]
    assert [len(f.op.members()) for f in fused] == [2, 2, 2]
    assert len(ops_of(new)) == 4


def test_silu_does_not_absorb_an_input_it_reads_twice():
    x, y = cl.variable("x", (4,)), cl.variable("y", (4,))
    fused = passes.fuse_elementwise(cl.silu(x + y) * y)
    assert [n.op.name for n in ops_of(fused)] == ["add", "fused"]
    assert fused.op.numexpr.text.count("x0") == 2  # silu reads its input twice


def test_fusion_splits_regions_at_the_input_limit():
    xs = [cl.variable(f"x{k}", (3,)) for k in range(2 * passes.fusion.regions.MAX_INPUTS)]
    total = xs[0]
    for x in xs[1:]:
        total = total + x
    new = passes.fuse_elementwise(total)
    fused = [n for n in ops_of(new) if isinstance(n.op, Fused)]
    assert [len(f.inputs) for f in fused] == [passes.fusion.regions.MAX_INPUTS] * 2
    assert len(ops_of(new)) == 3  # two kernels of 15 adds, and the first add on its own
    feed = {x: np.full(3, float(k)) for k, x in enumerate(xs)}
    np.testing.assert_array_equal(cl.evaluate(new, feed), cl.evaluate(total, feed))


def test_fusion_returns_a_new_list_even_when_nothing_fuses():
    x = cl.variable("x", (3,), np.float32)
    outputs = [cl.exp(x), x @ x]
    rewritten = passes.fuse_elementwise(outputs)
    assert rewritten == outputs and rewritten is not outputs
    assert passes.fuse_elementwise(outputs[0]) is outputs[0]  # a single node stays a node


def test_constant_only_trees_are_left_to_folding():
    tree = cl.exp(cl.constant(2.0) * 3.0)  # no array enters: nothing to run a kernel over
    assert passes.fuse_elementwise(tree) is tree


def test_fused_graph_draws_its_expression():
    xs, e = lecture_graph()
    summary = repr(draw_graph(passes.fuse_elementwise(e)))
    assert "v5 = fused: v4 + (v1 + v2) × v3" in summary


def test_executor_and_jit_apply_the_passes():
    xs, e = lecture_graph()
    run = cl.Executor(e, optimize=True)
    assert [n.op.name for n in run.order if n.inputs] == ["fused"]
    feed = feed_for(xs)
    np.testing.assert_allclose(run.run(feed), cl.evaluate(e, feed), rtol=1e-6)

    @cl.jit
    def program(a, b, c, d):
        return d + (a + b) * c

    arrays = [feed[x] for x in xs]
    np.testing.assert_allclose(program(*arrays), cl.evaluate(e, feed), rtol=1e-6)
    ((executor, _, _),) = program.cache.values()
    assert [n.op.name for n in executor.order if n.inputs] == ["fused"]
    plain = cl.jit(program.fn, optimize=False)
    plain(*arrays)
    ((executor, _, _),) = plain.cache.values()
    assert [n.op.name for n in executor.order if n.inputs] == ["add", "mul", "add"]


# -- common subexpressions ----------------------------------------------------------------
def test_cse_merges_duplicates_and_commuted_inputs():
    x, y = cl.variable("x", (3,)), cl.variable("y", (3,))
    out = cl.sin(x * y) + cl.sin(x * y) + (y * x)
    new = passes.eliminate_common_subexpressions(out)
    assert len(ops_of(out)) == 7
    assert [n.op.name for n in ops_of(new)] == ["mul", "sin", "add", "add"]
    feed = {x: np.arange(3.0), y: np.ones(3)}
    np.testing.assert_array_equal(cl.evaluate(new, feed), cl.evaluate(out, feed))


def test_cse_never_merges_variables_or_different_ops():
    a1, a2 = cl.variable("a"), cl.variable("a")
    out = [a1 + 1.0, a2 + 1.0, a1 - 1.0, cl.sum(a1, 0), cl.mean(a1, 0)]
    assert passes.eliminate_common_subexpressions(out) == out


# -- constant folding ---------------------------------------------------------------------
def test_folding_keeps_python_numbers_weak():
    x = cl.variable("x", (3,), np.float32)
    out = x * (cl.constant(2.0) * 3.0 + 1.0)
    new = passes.fold_constants(out)
    assert len(ops_of(new)) == 1 and new.inputs[1].op.value == 7.0
    value = cl.evaluate(new, {x: np.ones(3, np.float32)})
    assert value.dtype == np.float32 and value.tolist() == [7.0] * 3


def test_folding_arrays_and_what_is_left_alone():
    w = cl.constant(np.arange(6.0).reshape(2, 3), name="W")
    x = cl.variable("x", (3, 2))
    folded = passes.fold_constants(cl.matmul(cl.transpose(w), cl.exp(w)) + cl.sum(x))
    constants = [n for n in topological_order([folded]) if n.is_constant]
    assert [c.shape for c in constants] == [(3, 3)] and constants[0].dtype == np.float64
    bad = cl.log(cl.constant(np.array([-1.0])))  # warns when computed: left for the run
    assert passes.fold_constants(bad) is bad


class WarnsWhenComputed(cl.Op):
    """An identity that emits a (non-numeric) warning, as a deprecated NumPy path would."""

    name = "warns"

    def compute(self, xp, x):
        warnings.warn("this path is deprecated", DeprecationWarning, stacklevel=1)
        return x


def test_folding_reports_a_non_numeric_warning_where_it_computes():
    """Shown once, when folding computes the node (catching it would swap the warning
    filters of every thread: tests/test_warning_filters_threads.py); the value is kept."""
    warned = apply(WarnsWhenComputed(), cl.constant(np.array([1.0, 2.0])))
    with pytest.warns(DeprecationWarning, match="deprecated"):
        folded = passes.fold_constants(warned)
    assert folded.is_constant and cl.evaluate(folded, {}).tolist() == [1.0, 2.0]


# -- merged matmuls -----------------------------------------------------------------------
def qkv_graph(tokens=5, dim=4, dtype=np.float64):
    h = cl.variable("h", (2, tokens, dim), dtype)
    ws = [cl.variable(f"W{k}", (dim, dim + i), dtype) for i, k in enumerate("qkv")]
    return h, ws, [h @ w for w in ws]


def test_merged_qkv_equals_three_matmuls_with_gradients():
    h, ws, qkv = qkv_graph()
    merged = passes.merge_matmuls(qkv)
    assert sum(isinstance(n.op, MatMul) for n in topological_order(qkv)) == 3
    assert sum(isinstance(n.op, MatMul) for n in topological_order(merged)) == 1
    assert [m.shape for m in merged] == [q.shape for q in qkv]
    feed = feed_for([h, *ws], dtype=np.float64)
    for a, b in zip(cl.evaluate(merged, feed), cl.evaluate(qkv, feed)):
        np.testing.assert_allclose(a, b, rtol=1e-12)
    loss, loss_merged = (
        cl.sum(q * q) + cl.sum(cl.tanh(k)) + cl.sum(v) for q, k, v in (qkv, merged)
    )
    for a, b in zip(
        cl.evaluate(cl.grad(loss_merged, [h, *ws]), feed),
        cl.evaluate(cl.grad(loss, [h, *ws]), feed),
    ):
        np.testing.assert_allclose(a, b, rtol=1e-10)


def test_merged_matmuls_sharing_the_right_operand():
    h = cl.variable("h", (4, 6), "float64")
    wq, wk = cl.variable("Wq", (3, 4), "float64"), cl.variable("Wk", (2, 4), "float64")
    merged = passes.merge_matmuls([wq @ h, wk @ h])
    assert sum(isinstance(n.op, MatMul) for n in topological_order(merged)) == 1
    feed = feed_for([h, wq, wk], dtype=np.float64)
    for a, b in zip(cl.evaluate(merged, feed), cl.evaluate([wq @ h, wk @ h], feed)):
        np.testing.assert_allclose(a, b, rtol=1e-12)


def test_matmuls_that_cannot_merge_stay():
    h, ws, (q, k, v) = qkv_graph()
    w32 = cl.variable("W32", (4, 4), np.float32)
    dependent = h @ cl.matrix_transpose(cl.sum(q, 0)[:4, :4])  # its weight needs q
    outs = [q, dependent, h @ w32]
    assert passes.merge_matmuls(outs) == outs


# -- errors -------------------------------------------------------------------------------
@pytest.mark.parametrize("rewrite", passes.PIPELINE + (passes.optimize,))
def test_passes_reject_what_is_not_a_graph(rewrite):
    with pytest.raises(GraphError, match="nodes"):
        rewrite([np.ones(3)])
    with pytest.raises(GraphError, match="eager"):
        rewrite(cl.Tensor([1.0]) * 2.0)


def test_optimized_control_flow_skips_the_untaken_branch():
    x, y = cl.variable("x", (4,)), cl.variable("y", (4,))
    out = cl.cond(
        cl.sum(x) > 0.0,
        lambda a, b: cl.tanh(a * b + 1.0) * 2.0,
        lambda a, b: cl.exp(a - b) - 1.0,
        x,
        y,
    )
    graph = [out, *cl.grad(cl.sum(out), [x, y])]
    run = cl.Executor(graph, optimize=True)
    assert sum(isinstance(n.op, Fused) for n in run.order) >= 2
    for sign in (1.0, -1.0):
        feed = {x: sign * np.arange(1.0, 5.0), y: np.arange(4.0)}
        for a, b in zip(run.run(feed), cl.Executor(graph).run(feed)):
            np.testing.assert_allclose(a, b, rtol=1e-12)
        assert run.last_run["skipped"] > 0
