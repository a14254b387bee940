"""Review 10: reverse mode (seeds, the trace), forward mode (tangent nodes), dual numbers and
jacobians, against hand traces, PyTorch and the graph's own ops."""

import numpy as np
import pytest

import course_lib as cl
from tests.conftest import oracle_import


def _run(node, feed):
    return cl.Executor(node).run(feed, allow_unused=True)


# ------------------------------------------------------------------ grad's seed
@pytest.mark.parametrize("seed", [np.ones(2), np.ones(4)], ids=["shorter", "longer"])
def test_a_seed_that_does_not_fit_an_output_of_unknown_size_fails_the_run(seed):
    """The seed's static shape was only compared with a fully known output shape: for an
    output of shape (None,) a seed of 2 elements gave x̄ of 2 elements for an x of 3."""
    x = cl.variable("x", (None,), np.float64)
    g = cl.grad(x * 2.0, x, seed=seed)
    with pytest.raises(cl.ParameterError, match="broadcast_to"):
        _run(g, {x: np.ones(3)})


def test_a_seed_of_an_output_of_unknown_size_gives_the_gradient_its_shape():
    x, shapeless = cl.variable("x", (None,), np.float64), cl.variable("y", None, np.float64)
    np.testing.assert_array_equal(_run(cl.grad(x * 2.0, x, seed=np.arange(3.0)),
                                       {x: np.ones(3)}), [0.0, 2.0, 4.0])  # fmt: skip
    np.testing.assert_array_equal(_run(cl.grad(shapeless * 2.0, shapeless, seed=3.0),
                                       {shapeless: np.ones(3)}), [6.0, 6.0, 6.0])  # fmt: skip


def test_a_seed_refused_by_the_known_axes_of_the_output():
    """(2, 4) for an output (None, 3), and a 0-d seed for (None,), were taken as they were."""
    x, y = cl.variable("x", (None, 3), np.float64), cl.variable("y", (None,), np.float64)
    with pytest.raises(cl.ShapeError, match=r"grad: the seed .* \(2, 4\).* \(None, 3\)"):
        cl.grad(x * 2.0, x, seed=np.ones((2, 4)))
    with pytest.raises(cl.ShapeError, match=r"grad: the seed .* has shape \(\)"):
        cl.grad(cl.sin(y), y, seed=np.array(1.0))


def test_a_seed_variable_of_unknown_shape_must_fit_the_output():
    x, seed = cl.variable("x", (3,), np.float64), cl.variable("s", None, np.float64)
    g = cl.grad(x * 2.0, x, seed=seed)
    np.testing.assert_array_equal(_run(g, {x: np.ones(3), seed: np.arange(3.0)}), [0, 2, 4])
    with pytest.raises(cl.ShapeError, match="broadcast_to"):
        _run(g, {x: np.ones(3), seed: np.ones(2)})


# ------------------------------------------------------------------ grad against PyTorch
def test_grad_with_repeated_uses_intermediates_and_the_output_as_target_is_pytorchs():
    torch = oracle_import("torch")
    x, y = cl.variable("x", (3,), np.float64), cl.variable("y", (), np.float64)
    u = x * x  # x twice in one node
    out = cl.sin(u) * x + u * y + x  # x by three paths; u by two
    seed = np.array([1.0, -2.0, np.inf])
    feed = {x: np.array([0.5, -1.0, 2.0]), y: 0.25}
    with np.errstate(invalid="ignore"):  # inf − inf in x̄'s sum: NaN, as in PyTorch
        got = _run(cl.grad(out, [x, y, u, out], seed=seed), feed)
    tx, ty = (torch.tensor(feed[v], requires_grad=True) for v in (x, y))
    tu = tx * tx
    tu.retain_grad()
    tout = torch.sin(tu) * tx + tu * ty + tx
    tout.retain_grad()
    tout.backward(torch.tensor(seed))
    for g, t in zip(got, [tx, ty, tu, tout]):
        np.testing.assert_array_equal(g, t.grad.numpy())


# ------------------------------------------------------------------ the trace
def test_the_trace_of_the_worked_example_is_the_hand_trace(worked_example):
    """v2 = exp(v1), v3 = v2 + 1, v4 = v2 × v3, traced by hand as the lecture does."""
    v1, v4, dv1, trace = worked_example
    hand = [
        ("adjoint", 4, None, "{4: [v̄4]}"),
        ("partial", 4, 2, "{4: [v̄4], 2: [v̄(2→4)]}"),
        ("partial", 4, 3, "{4: [v̄4], 3: [v̄(3→4)], 2: [v̄(2→4)]}"),
        ("adjoint", 3, None, "{4: [v̄4], 3: [v̄(3→4)], 2: [v̄(2→4)]}"),
        ("partial", 3, 2, "{4: [v̄4], 3: [v̄(3→4)], 2: [v̄(2→4), v̄(2→3)]}"),
        ("adjoint", 2, None, "{4: [v̄4], 3: [v̄(3→4)], 2: [v̄(2→4), v̄(2→3)]}"),
        ("partial", 2, 1, "{4: [v̄4], 3: [v̄(3→4)], 2: [v̄(2→4), v̄(2→3)], 1: [v̄(1→2)]}"),
        ("adjoint", 1, None, "{4: [v̄4], 3: [v̄(3→4)], 2: [v̄(2→4), v̄(2→3)], 1: [v̄(1→2)]}"),
    ]
    traced = [
        (s.kind.value, trace.number(s.node),
         None if s.input is None else trace.number(s.input), trace.state_text(k))
        for k, s in enumerate(trace.steps)
    ]  # fmt: skip
    assert traced == hand
    assert trace.describe(5) == "i = 2: v̄2 = v̄(2→4) + v̄(2→3)"
    assert trace.adjoint(v1) is trace.steps[-1].created
    e = np.exp(0.5)
    np.testing.assert_allclose(_run(dv1, {v1: 0.5}), e * (2 * e + 1), rtol=1e-15)


def _random_graph(rng, n):
    xs = [cl.variable(f"x{i}", (), np.float64) for i in range(3)]
    pool = list(xs)
    for _ in range(n):
        a, b = (pool[int(rng.integers(len(pool)))] for _ in range(2))
        pool.append([a * b, a + b, cl.sin(a), a * a, a - b][int(rng.integers(5))])
    return xs, pool[-1]


@pytest.mark.parametrize("seed", range(5))
def test_the_trace_is_what_gradient_did_in_reverse_topological_order(seed):
    """Adjoints are summed from the last node to the first, each from node_to_grad as the
    trace has it at that step (v̄i = sum(node_to_grad[i]) is that sum's node), and each
    partial adjoint belongs to the adjoint summed just before it."""
    xs, out = _random_graph(np.random.default_rng(seed), 12)
    grads, trace = cl.gradient_trace(out, xs)
    adjoints = [s for s in trace.steps if s.kind is cl.StepKind.ADJOINT]
    assert [s.node.seq for s in adjoints] == sorted((s.node.seq for s in adjoints), reverse=True)
    node_to_grad, current = {out: [trace.seed]}, None
    for k, s in enumerate(trace.steps):
        if s.kind is cl.StepKind.ADJOINT:
            parts, current = node_to_grad[s.node], s.node
            assert s.created is parts[0] if len(parts) == 1 else s.created.inputs == tuple(parts)
        else:
            assert s.node is current
            node_to_grad.setdefault(s.input, []).append(s.created)
        assert trace.state(k)[0] == node_to_grad
    for x, g in zip(xs, grads):
        assert g is trace.adjoint(x) or trace.adjoint(x) is None


def test_a_deep_chain_is_differentiated_and_traced_without_recursion():
    x = cl.variable("x", (), np.float64)
    y = x
    for _ in range(20_000):
        y = cl.sin(y)
    dx, trace = cl.gradient_trace(y, x)
    assert len(trace.steps) == 40_001 and trace.describe(40_000) == "i = 1: v̄1 = v̄(1→2)"
    value, slope = 0.3, 1.0
    for _ in range(20_000):
        slope, value = slope * np.cos(value), np.sin(value)
    np.testing.assert_allclose(_run(dx, {x: 0.3}), slope, rtol=1e-12)


# ------------------------------------------------------------------ jvp's tangent nodes
def test_a_tangent_node_is_taken_in_its_float_variables_dtype():
    """A number or array was cast to the variable's dtype, a node was not: a boolean mask
    failed the run in neg ("the numpy boolean negative is not supported"), and a float64
    tangent made a float32 variable's tangents float64 (its gradient is float32)."""
    x = cl.variable("x", (3,), np.float64)
    mask = cl.constant(np.array([True, False, True]))
    np.testing.assert_array_equal(_run(cl.jvp(-x, {x: mask}), {x: np.ones(3)}), [-1, 0, -1])
    w = cl.variable("w", (3,), np.float32)
    feed = {w: np.ones(3, np.float32)}
    tangent = _run(cl.jvp(w * 2.0, {w: cl.constant(np.ones(3))}), feed)
    assert tangent.dtype == _run(cl.grad(cl.sum(w * 2.0), w), feed).dtype == np.float32


# ------------------------------------------------------------------ Dual at edge points
@pytest.mark.parametrize("name", ["exp", "log", "sin", "cos", "tanh", "reciprocal"])
def test_dual_functions_at_edge_points_are_the_graphs_ops_and_jvp(name):
    """Dual(1000).exp() raised OverflowError, Dual(0).log() and Dual(inf).sin() "math domain
    error", 1 / Dual(0) ZeroDivisionError; the graph's ops give inf, -inf, NaN (as does the
    Dual's own ** since review 8)."""
    points = np.array([0.0, -0.0, -1.0, np.inf, -np.inf, np.nan, 1000.0, 2.0])
    x = cl.variable("x", points.shape, np.float64)
    f = (lambda u: 1.0 / u) if name == "reciprocal" else (lambda u: getattr(u, name)())
    node = (lambda u: 1.0 / u) if name == "reciprocal" else getattr(cl, name)
    with np.errstate(all="ignore"):
        value, tangent = _run([node(x), cl.jvp(node(x), {x: np.ones(points.size)})], {x: points})
    duals = [f(cl.Dual(p, 1.0)) for p in points]
    np.testing.assert_array_equal([d.val for d in duals], value)
    np.testing.assert_array_equal([d.dot for d in duals], tangent)


def test_dual_division_is_the_quotient_rule():
    u, w = cl.Dual(3.0, 0.5), cl.Dual(-2.0, 1.5)
    q = u / w
    assert q.val == -1.5 and q.dot == pytest.approx((0.5 * -2.0 - 3.0 * 1.5) / 4.0, rel=1e-15)
    assert (2.0 / w).dot == pytest.approx(-2.0 * 1.5 / 4.0, rel=1e-15)


# ------------------------------------------------------------------ jacobian against PyTorch
@pytest.mark.parametrize("mode", ["forward", "reverse"])
def test_jacobians_of_non_square_and_0d_functions_are_pytorchs(mode):
    torch = oracle_import("torch")
    a = np.arange(6.0).reshape(2, 3)
    x, s = cl.variable("x", (3,), np.float64), cl.variable("s", (), np.float64)
    xv = np.array([0.1, -0.2, 0.3])
    got = cl.jacobian(cl.sin(cl.constant(a) @ x) * x[0], x, {x: xv}, mode).matrix
    want = torch.autograd.functional.jacobian(
        lambda t: torch.sin(torch.tensor(a) @ t) * t[0], torch.tensor(xv)
    )
    np.testing.assert_allclose(got, want.numpy(), rtol=1e-14)
    got = cl.jacobian(cl.sin(s) * s, s, {s: 0.7}, mode).matrix
    assert got.shape == (1, 1)
    np.testing.assert_allclose(got[0, 0], np.cos(0.7) * 0.7 + np.sin(0.7), rtol=1e-15)


@pytest.mark.parametrize("mode", ["forward", "reverse"])
def test_jacobians_of_empty_arrays_are_empty(mode):
    e, x = cl.variable("e", (0,), np.float64), cl.variable("x", (3,), np.float64)
    assert cl.jacobian(cl.sin(e), e, {e: np.ones(0)}, mode).matrix.shape == (0, 0)
    assert cl.jacobian(cl.sum(cl.sin(e)), e, {e: np.ones(0)}, mode).matrix.shape == (1, 0)
    assert cl.jacobian(x[:0], x, {x: np.ones(3)}, mode).matrix.shape == (0, 3)


# ------------------------------------------------------------------ the project's errors
def test_a_bad_request_of_a_trace_or_a_jacobian_is_a_parameter_error(worked_example):
    """Both raised a bare ValueError (course_lib's errors are CourseLibErrors)."""
    v1, v4, _, trace = worked_example
    with pytest.raises(cl.ParameterError, match="Trace.rule: step 0 sums node_to_grad"):
        trace.rule(0)
    with pytest.raises(cl.ParameterError, match="jacobian: mode must be"):
        cl.jacobian(v4, v1, {v1: 1.0}, mode="sideways")
