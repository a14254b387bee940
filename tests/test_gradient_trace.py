"""gradient_trace stores what each step changed, so a trace grows linearly with the graph."""

import tracemalloc

import numpy as np
import pytest

import course_lib as cl


def _chain(n):
    x = cl.variable("x", (), np.float64)
    y = x
    for _ in range(n):
        y = cl.sin(y)
    return x, y


def test_gradient_trace_memory_is_linear():
    x, y = _chain(2000)
    tracemalloc.start()
    try:
        _, trace = cl.gradient_trace(y, [x])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(trace.steps) == 4001
    assert peak < 20 * 2**20, f"{peak / 2**20:.0f} MB for 2,000 ops (a snapshot per step: 860 MB)"


def test_trace_state_is_node_to_grad_after_each_step():
    x1, x2 = cl.variable("x1"), cl.variable("x2")
    y = cl.log(x1) + x1 * x2 - cl.sin(x2)
    _, trace = cl.gradient_trace(y, [x1, x2])
    seen: dict = {}
    for k, step in enumerate(trace.steps):
        if step.kind == "partial":
            seen.setdefault(step.input, []).append(step.created)
        node_to_grad, sources = trace.state(k)
        assert node_to_grad == {trace.out: [trace.seed], **seen}
        assert all(len(sources[n]) == len(parts) for n, parts in node_to_grad.items())
    assert trace.state_text(len(trace.steps) - 1) == (
        "{7: [v̄7], 6: [v̄(6→7)], 5: [v̄(5→7)], 4: [v̄(4→5)], 3: [v̄(3→5)], "
        "2: [v̄(2→6), v̄(2→4)], 1: [v̄(1→4), v̄(1→3)]}"
    )


def test_rules_skip_inputs_that_need_no_gradient(monkeypatch):
    from course_lib.ops.elementwise import Mul

    calls, compute = [], Mul.compute

    def counted(self, xp, x, y):
        calls.append(1)
        return compute(self, xp, x, y)

    monkeypatch.setattr(Mul, "compute", counted)
    a = cl.Tensor([1.0, 2.0], requires_grad=True)
    b = cl.Tensor([3.0, 4.0])  # a constant of the computation: no partial adjoint for it
    cl.sum(a * b).backward()
    assert len(calls) == 2  # the forward product and v̄(a→·) = ḡ·b, not ḡ·a as well
    np.testing.assert_array_equal(a.grad.numpy(), [3.0, 4.0])


def test_symbolic_gradient_builds_no_partial_for_an_input_not_asked_for():
    x, y = cl.variable("x"), cl.variable("y")
    _, trace = cl.gradient_trace(x * y, [x])
    assert [(s.kind, s.input) for s in trace.steps] == [("adjoint", None), ("partial", x),
                                                        ("adjoint", None)]  # fmt: skip


def _described(out, wrt, feed):
    from course_lib.viz.steps import trace_values

    _, trace = cl.gradient_trace(out, wrt)
    return trace, [trace.describe(i, trace_values(trace, feed)) for i in range(len(trace.steps))]


def test_each_op_writes_its_own_rule_and_the_numbers_are_plugged_in(lecture_graph):
    v1, v2, *_, v7 = lecture_graph
    trace, said = _described(v7, [v1, v2], {v1: 2.0, v2: 5.0})
    partials = {trace.rule(i) for i, s in enumerate(trace.steps) if s.kind == "partial"}
    assert partials == {"v̄7", "−v̄7", "v̄6", "v̄4 × v2", "v̄4 × v1", "v̄3 / v1", "v̄5 × cos(v2)"}
    assert "append v̄(5→7) = v̄7·∂v7/∂v5 = −v̄7 = −1.000 to node_to_grad[5]" in said[2]
    assert "v̄(2→5) = v̄5·∂v5/∂v2 = v̄5 × cos(v2) = (−1.000) × 0.284 = −0.284" in "".join(said)
    assert "v̄(1→3) = v̄3·∂v3/∂v1 = v̄3 / v1 = 1.000 / 2.000 = 0.500" in "".join(said)
    assert said[-1] == "i = 1: v̄1 = v̄(1→4) + v̄(1→3) = 5.000 + 0.500 = 5.500"
    assert "v̄2 = v̄(2→5) + v̄(2→4) = (−0.284) + 2.000 = 1.716" in "".join(said)


def test_rules_without_single_numbers_stay_symbolic():
    x = cl.variable("x", shape=(3,))
    w = cl.variable("w", shape=(3,))
    trace, said = _described(cl.sum(x * w), [x], {x: np.ones(3), w: np.arange(3.0)})
    assert said[3] == "i = 3, k = 1: append v̄(1→3) = v̄3·∂v3/∂v1 = v̄3 × v2 to node_to_grad[1]"
    _, no_values = cl.gradient_trace(cl.sum(x * w), [x])
    assert [no_values.describe(i) for i in range(len(said))] == said
    with pytest.raises(ValueError, match="no rule"):
        trace.rule(0)  # the first step sums: it applies no op's rule


def test_constants_are_written_by_value_in_the_numbers():
    x = cl.variable("x", shape=())
    _, said = _described(x * cl.constant(3.0, name="c") + x**2, [x], {x: 0.5})
    assert said[-2].endswith("= v̄2 × c = 1.000 × 3 = 3.000 to node_to_grad[1]")  # by value
    assert said[-4].endswith("= v̄3 × (2 × v1) = 1.000 × 1.000 = 1.000 to node_to_grad[1]")
    assert said[-1] == "i = 1: v̄1 = v̄(1→3) + v̄(1→2) = 1.000 + 3.000 = 4.000"


def test_nan_and_infinite_values_are_written_as_they_are():
    x = cl.variable("x", shape=())
    _, said = _described(cl.log(x), [x], {x: np.inf})
    assert said[1].endswith("= v̄2 / v1 = 1.000 / inf = 0.000 to node_to_grad[1]")
    _, said = _described(x * x, [x], {x: -np.inf})
    assert said[1].endswith("= v̄2 × v1 = 1.000 × (−inf) = −inf to node_to_grad[1]")
    assert said[-1] == "i = 1: v̄1 = v̄(1→2) + v̄(1→2) = (−inf) + (−inf) = −inf"
    _, said = _described(cl.sin(x), [x], {x: np.nan})
    assert said[1].endswith("= v̄2 × cos(v1) = 1.000 × nan = nan to node_to_grad[1]")


def test_saved_for_backward_are_the_values_the_rules_read(lecture_graph, worked_example):
    v1, v4, dv1, trace = worked_example
    saved = cl.saved_for_backward(v4, dv1)
    assert [trace.number(n) for n in saved] == [2, 3]  # not v1 (exp reads its output), not v4
    x1, x2, *_, y = lecture_graph
    assert cl.saved_for_backward(y, cl.grad(y, [x1, x2])) == [x1, x2]  # ln, ×, sin read x1, x2
    assert cl.saved_for_backward(y, cl.grad(y, x1)) == [x1, x2]  # v̄(1→4) = v̄4 × x2
    total = x1 + x2
    assert cl.saved_for_backward(total, cl.grad(total, [x1, x2])) == []  # + reads nothing
    seed = cl.ones_like(total)
    assert seed.op.shape_only and float(cl.evaluate(seed, {x1: np.nan, x2: 1.0})) == 1.0
    c = cl.constant(np.ones(3))
    z = cl.variable("z", shape=(3,))
    product = z * c
    loss = cl.sum(product)  # v̄z = v̄product × c: no value of z; unreduce needs the shape
    assert cl.saved_for_backward(loss, cl.grad(loss, z)) == [product]  # of product, not c
    with pytest.raises(cl.GraphError, match="saved_for_backward: backward"):
        cl.saved_for_backward(y, [1.0])


def test_a_partial_adjoint_given_to_a_constant_is_no_step():
    """``Switch``'s rule gives the constant of a branch a partial adjoint that nothing reads;
    the trace leaves it out, so it replays, and ``grad`` (which traces too) works."""
    x = cl.variable("x", shape=())
    out = cl.cond(x > 0, lambda: x, lambda: cl.constant(0.0))
    dx, trace = cl.gradient_trace(out, x)
    assert all(trace.is_forward(s.input) for s in trace.steps if s.kind is cl.StepKind.PARTIAL)
    assert trace.state_text(len(trace.steps) - 1).startswith("{")
    assert [float(cl.evaluate(cl.grad(out, x), {x: v})) for v in (2.0, -2.0)] == [1.0, 0.0]
