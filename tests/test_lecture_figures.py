"""The lecture's numbers, computed by the engine (CURRICULUM 02 and 03)."""

import math

import numpy as np

import course_lib as cl
from course_lib.viz.steps import trace_values

FEED = {"x1": 2.0, "x2": 5.0}


def test_forward_evaluation_trace(lecture_graph):
    values = cl.evaluate(lecture_graph[2:], FEED)
    assert [round(float(v), 3) for v in values] == [0.693, 10.0, -0.959, 10.693, 11.652]


def test_reverse_mode_gives_lecture_adjoints(lecture_graph):
    v1, v2, *_, y = lecture_graph
    g1, g2 = cl.evaluate(cl.grad(y, [v1, v2]), FEED)
    assert round(float(g1), 3) == 5.5
    assert round(float(g2), 3) == 1.716


def test_forward_mode_tangent_trace(lecture_graph):
    v1, v2 = lecture_graph[:2]
    tangents = cl.jvp(lecture_graph[2:], {v1: 1.0})
    values = cl.evaluate(tangents, FEED)
    assert [round(float(v), 3) for v in values] == [0.5, 5.0, 0.0, 5.5, 5.5]
    d2 = cl.evaluate(cl.jvp(lecture_graph[-1], {v2: 1.0}), FEED)
    assert round(float(d2), 3) == 1.716


def test_dual_numbers_reproduce_tangent_trace():
    v1, v2 = cl.Dual(2.0, 1.0), cl.Dual(5.0, 0.0)
    v3 = v1.log()
    v4 = v1 * v2
    v5 = v2.sin()
    v6 = v3 + v4
    v7 = v6 - v5
    assert [round(v.dot, 3) for v in (v1, v2, v3, v4, v5, v6, v7)] == [1, 0, 0.5, 5, 0, 5.5, 5.5]
    assert round(v7.val, 3) == 11.652


def test_node_to_grad_states_of_the_worked_example(worked_example):
    *_, trace = worked_example
    described = [trace.describe(i) for i in range(len(trace.steps))]
    states = [trace.state_text(i) for i in range(len(trace.steps))]
    assert described == [
        "i = 4: v̄4 = sum([1]) = 1",
        "i = 4, k = 2: append v̄(2→4) = v̄4·∂v4/∂v2 = v̄4 × v3 to node_to_grad[2]",
        "i = 4, k = 3: append v̄(3→4) = v̄4·∂v4/∂v3 = v̄4 × v2 to node_to_grad[3]",
        "i = 3: v̄3 = v̄(3→4)",
        "i = 3, k = 2: append v̄(2→3) = v̄3·∂v3/∂v2 = v̄3 to node_to_grad[2]",  # no new node
        "i = 2: v̄2 = v̄(2→4) + v̄(2→3)",
        "i = 2, k = 1: append v̄(1→2) = v̄2·∂v2/∂v1 = v̄2 × v2 to node_to_grad[1]",  # v2 = e^v1
        "i = 1: v̄1 = v̄(1→2)",
    ]
    assert states[2] == "{4: [v̄4], 3: [v̄(3→4)], 2: [v̄(2→4)]}"
    assert states[4] == "{4: [v̄4], 3: [v̄(3→4)], 2: [v̄(2→4), v̄(2→3)]}"
    assert states[-1] == "{4: [v̄4], 3: [v̄(3→4)], 2: [v̄(2→4), v̄(2→3)], 1: [v̄(1→2)]}"


def test_steps_worked_out_with_the_forward_values(worked_example):
    *_, trace = worked_example
    values = trace_values(trace, {"v1": 0.5})
    e = math.exp(0.5)  # v2; v3 = e + 1; v̄2 = (e + 1) + e; v̄1 = v̄2·e = 2e^{2v1} + e^{v1}
    assert [trace.describe(i, values) for i in range(len(trace.steps))] == [
        "i = 4: v̄4 = sum([1]) = 1",
        f"i = 4, k = 2: append v̄(2→4) = v̄4·∂v4/∂v2 = v̄4 × v3 = 1.000 × {e + 1:.3f} = "
        f"{e + 1:.3f} to node_to_grad[2]",
        f"i = 4, k = 3: append v̄(3→4) = v̄4·∂v4/∂v3 = v̄4 × v2 = 1.000 × {e:.3f} = {e:.3f} "
        "to node_to_grad[3]",
        f"i = 3: v̄3 = v̄(3→4) = {e:.3f}",
        f"i = 3, k = 2: append v̄(2→3) = v̄3·∂v3/∂v2 = v̄3 = {e:.3f} to node_to_grad[2]",
        f"i = 2: v̄2 = v̄(2→4) + v̄(2→3) = {e + 1:.3f} + {e:.3f} = {2 * e + 1:.3f}",
        f"i = 2, k = 1: append v̄(1→2) = v̄2·∂v2/∂v1 = v̄2 × v2 = {2 * e + 1:.3f} × {e:.3f} = "
        f"{(2 * e + 1) * e:.3f} to node_to_grad[1]",
        f"i = 1: v̄1 = v̄(1→2) = {(2 * e + 1) * e:.3f}",
    ]


def test_one_backward_graph_serves_every_input():
    v1 = cl.variable("v1")
    v2 = cl.exp(v1)
    dv1 = cl.grad(v2 * (v2 + 1), v1)
    run = cl.Executor(dv1)
    for x in (-1.0, 0.0, 0.5, 2.0):
        assert math.isclose(
            float(run.run({v1: x})), 2 * math.exp(2 * x) + math.exp(x), rel_tol=1e-12
        )


def test_second_derivative_from_the_backward_graph():
    x = cl.variable("x")
    y = cl.exp(x) * (cl.exp(x) + 1)
    d2 = cl.grad(cl.grad(y, x), x)
    assert math.isclose(float(cl.evaluate(d2, {x: 0.3})), 4 * math.exp(0.6) + math.exp(0.3))


def test_shared_nodes_sum_their_partial_adjoints():
    a = cl.variable("a")
    b = a + a
    c = b + b
    assert float(cl.evaluate(cl.grad(c, a), {a: 1.0})) == 4.0
    x = cl.variable("x")
    v = 3 * x
    y = v + 2 * v
    assert float(cl.evaluate(cl.grad(y, x), {x: 1.0})) == 9.0


def test_unrelated_wrt_gets_zeros_of_its_shape():
    x, z = cl.variable("x"), cl.variable("z")
    gz = cl.grad(cl.exp(x), [x, z])[1]
    out = cl.evaluate(gz, {z: np.ones((2, 3))})
    assert out.shape == (2, 3) and not out.any()


def test_long_chain_needs_no_recursion():
    x = cl.variable("x", shape=(1,), dtype=np.float64)
    a = x
    for _ in range(50_000):
        a = a * 1.0001 + 0.0001  # 100,000 op nodes
    dx = cl.grad(a, x)
    value, slope = cl.evaluate([a, dx], {x: np.array([1.0])})
    assert math.isclose(float(slope[0]), 1.0001**50_000, rel_tol=1e-9)
    assert np.isfinite(cl.to_numpy(value)).all()


def test_difference_quotients_have_orders_one_and_two(lecture_graph):
    v1, v2, *_, y = lecture_graph
    run = cl.Executor(y)

    def f(a):
        return float(run.run({v1: a, v2: 5.0}))

    eps = np.logspace(-15, -1, 57)
    errors = cl.gradcheck.difference_errors(f, 5.5, 2.0, eps)
    right = eps >= 1e-4
    assert round(cl.gradcheck.loglog_slope(eps[right], errors["forward"][right]), 1) == 1.0
    assert round(cl.gradcheck.loglog_slope(eps[right], errors["central"][right]), 1) == 2.0
    for err in errors.values():  # the V: the smallest ε is far from the best one
        assert err[0] > 100 * err.min()


def test_trace_tables_show_lecture_values(lecture_graph):
    from course_lib.viz import adjoint_trace, evaluation_trace

    v1, v2 = lecture_graph[:2]
    table = evaluation_trace(lecture_graph, {v1: 2.0, v2: 5.0}, tangents={v1: 1.0})
    assert table.column("value") == [
        "2.000",
        "5.000",
        "0.693",
        "10.000",
        "−0.959",
        "10.693",
        "11.652",
    ]
    assert table.column("v̇ (tangent)") == [
        "1.000",
        "0.000",
        "0.500",
        "5.000",
        "0.000",
        "5.500",
        "5.500",
    ]
    _, trace = cl.gradient_trace(lecture_graph[-1], [v1, v2])
    adjoints = adjoint_trace(trace, {v1: 2.0, v2: 5.0})
    assert adjoints.column("value") == [
        "1.000",
        "1.000",
        "−1.000",
        "1.000",
        "1.000",
        "1.716",
        "5.500",
    ]


def test_full_jacobian_costs_n_forward_passes_and_k_reverse_passes():
    rng = np.random.default_rng(0)
    x = cl.variable("x", shape=(6,))
    out = cl.tanh(x)[:2] * cl.sum(x * x)
    feed = {x: rng.standard_normal(6)}
    fwd, rev = cl.jacobian(out, x, feed, "forward"), cl.jacobian(out, x, feed, "reverse")
    assert (fwd.passes, rev.passes) == (6, 2)
    np.testing.assert_allclose(fwd.matrix, rev.matrix, rtol=1e-12)
    assert fwd.matrix.shape == (2, 6)


def test_softmax_cross_entropy_gradient_is_y_minus_t():
    rng = np.random.default_rng(1)
    logits = cl.variable("logits", shape=(7,))
    target = rng.dirichlet(np.ones(7))
    loss = -cl.sum(cl.constant(target) * cl.log_softmax(logits))
    x0 = rng.standard_normal(7)
    g, y = cl.evaluate([cl.grad(loss, logits), cl.softmax(logits)], {logits: x0})
    np.testing.assert_allclose(g, cl.to_numpy(y) - target, atol=1e-14)
