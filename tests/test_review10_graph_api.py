"""Review 10 (graph API): ``in`` and ``len`` of nodes, ``np.equal`` as the identity ``==`` is,
NumPy's reductions pointing at the right op, and unpickled constants frozen again."""

import copy
import pickle
import re

import numpy as np
import pytest

import course_lib as cl


def test_in_on_a_node_is_refused():
    """Was silently False: Python walked the rows and compared them by identity."""
    x = cl.variable("x", (3,), "float32")
    for value in (1.0, x, np.float32(0)):
        with pytest.raises(cl.GraphError, match=r"'in' on node x.*course_lib.equal"):
            _ = value in x
    with pytest.raises(cl.GraphError, match="'in' on node y"):  # unknown shape: same error
        _ = 1.0 in cl.variable("y")
    assert 2.0 in cl.Tensor(np.array([1.0, 2.0]))  # a tensor knows its values


def test_len_is_the_first_axis_as_in_numpy():
    """Was a bare TypeError (``object of type 'Node' has no len()``) though iteration works."""
    assert len(cl.variable("x", (4, 2))) == len(np.ones((4, 2))) == 4
    assert len(cl.variable("e", (0,))) == 0
    for shape in (None, (), (None, 2)):
        with pytest.raises(cl.GraphError, match=re.escape(f"len() of node v of shape {shape}")):
            len(cl.variable("v", shape))


def test_np_equal_on_nodes_is_identity_as_equals_is():
    """``np.equal(x, x)`` was False (and ``np.not_equal(x, x)`` True) while ``x == x`` is True."""
    x, y = cl.variable("x", (3,)), cl.variable("y", (3,))
    assert np.equal(x, x) is (x == x) is True
    assert np.not_equal(x, x) is (x != x) is False
    assert np.equal(x, y) is False and np.not_equal(x, y) is True
    assert (np.ones(3) == x) is False and (np.ones(3) != x) is True


def test_numpy_reductions_point_at_the_reduction_op():
    """``np.max(x)`` (``np.maximum.reduce``) pointed at cl.maximum, an op of two inputs."""
    x = cl.variable("x", (3,), "float32")
    with pytest.raises(cl.GraphError, match=r"np.maximum.reduce .* use cl\.max,"):
        np.max(x)
    with pytest.raises(cl.GraphError, match=r"np.add.reduce .* use cl\.sum,"):
        np.add.reduce(x)
    with pytest.raises(cl.GraphError, match=r"np.maximum .* use cl\.maximum,"):
        np.maximum(x, 0)


def test_an_unpickled_constant_stays_frozen():
    """Pickle made the array writable, so a run returned the constant's own memory and
    writing the result changed the constant: the next run computed ``[99, 2]``."""
    c = pickle.loads(pickle.dumps(cl.constant(np.array([1.0, 2.0]))))
    out = cl.evaluate(c)
    out[0] = 99.0
    np.testing.assert_array_equal(cl.evaluate(c), [1.0, 2.0])
    for op in (c.op, copy.deepcopy(c.op)):
        with pytest.raises(ValueError):
            op.value.flags.writeable = True
    c.op.on(np)  # device copies are not pickled (made again where a run needs them)
    c.op._on_device["cupy"] = object()
    assert pickle.loads(pickle.dumps(c.op))._on_device == {}


@pytest.mark.parametrize("dtype", [("f4", -1), ("f4", 1.5), [("a", "f4"), ("a", "f4")]])
def test_a_malformed_dtype_is_a_graph_error(dtype):
    """NumPy's ValueError for a malformed structured dtype escaped as a bare ValueError."""
    with pytest.raises(ValueError):  # NumPy's own answer
        np.dtype(dtype)
    with pytest.raises(cl.GraphError, match="variable x: .* is not a dtype"):
        cl.variable("x", (2,), dtype)
    with pytest.raises(cl.GraphError, match="cast: .* is not a dtype"):
        cl.cast(cl.variable("y", (2,)), dtype)


def test_a_node_attribute_cannot_be_deleted():
    """``del x.shape`` went through (only setting was refused), leaving a broken node."""
    x = cl.variable("x", (3,), "float32")
    for key in ("shape", "name", "op"):
        with pytest.raises(cl.GraphError, match=f"node x is immutable; its '{key}'"):
            delattr(x, key)
    assert x.shape == (3,) and x.name == "x" and x.is_variable
