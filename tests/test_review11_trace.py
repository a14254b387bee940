"""Review 11 of the trace of ``gradient(out)`` (course_lib/autodiff/trace.py) and its
step-by-step pictures (course_lib/viz/steps.py): work that grew with the square of the graph,
step numbers that wrapped around, and a bare KeyError for a node of another graph."""

import re

import numpy as np
import pytest

import course_lib as cl
from course_lib.autodiff.trace import Replay
from course_lib.viz import steps as steps_module
from course_lib.viz.steps import replayed

torch = pytest.importorskip("torch")


def _lecture_algorithm(trace):
    """node_to_grad as the lecture's algorithm builds it from the trace's steps, checking
    that every node is summed once, after all its partial adjoints, in reverse order."""
    node_to_grad, summed = {trace.out: [trace.seed]}, []
    for s in trace.steps:
        if s.kind is cl.StepKind.ADJOINT:
            assert s.node not in summed and s.node in node_to_grad
            summed.append(s.node)
        else:
            assert s.node is summed[-1] and s.input not in summed
            node_to_grad.setdefault(s.input, []).append(s.created)
    assert [n.seq for n in summed] == sorted((n.seq for n in summed), reverse=True)
    return node_to_grad


def _third_power_gradient_reused(m, x):
    (dx,) = (cl.grad(x * x * x, [x]) if m is cl else
             torch.autograd.grad(x * x * x, x, create_graph=True))  # fmt: skip
    return dx * dx + m.sin(dx) + dx


CASES = {
    "x*x": (lambda m, x, y: x * x, ((), ())),
    "diamond": (lambda m, x, y: m.sin(x) * m.exp(x), ((), ())),
    "paths of two lengths": (lambda m, x, y: m.exp(m.sin(x)) + x, ((), ())),
    "input not reaching": (lambda m, x, y: x * 2.0, ((), ())),
    "broadcast": (lambda m, x, y: (m.exp(y * x + x)).sum(), ((), (2, 3))),
    "gradient reused": (lambda m, x, y: _third_power_gradient_reused(m, x), ((), ())),
}


@pytest.mark.parametrize("case", CASES)
def test_the_trace_is_the_lecture_algorithm_and_its_adjoints_are_torchs(case):
    build, shapes = CASES[case]
    arrays = [np.full(s, 0.7) + np.arange(int(np.prod(s))).reshape(s) / 10 for s in shapes]
    xs = [cl.variable(f"x{i}", s, np.float64) for i, s in enumerate(shapes)]
    grads, trace = cl.gradient_trace(build(cl, *xs), xs)
    node_to_grad = _lecture_algorithm(trace)
    assert trace.state(len(trace.steps) - 1)[0] == node_to_grad
    tensors = [torch.tensor(a, requires_grad=True) for a in arrays]
    expected = torch.autograd.grad(build(torch, *tensors).sum(), tensors, allow_unused=True)
    feed = dict(zip(xs, arrays))
    for x, g, e in zip(xs, grads, expected):
        e = np.zeros_like(feed[x]) if e is None else e.detach().numpy()
        np.testing.assert_allclose(cl.evaluate(g, feed, allow_unused=True), e, rtol=1e-12)
        if x in node_to_grad:  # v̄x: the sum of its partial adjoints, as the trace has them
            assert trace.adjoint(x) is g
            parts = cl.evaluate(node_to_grad[x], feed, allow_unused=True)
            np.testing.assert_allclose(sum(parts), e, rtol=1e-12)


def _long_sum(n):
    x = cl.variable("x", (), np.float64)
    total = cl.sin(x)
    for _ in range(n - 1):
        total = total + cl.sin(x)
    return x, total


def test_the_names_of_a_run_list_each_nodes_roles_once(monkeypatch):
    """In a sum of n terms the seed is v̄i of every node and v̄(k→i) of every ``+``: 4n
    roles. The names ``grad`` keeps listed them again for each step that built or reused
    it, so ``grad`` of a sum of 2,000 terms took 4.5 s (and 18 s for 4,000)."""
    x, total = _long_sum(300)
    calls = []
    roles = Replay.roles
    monkeypatch.setattr(Replay, "roles", lambda self, node: calls.append(1) or roles(self, node))
    _, trace = cl.gradient_trace(total, x)
    built = {s.created for s in trace.steps}
    assert len(calls) == len(built) < len(trace.steps) / 2
    assert len(trace.roles(trace.seed)) == 299 + 300 + 2 * 299  # v̄ of each + and sine, v̄(k→i)


def test_replaying_the_steps_for_a_picture_is_linear(monkeypatch):
    """Each step sorted every backward node built so far again: ``trace_values`` (which any
    ``draw_step(..., feed=)`` or ``adjoint_trace`` runs) took 4 s on a chain of 8,000 sines."""
    x = cl.variable("x", (), np.float64)
    y = x
    for _ in range(500):
        y = cl.sin(y)
    _, trace = cl.gradient_trace(y, x)
    sorted_items = []

    def counted(items, **kwargs):
        items = list(items)
        sorted_items.append(len(items))
        return sorted(items, **kwargs)

    monkeypatch.setattr(steps_module, "sorted", counted, raising=False)
    state = replayed(trace, len(trace.steps))
    assert [n.seq for n in state.backward] == sorted(n.seq for n in state.backward)
    assert len(state.backward) == 1 + 2 * 500  # the seed, cos(vi) and v̄(i→i+1) of each sine
    assert sum(sorted_items) <= 4 * len(trace.steps)


@pytest.mark.parametrize("call", ["names", "roles"])
@pytest.mark.parametrize("upto", [-1, -2, 99, 1.0])
def test_a_step_out_of_range_is_refused_not_counted_from_the_end(call, upto):
    """``names(-1)`` gave the names after all steps but the last, ``roles(n, upto=-2)`` the
    roles before the last step: Python's negative slices, not the steps asked for."""
    x = cl.variable("x", ())
    _, trace = cl.gradient_trace(cl.sin(x), x)
    ask = {"names": lambda: trace.names(upto),
           "roles": lambda: trace.roles(trace.steps[-1].created, upto=upto)}[call]  # fmt: skip
    with pytest.raises(cl.OutOfRangeError, match="upto must be an integer from 0 to"):
        ask()
    assert len(trace.names(len(trace.steps))) == 4  # after every step: v1, v2, v̄2, v̄1
    assert trace.roles(trace.steps[-1].created, upto=1) == ["v̄(1→2)"]


def test_the_number_of_a_node_not_in_the_trace_is_a_clear_error():
    """It was a bare KeyError of the node's repr."""
    x, z = cl.variable("x", ()), cl.variable("z", ())
    _, trace = cl.gradient_trace(cl.sin(x), x)
    assert trace.number(x) == 1
    for node in (z, trace.seed):
        message = rf"Trace.number: {re.escape(node.name)} is not one of .* v2"
        with pytest.raises(cl.GraphError, match=message):
            trace.number(node)
