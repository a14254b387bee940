"""Bad input fails early with messages that name the op, the nodes and the shapes."""

import numpy as np
import pytest

import course_lib as cl
from course_lib import CourseLibError, DeviceError, FeedError, GraphError, ShapeError
from course_lib.graph import apply


def test_shape_error_at_construction_names_op_nodes_and_shapes():
    x = cl.variable("x", shape=(3, 4))
    w = cl.variable("w", shape=(5, 2))
    with pytest.raises(ShapeError) as info:
        x @ w
    message = str(info.value)
    assert "matmul" in message and "x: (3, 4)" in message and "w: (5, 2)" in message
    assert isinstance(info.value, ValueError) and isinstance(info.value, CourseLibError)


def test_broadcast_mismatch_is_a_shape_error():
    with pytest.raises(ShapeError, match=r"add.*a: \(2, 3\).*b: \(4,\)"):
        cl.variable("a", (2, 3)) + cl.variable("b", (4,))


def test_missing_feed_names_the_variable():
    x, y = cl.variable("x"), cl.variable("y")
    with pytest.raises(FeedError, match="missing feed for variable\\(s\\) y"):
        cl.evaluate(x + y, {"x": 1.0})


def test_extra_feed_names_the_stranger_and_what_was_expected():
    x = cl.variable("x")
    with pytest.raises(FeedError, match="'z'.*expected x"):
        cl.evaluate(x * 2, {"x": 1.0, "z": 2.0})


def test_fed_shape_must_match_declared_shape():
    x = cl.variable("x", shape=(None, 3))
    with pytest.raises(
        ShapeError, match=r"variable x expects shape \(None, 3\).*fed shape \(2, 4\)"
    ):
        cl.evaluate(x * 2, {x: np.zeros((2, 4))})
    assert cl.evaluate(x * 2, {x: np.ones((5, 3))}).shape == (5, 3)


def test_fed_dtype_must_match_declared_dtype():
    x = cl.variable("x", dtype=np.float32)
    with pytest.raises(FeedError, match="x expects dtype float32.*float64"):
        cl.evaluate(x * 2, {x: np.zeros(3)})


def test_run_time_shape_error_names_node_and_shapes():
    x, y = cl.variable("x"), cl.variable("y")
    with pytest.raises(ShapeError, match=r"matmul at node \(x@y\).*x: \(2, 3\).*y: \(2, 3\)"):
        cl.evaluate(x @ y, {x: np.zeros((2, 3)), y: np.zeros((2, 3))})


def test_graph_error_for_python_branching_on_a_node():
    x = cl.variable("x")
    with pytest.raises(GraphError, match="cond"):
        if x > 0:
            pass


def test_nodes_are_immutable():
    x = cl.variable("x")
    with pytest.raises(GraphError, match="immutable"):
        x.name = "y"


def test_mixing_eager_and_symbolic_is_refused():
    with pytest.raises(GraphError, match="cannot mix"):
        cl.Tensor(np.ones(2)) + cl.variable("x")


def test_eager_shape_error_names_shapes():
    a, b = cl.Tensor(np.ones((2, 3)), name="a"), cl.Tensor(np.ones((4,)), name="b")
    with pytest.raises(ShapeError, match=r"a: \(2, 3\), b: \(4,\)"):
        a * b


def test_device_error_for_unknown_device():
    with pytest.raises(DeviceError, match="'tpu' is not a device; use one of cpu, gpu, strict"):
        cl.set_device("tpu")


def test_cross_entropy_needs_integer_targets():
    with pytest.raises(ShapeError, match="integer class targets"):
        cl.cross_entropy(cl.variable("z", (2, 3)), cl.constant(np.zeros(2)))


def test_grad_refuses_a_seed_of_another_shape_and_uses_one_of_the_same():
    x = cl.variable("x", (2, 3))
    y = cl.exp(x)
    with pytest.raises(ShapeError, match=r"seed .* shape \(3,\).* output .* shape \(2, 3\)"):
        cl.grad(y, x, seed=np.ones(3))
    seed = np.arange(6.0).reshape(2, 3)
    (gx,) = cl.grad(y, [x], seed=seed)
    value = np.linspace(-1, 1, 6).reshape(2, 3)
    np.testing.assert_allclose(cl.evaluate(gx, {x: value}), seed * np.exp(value))


def test_trace_steps_out_of_range_name_the_range(worked_example):
    *_, trace = worked_example
    last = len(trace.steps) - 1
    for bad in (-1, last + 1, 10**6, 1.5, True):
        for call in (trace.describe, trace.state_text, trace.state):
            with pytest.raises(cl.OutOfRangeError, match=rf"integer from 0 to {last}"):
                call(bad)
    assert trace.describe(last) and trace.state_text(0)


def test_jit_refuses_keyword_arguments_by_name():
    f = cl.jit(lambda a: a * 2.0)
    with pytest.raises(cl.GraphError, match=r"by position .*\['b'\]"):
        f(b=3)


def test_adamw_refuses_a_step_before_the_first():
    from course_lib.models import AdamW  # noqa: PLC0415

    params = {"w": np.ones(3)}
    optimizer = AdamW(params)
    w, g = cl.variable("w", (3,), np.float64), cl.variable("g", (3,), np.float64)
    run = cl.Executor(optimizer.update_nodes({"w": w}, {"w": g}))
    feed = {w: params["w"], g: np.ones(3), **optimizer.feed()}
    feed[optimizer.step_var] = np.int64(0)
    with pytest.raises(cl.ParameterError, match=r"step counts from 1 .*got 0"):
        run.run(feed)


class _TypeErrorInCompute(cl.Op):
    """An op whose own code fails with a TypeError when it runs."""

    name = "broken_compute"

    def compute(self, xp, x):
        raise TypeError("the op's own bug")


class _TypeErrorInShape(cl.Op):
    """An op whose own shape rule fails with a TypeError when a node is built."""

    name = "broken_shape"

    def infer_shape(self, shape):
        raise TypeError("the shape rule's own bug")


class _AttributeErrorInCompute(cl.Op):
    """An op whose own code reads an attribute that does not exist."""

    name = "missing_attribute"

    def compute(self, xp, x, *others):
        return x.no_such_attribute


def test_an_ops_error_stays_the_cause_of_the_shape_error():
    with pytest.raises(ShapeError, match="broken_shape") as built:
        apply(_TypeErrorInShape(), cl.variable("x", (2,)))
    assert isinstance(built.value.__cause__, TypeError)
    with pytest.raises(GraphError, match="broken_compute") as eager:  # as the executor says
        apply(_TypeErrorInCompute(), cl.Tensor(np.ones(2)))
    assert isinstance(eager.value.__cause__, TypeError)
    assert "the op's own bug" in str(eager.value.__cause__)


def test_an_attribute_error_inside_an_ops_compute_is_not_swallowed():
    with pytest.raises(AttributeError, match="no_such_attribute"):  # a constant input too
        apply(_AttributeErrorInCompute(), cl.Tensor(np.ones(2)), 2.0)
    with pytest.raises(AttributeError, match="no_such_attribute"):
        apply(_AttributeErrorInCompute(), cl.Tensor(np.ones(2)))
