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
    with pytest.raises(cl.GraphError, match=r"np\.exp cannot compute on node .*use cl\.exp"):
        np.exp(make())
    with pytest.raises(cl.GraphError, match=r"np\.add\.reduce"):
        np.add.reduce(make())
    with pytest.raises(cl.GraphError, match="np.multiply"):
        np.multiply(make(), 2.0, out=np.zeros(1))


def test_numpy_ufunc_on_a_tensor_without_grad_is_refused_too():
    with pytest.raises(cl.GraphError, match=r"use cl\.sqrt, or the values \(\.numpy\(\)"):
        np.sqrt(cl.Tensor([4.0]))


@pytest.mark.parametrize("left", [np.float64(2.0), np.int64(2), np.array(2.0), np.full(3, 2.0)])
def test_numpy_scalar_or_array_on_the_left_of_each_operator_keeps_the_eager_graph(left):
    t = cl.Tensor([1.0, 2.0, 4.0], requires_grad=True)
    terms = [left + t, left - t, left * t, left / t, left < t, left >= t]
    assert all(isinstance(term, cl.Tensor) for term in terms)
    cl.sum(terms[0] + terms[1] + terms[2] + terms[3]).backward()
    np.testing.assert_allclose(t.grad.numpy(), 2.0 - 2.0 / np.array([1.0, 4.0, 16.0]))


def test_numpy_matrix_on_either_side_of_matmul_keeps_the_eager_graph():
    t = cl.Tensor(np.ones((3, 2)), requires_grad=True)
    cl.sum(np.arange(6.0).reshape(2, 3) @ t).backward()
    np.testing.assert_allclose(t.grad.numpy(), [[3.0, 3.0], [5.0, 5.0], [7.0, 7.0]])
    t.zero_grad()
    cl.sum(t @ np.arange(4.0).reshape(2, 2)).backward()  # the rule transposes the array
    np.testing.assert_allclose(t.grad.numpy(), [[1.0, 5.0]] * 3)


@pytest.mark.parametrize("make", GRAPH_VALUES, ids=["tensor", "node"])
@pytest.mark.parametrize("base", [2.0, np.float64(2.0), np.array(2.0)])
def test_a_node_as_exponent_is_refused_with_the_way_out(make, base):
    with pytest.raises(cl.GraphError, match=r"exponent must be a real number.*exp\(p \* log"):
        base ** make()


@pytest.mark.parametrize("exponent", [np.float64(3.0), np.int64(3), np.array(3.0)])
def test_numpy_scalar_exponent_keeps_the_eager_graph(exponent):
    t = cl.Tensor([1.0, 2.0], requires_grad=True)
    cl.sum(t**exponent).backward()
    np.testing.assert_allclose(t.grad.numpy(), [3.0, 12.0])


@pytest.mark.parametrize("make", GRAPH_VALUES, ids=["tensor", "node"])
def test_numpy_equality_with_a_node_is_identity_as_in_python(make):
    node = make()
    assert (np.float64(1.0) == node) is False and (np.ones(1) != node) is True
    assert node in {node: 1} and node != np.float64(1.0)


def test_numpy_sum_and_mean_of_a_tensor_keep_the_graph():
    t = cl.Tensor([1.0, 2.0, 3.0], requires_grad=True)
    (np.sum(t) + np.mean(t, axis=0, keepdims=True)).backward(np.ones(1))
    np.testing.assert_allclose(t.grad.numpy(), [4.0 / 3.0] * 3)
    with pytest.raises(cl.GraphError, match=r"out= are not supported.*cl\.sum"):
        np.sum(t, out=np.zeros(()))


def test_iterating_over_a_node_gives_its_rows():
    t = cl.Tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    rows = list(t)
    assert len(rows) == 2 and all(isinstance(r, cl.Tensor) for r in rows)
    cl.sum(rows[1] * 3.0).backward()
    np.testing.assert_array_equal(t.grad.numpy(), [[0.0, 0.0], [3.0, 3.0]])
    x = cl.variable("x", (2, 3))
    assert [r.shape for r in x] == [(3,), (3,)]
    assert cl.topological_order(x) == [x]  # one node, not its rows
    with pytest.raises(cl.GraphError, match="iteration needs a first axis of known size"):
        list(cl.variable("y", (None, 2)))
    with pytest.raises(cl.GraphError, match="iteration needs"):
        iter(cl.Tensor(1.0))


def test_comparison_of_tensors_does_not_require_grad():
    t = cl.Tensor([1.0, 2.0], requires_grad=True)
    assert not (t > 1.0).requires_grad
    np.testing.assert_array_equal(np.asarray(t > 1.0), [False, True])  # no detach() needed


@pytest.mark.parametrize("make", GRAPH_VALUES, ids=["tensor", "node"])
def test_asarray_of_a_graph_value_is_refused(make):
    with pytest.raises(cl.GraphError, match=r"cl\.exp"):
        np.asarray(make())


def test_asarray_of_a_tensor_without_grad_is_its_value():
    t = cl.Tensor([1.0, 2.0])
    np.testing.assert_array_equal(np.asarray(t), [1.0, 2.0])
    np.testing.assert_array_equal(cl.Tensor([3.0], requires_grad=True).detach().numpy(), [3.0])


def write_changes_nothing(array) -> None:
    """Write into ``array``: refused on the CPU (read-only); on a device, whose arrays cannot
    be read-only (CuPy's cannot), the array is a copy, so the caller checks nothing changed."""
    if cl.get_device() == "cpu":
        with pytest.raises(ValueError, match="read-only"):
            array[0] = 100.0
    else:
        array[0] = 100.0


def test_a_tensors_value_cannot_be_changed_behind_backward():
    t = cl.Tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = cl.sum(t * t)
    for view in (t.numpy(), np.asarray(t.detach())):  # copies: writing them changes nothing
        view[:] = 100.0
    for data in (t.data, (t * 1.0).data):
        write_changes_nothing(data)
    y.backward()
    np.testing.assert_allclose(t.grad.numpy(), [2.0, 4.0, 6.0])
    write_changes_nothing(t.grad.data)  # a gradient may be shared (a + b gives both the same)
    np.testing.assert_allclose(t.grad.numpy(), [2.0, 4.0, 6.0])


def test_executor_outputs_do_not_alias_feeds_or_each_other():
    x = cl.variable("x", (3,), np.float64)
    for optimize in (False, True):
        run = cl.Executor([x, cl.reshape(x, (3, 1)), x * 2.0, x * 2.0], optimize=optimize)
        fed = np.array([1.0, 2.0, 3.0])
        same, view, double, again = run.run({x: fed})
        same[0], view[1, 0], double[2] = -1.0, -2.0, -3.0  # writing outputs ...
        np.testing.assert_array_equal(fed, [1.0, 2.0, 3.0])  # ... leaves the feed alone
        np.testing.assert_array_equal(again, [2.0, 4.0, 6.0])  # ... and the other outputs
        fed[:] = 0.0  # writing the feed after the run leaves the results alone
        np.testing.assert_array_equal(run.run({x: np.ones(3)})[0], np.ones(3))
        np.testing.assert_array_equal(view[:, 0], [1.0, -2.0, 3.0])


def test_jit_result_does_not_alias_its_argument():
    f = cl.jit(lambda a: cl.reshape(a, (2,)))
    for arg in (np.array([1.0, 2.0]), cl.Tensor([1.0, 2.0])):
        out = f(arg)
        out[0] = 9.0
        np.testing.assert_array_equal(np.asarray(arg), [1.0, 2.0])


def test_tensor_copies_its_input():
    array = np.array([1.0, 2.0, 3.0])
    t = cl.Tensor(array, requires_grad=True)
    y = cl.sum(t * t)
    array[:] = 100.0  # after the forward pass, before backward
    y.backward()
    np.testing.assert_allclose(t.grad.numpy(), [2.0, 4.0, 6.0])
    if cl.get_device() == "cpu":  # on a device the data is elsewhere by construction
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


def test_a_constant_returned_by_a_run_is_a_copy():
    """The run's outputs are the caller's to change (a writable copy of the constant, as an
    unfolded result would be); the constant itself does not change."""
    c = cl.constant(np.array([1.0, 2.0]))
    value = cl.evaluate(c, {})
    value[0] = 100.0
    np.testing.assert_array_equal(cl.evaluate(c, {}), [1.0, 2.0])


def test_jit_traces_signed_zeros_apart_and_nan_once():
    f = cl.jit(lambda a, c: 1.0 / (a * c))
    with np.errstate(divide="ignore", invalid="ignore"):
        np.testing.assert_array_equal(f(np.ones(2), 0.0), [np.inf, np.inf])
        np.testing.assert_array_equal(f(np.ones(2), -0.0), [-np.inf, -np.inf])
        for _ in range(3):
            f(np.ones(2), float("nan"))
    assert f.stats["traces"] == 3
