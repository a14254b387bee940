"""Eager tensors, graph nodes and jit at their edges: copies and pickles, int(), the attribute
setters, tensors of another device, and jit's arguments and results (a review's findings).

The device tests pin the devices themselves (course_lib.strict_device), so they say the same
on every device `make test` runs them on.
"""

import copy
import operator
import pickle

import numpy as np
import pytest

import course_lib as cl
from course_lib.errors import GraphError
from course_lib.graph import Node
from course_lib.runtime import Tensor
from course_lib.runtime.jit import jit


# -- copies and pickles ------------------------------------------------------------------------
@pytest.mark.parametrize("make_copy", [copy.copy, copy.deepcopy,
                                       lambda t: pickle.loads(pickle.dumps(t))],
                         ids=["copy", "deepcopy", "pickle"])  # fmt: skip
def test_a_copied_tensor_is_a_new_leaf_with_the_value(make_copy):
    x = Tensor(np.arange(3.0), requires_grad=True, name="x")
    y = x * 2.0
    for original in (x, y):
        twin = make_copy(original)
        assert twin is not original and isinstance(twin, Tensor)
        assert twin.inputs == () and twin.requires_grad and twin.device == original.device
        np.testing.assert_array_equal(twin.numpy(), original.numpy())
    twin = make_copy(y)
    (twin * twin).sum().backward()  # a leaf of its own: the gradient stops at the copy
    np.testing.assert_array_equal(twin.grad.numpy(), 2 * y.numpy())
    assert x.grad is None


def test_a_pickled_int_tensor_keeps_its_dtype_and_name():
    t = pickle.loads(pickle.dumps(Tensor(np.array([1, 2], np.int32), name="ids")))
    assert t.dtype == np.int32 and t.name == "ids" and not t.requires_grad


def test_nodes_are_immutable_so_a_copy_is_the_node_and_a_pickle_computes_the_same():
    x = cl.variable("x", (3,), np.float64)
    y = cl.exp(x * 2.0) + 1.0
    assert copy.copy(y) is y and copy.deepcopy(y) is y
    assert copy.deepcopy({"out": y})["out"] is y
    back = pickle.loads(pickle.dumps(y))
    assert back is not y and back.name == y.name and back.shape == y.shape
    x_back = next(n for n in cl.graph.topological_order([back]) if n.is_variable)
    value = np.array([0.0, 0.5, 1.0])
    np.testing.assert_allclose(cl.evaluate(back, {x_back: value}), np.exp(2 * value) + 1)


def test_setting_an_attribute_of_a_node_says_it_is_immutable_even_before_it_has_a_name():
    x = cl.variable("x", (2,))
    with pytest.raises(cl.GraphError, match="node x is immutable.*'shape'"):
        x.shape = (3,)
    blank = Node.__new__(Node)  # as a copy or an unpickling makes it, before __init__
    with pytest.raises(cl.GraphError, match="node <node> is immutable"):
        blank.op = None


# -- numbers out of a tensor -------------------------------------------------------------------
def test_int_of_a_tensor_is_its_number():
    assert int(Tensor(np.array(2.7))) == 2
    assert int(Tensor(np.array(-3))) == -3
    assert f"{int(Tensor(np.array(4.0))):d}" == "4" and "%d" % Tensor(np.array(4.0)) == "4"  # noqa: UP031


def test_an_integer_scalar_tensor_is_an_index():
    n = Tensor(np.array(3))
    assert operator.index(n) == 3 and list(range(n)) == [0, 1, 2]
    assert [10, 11, 12, 13][n] == 13
    for not_an_index in (Tensor(np.array(3.0)), Tensor(np.array([3]))):
        with pytest.raises(TypeError, match="only an integer tensor of shape"):
            operator.index(not_an_index)


# -- the attribute setters check what the constructor checks ------------------------------------
def test_requires_grad_set_later_is_checked_as_in_the_constructor():
    ints = Tensor(np.array([1, 2]))
    with pytest.raises(cl.GraphError, match="only floating-point tensors can require"):
        ints.requires_grad = True
    assert ints.requires_grad is False
    floats = Tensor(np.ones(2))
    with pytest.raises(cl.GraphError, match="requires_grad must be True or False"):
        floats.requires_grad = "yes"
    floats.requires_grad = True
    assert floats.requires_grad is True


def test_grad_is_none_or_a_tensor_of_the_same_shape():
    u = Tensor(np.ones(2), requires_grad=True, name="u")
    for junk in ("junk", np.ones(2), Tensor(np.ones(3))):
        with pytest.raises(cl.GraphError, match=r"u.grad must be None or a Tensor of shape \(2,\)"):
            u.grad = junk
    (u * 3.0).sum().backward()
    np.testing.assert_array_equal(u.grad.numpy(), [3.0, 3.0])
    u.grad = None
    u.grad = Tensor(np.zeros(2))


# -- tensors of another device -----------------------------------------------------------------
def test_a_tensor_records_its_device():
    with cl.use_device("strict"):
        t = Tensor(np.ones(2), requires_grad=True)
        assert t.device == "strict" and (t * 2.0).device == "strict"
    with cl.use_device("cpu"):
        assert Tensor(np.ones(2)).device == "cpu"


def test_an_op_on_a_tensor_of_another_device_names_the_op_the_tensor_and_both_devices():
    with cl.use_device("cpu"):
        on_cpu = Tensor(np.ones(2), requires_grad=True, name="w")
    with cl.use_device("strict"):
        on_strict = Tensor(np.ones(2), requires_grad=True)
        made_on = r"mul: tensor w is on the 'cpu' device, but course_lib runs on 'strict'"
        with pytest.raises(cl.DeviceError, match=made_on + r".*Tensor\(t.numpy\(\)\)"):
            on_cpu * 2.0  # no silent result on the wrong device
        for mix in (lambda: (on_cpu * on_cpu).sum(), lambda: on_cpu + on_strict,
                    lambda: cl.exp(on_cpu)):  # fmt: skip
            with pytest.raises(cl.DeviceError, match="tensor w is on the 'cpu' device"):
                mix()  # not a ShapeError: the shapes fit
        moved = Tensor(on_cpu.numpy(), requires_grad=True)  # the way out the message gives
        assert float((moved * on_strict).sum()) == 2.0
    with cl.use_device("cpu"):
        with pytest.raises(cl.DeviceError, match="is on the 'strict' device"):
            cl.exp(on_strict)
        loss = (on_cpu * on_cpu).sum()
    with cl.use_device("strict"), pytest.raises(cl.DeviceError, match="'cpu' device"):
        loss.backward()  # the backward pass meets the same check


def test_a_copy_of_a_tensor_stays_on_its_device():
    with cl.use_device("strict"):
        t = Tensor(np.ones(2))
    with cl.use_device("cpu"):
        twin = copy.deepcopy(t)
        assert twin.device == "strict" and cl.backend.device_of(twin._data) == "strict"


# -- jit: its arguments and results ------------------------------------------------------------
def test_jit_runs_a_function_that_ignores_an_array_argument():
    @jit
    def f(x, mask):
        return x * 2.0

    np.testing.assert_array_equal(f(np.ones(3), np.zeros(3)), [2.0, 2.0, 2.0])
    np.testing.assert_array_equal(f(np.ones(3), np.zeros(3)), [2.0, 2.0, 2.0])
    assert f.stats["traces"] == 1 and f.stats["hits"] == 1


def test_jit_names_a_dict_it_cannot_return():
    f = jit(lambda x: {"double": x * 2.0})
    with pytest.raises(cl.GraphError, match=r"returned a dict; return a node or a tuple"):
        f(np.ones(2))


def test_jit_checks_the_dynamic_argument_indices_and_axes():
    def double(x, scale=2.0):
        return x * scale

    with pytest.raises(cl.ParameterError, match="dynamic argument index must be an integer >= 0"):
        jit(double, dynamic={-1: [0]})
    with pytest.raises(cl.ParameterError, match=r"dynamic names argument\(s\) \[7\]"):
        jit(double, dynamic={7: [0]})(np.ones(3))
    with pytest.raises(cl.ShapeError, match=r"dynamic axes \[5\] of argument 0 .* \(3,\)"):
        jit(double, dynamic={0: [5]})(np.ones(3))
    with pytest.raises(cl.GraphError, match="axes of argument 1, a float, not an array"):
        jit(double, dynamic={1: [0]})(np.ones(3), 3.0)


def test_a_negative_dynamic_axis_counts_from_the_end():
    f = jit(lambda x: x.sum(), dynamic={0: [-1]})
    assert f(np.ones((2, 3))) == 6.0 and f(np.ones((2, 5))) == 10.0
    assert f.stats["traces"] == 1


def test_eager_and_graph_errors_are_of_one_kind():
    """NumPy's TypeError in an op (the negative of booleans) is a GraphError eagerly as in
    the executor (it was a ShapeError, "inputs do not fit", though the shapes fit)."""
    with pytest.raises(GraphError, match="neg"):
        -Tensor(np.array([True]))
    with pytest.raises(GraphError, match="neg"):
        cl.evaluate(-cl.variable("x"), {"x": np.array([True])})
