"""The executor (define-then-run) and the eager Tensor (define-by-run)."""

import gc
import operator

import numpy as np
import pytest

import course_lib as cl


def test_executor_compiles_once_and_runs_many_feeds():
    x = cl.variable("x", shape=(None,))
    run = cl.Executor([cl.sum(x * x), cl.grad(cl.sum(x * x), x)])
    for n in (1, 5, 9):
        value, slope = run.run({"x": np.arange(n, dtype=float)})
        assert value == sum(i * i for i in range(n))
        np.testing.assert_array_equal(slope, 2 * np.arange(n))


def test_executor_frees_intermediates_and_reports_peak():
    x = cl.variable("x", shape=(1000,), dtype=np.float64)
    y = x
    for _ in range(20):
        y = cl.exp(y * 0.001)
    run = cl.Executor(y)
    run.run({x: np.ones(1000)})
    # the input, the current value and one temporary: never 20 arrays at once
    assert 8000 * 2 <= run.peak_bytes <= 8000 * 4


def test_eager_tensor_matches_symbolic_values_and_gradients(rng):
    a = rng.standard_normal((3, 4))
    w = rng.standard_normal((4, 2))
    ta, tw = cl.Tensor(a, requires_grad=True), cl.Tensor(w, requires_grad=True)
    loss = cl.sum(cl.tanh(ta @ tw))
    loss.backward()
    x, v = cl.variable("a"), cl.variable("w")
    out = cl.sum(cl.tanh(x @ v))
    ref = cl.evaluate([out, *cl.grad(out, [x, v])], {x: a, v: w})
    assert np.isclose(loss.item(), ref[0])
    np.testing.assert_allclose(ta.grad.numpy(), ref[1])
    np.testing.assert_allclose(tw.grad.numpy(), ref[2])


@pytest.mark.parametrize(
    "fn, op", [(operator.add, "add"), (operator.sub, "sub"), (operator.mul, "mul"),
               (operator.truediv, "div")],
)  # fmt: skip
@pytest.mark.parametrize("tensor_first", [True, False])
def test_eager_operators_build_the_op_with_the_operands_in_order(fn, op, tensor_first):
    values = np.array([1.0, -2.0, 4.0, 0.5])
    t, x = cl.Tensor(values, requires_grad=True), cl.variable("x", (4,))
    out, ref = (fn(t, 3.0), fn(x, 3.0)) if tensor_first else (fn(3.0, t), fn(3.0, x))
    cl.sum(out).backward()
    want, want_grad = cl.evaluate([ref, cl.grad(cl.sum(ref), x)], {x: values})
    assert isinstance(out, cl.Tensor) and out.op.name == ref.op.name == op
    np.testing.assert_allclose(out.numpy(), want)
    np.testing.assert_allclose(t.grad.numpy(), want_grad)


def test_backward_twice_accumulates_exactly_twice():
    a = cl.Tensor(np.array([1.5]), requires_grad=True)
    y = a * a * 3.0
    y.backward()
    once = a.grad.numpy().copy()
    y.backward()
    np.testing.assert_array_equal(a.grad.numpy(), 2 * once)
    a.zero_grad()
    assert a.grad is None


def test_backward_restores_the_cycle_collector_state(monkeypatch):
    a = cl.Tensor(np.array([1.5]), requires_grad=True)
    (a * a).backward()
    assert gc.isenabled()
    gc.disable()
    try:
        (a * a).backward()
        assert not gc.isenabled()  # a user's choice is kept
    finally:
        gc.enable()
    with pytest.raises(cl.ShapeError, match=r"seed has shape \(2, 3\).*shape \(1,\)"):
        (a * a).backward(gradient=np.ones((2, 3)))

    def failing_pass(*args, **kwargs):
        raise cl.GraphError("boom")

    monkeypatch.setattr(cl.autodiff.reverse, "gradient", failing_pass)
    with pytest.raises(cl.GraphError, match="boom"):
        (a * a).backward()
    assert gc.isenabled()


def test_eager_shared_node_gradient():
    a = cl.Tensor(np.array(2.0), requires_grad=True)
    b = a + a
    c = b + b
    c.backward()
    assert a.grad.item() == 4.0


def test_eager_higher_order_with_create_graph():
    x = cl.Tensor(np.array(0.7), requires_grad=True)
    y = cl.sin(x) * x
    y.backward(create_graph=True)
    first = x.grad
    x.zero_grad()
    first.backward()
    expected = 2 * np.cos(0.7) - 0.7 * np.sin(0.7)
    assert np.isclose(x.grad.item(), expected)


def test_no_grad_records_nothing():
    a = cl.Tensor(np.ones(3), requires_grad=True)
    with cl.no_grad():
        b = a * 2
    assert not b.requires_grad and b.inputs == ()


def test_backward_needs_something_to_differentiate():
    with pytest.raises(cl.GraphError, match="does not require grad"):
        cl.Tensor(np.ones(2)).backward()
