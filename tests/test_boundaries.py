"""Where NumPy meets the graph: operators keep the graph or refuse, arrays are copied."""

import numpy as np
import pytest

import course_lib as cl

GRAPH_VALUES = [lambda: cl.Tensor([1.0], requires_grad=True), lambda: cl.variable("x", (1,))]


@pytest.mark.parametrize("scalar", [np.float64(0.5), np.float32(0.5), np.array(0.5)])
def test_numpy_scalar_on_left_keeps_the_eager_graph(scalar):
    t = cl.Tensor([1.0, 2.0, 3.0], requires_grad=True)
    cl.sum(t * (scalar * t)).backward()
    np.testing.assert_allclose(t.grad.numpy(), [1.0, 2.0, 3.0])


@pytest.mark.parametrize(
    "combine, expected",
    [
        (lambda a, x: a * x, [2.0, 4.0, 6.0]),
        (lambda a, x: a + x, [3.0, 4.0, 5.0]),
        (lambda a, x: a - x, [1.0, 0.0, -1.0]),
        (lambda a, x: a / x, [2.0, 1.0, 2.0 / 3.0]),
        (lambda a, x: np.float64(2.0) * x, [2.0, 4.0, 6.0]),
        (lambda a, x: np.eye(3) @ x, [1.0, 2.0, 3.0]),
    ],
)
def test_numpy_array_on_left_builds_a_node(combine, expected):
    x = cl.variable("x", (3,), np.float64)
    node = combine(np.full(3, 2.0), x)
    assert isinstance(node, cl.Node)
    np.testing.assert_allclose(cl.evaluate(node, {x: np.array([1.0, 2.0, 3.0])}), expected)


def test_numpy_comparison_on_left_builds_a_node():
    x = cl.variable("x", (3,), np.float64)
    node = np.zeros(3) < x
    assert isinstance(node, cl.Node)
    np.testing.assert_array_equal(cl.evaluate(node, {x: np.array([-1.0, 0.0, 1.0])}),
                                  [False, False, True])  # fmt: skip


@pytest.mark.parametrize("make", GRAPH_VALUES, ids=["tensor", "node"])
def test_numpy_ufunc_on_a_node_is_refused_not_detached(make):
    with pytest.raises(TypeError, match="does not support ufuncs"):
        np.exp(make())


@pytest.mark.parametrize("make", GRAPH_VALUES, ids=["tensor", "node"])
def test_asarray_of_a_graph_value_is_refused(make):
    with pytest.raises(cl.GraphError, match=r"cl\.exp"):
        np.asarray(make())


def test_asarray_of_a_tensor_without_grad_is_its_value():
    t = cl.Tensor([1.0, 2.0])
    np.testing.assert_array_equal(np.asarray(t), [1.0, 2.0])
    np.testing.assert_array_equal(cl.Tensor([3.0], requires_grad=True).detach().numpy(), [3.0])


def test_tensor_copies_its_input():
    array = np.array([1.0, 2.0, 3.0])
    t = cl.Tensor(array, requires_grad=True)
    y = cl.sum(t * t)
    array[:] = 100.0  # after the forward pass, before backward
    y.backward()
    np.testing.assert_allclose(t.grad.numpy(), [2.0, 4.0, 6.0])
    assert not np.shares_memory(t.data, array)


def test_constant_copies_its_input_so_folded_and_unfolded_runs_agree():
    array = np.array([1.0, 2.0, 3.0])
    x = cl.variable("x", (3,), np.float64)
    out = x * (cl.constant(array) * 2.0)
    plain, optimized = cl.Executor(out), cl.Executor(out, optimize=True)
    array[:] = -1.0
    feed = {x: np.ones(3)}
    np.testing.assert_array_equal(plain.run(feed), [2.0, 4.0, 6.0])
    np.testing.assert_array_equal(optimized.run(feed), [2.0, 4.0, 6.0])


def test_a_constant_returned_by_a_run_cannot_be_changed():
    c = cl.constant(np.array([1.0, 2.0]))
    value = cl.evaluate(c, {})
    with pytest.raises(ValueError, match="read-only"):
        value[0] = 5.0
    np.testing.assert_array_equal(cl.evaluate(c, {}), [1.0, 2.0])
