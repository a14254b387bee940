"""gradient_trace stores what each step changed, so a trace grows linearly with the graph."""

import tracemalloc

import numpy as np

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
