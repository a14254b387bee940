"""Review 11 of the shape, broadcast, reduction and control ops: a gather written with a
tuple inside the index, ``sum_to`` to a shape that does not broadcast, ``broadcast_to`` from
a size unknown when built, unknown sizes in a static target, the memory that getitem's and
concat's adjoints are charged, the maximum over an empty axis, ``take`` of a 0-d table fed
at run time and ``permute`` by no axes (a hostile review's findings, each a test; the
oracles are PyTorch and NumPy)."""

import numpy as np
import pytest
import torch

import course_lib as cl
from course_lib.ops.shape import ConcatPart, ScatterLike


@pytest.mark.parametrize("known", [True, False], ids=["shape-known", "shape-unknown"])
@pytest.mark.parametrize(
    ("index", "torch_index"),
    [
        (((0, 0, 2),), ([0, 0, 2],)),
        ((slice(None), (2, 2)), (slice(None), [2, 2])),
        (range(2), [0, 1]),
    ],
    ids=["tuple", "tuple-after-slice", "range"],
)
def test_a_gather_written_with_a_tuple_inside_the_index_accumulates(known, index, torch_index):
    # NumPy reads x[(0, 0, 2),] as x[[0, 0, 2]]; the adjoint assigned instead of adding: row 0
    # got its gradient once, not twice
    a = np.arange(9.0).reshape(3, 3)
    x = cl.variable("x", a.shape if known else None, np.float64)
    y = cl.getitem(x, index)
    seed = np.random.default_rng(0).standard_normal(a[index].shape)
    value, grad = cl.evaluate([y, cl.grad(cl.sum(y * seed), [x])[0]], {x: a})
    t = torch.tensor(a, requires_grad=True)
    (t[torch_index] * torch.tensor(seed)).sum().backward()
    np.testing.assert_array_equal(value, a[index])
    np.testing.assert_allclose(grad, t.grad.numpy())


@pytest.mark.parametrize(
    ("x_shape", "target"), [((2, 3), (3, 2)), ((4, 1), (2, 2)), ((1, 6), (2, 3))]
)
def test_sum_to_refuses_a_target_that_does_not_broadcast_to_x(x_shape, target):
    # each was a reshape: a silent wrong answer
    a = np.arange(float(np.prod(x_shape))).reshape(x_shape)
    with pytest.raises(cl.ShapeError, match="does not broadcast to it"):
        cl.sum_to(cl.variable("x", x_shape, np.float64), cl.variable("like", target))
    x, like = cl.variable("x", None, np.float64), cl.variable("like", None, np.float64)
    with pytest.raises(ValueError, match="sum_to at node .*does not broadcast to it"):
        cl.evaluate(cl.sum_to(x, like), {x: a, like: np.zeros(target)})


@pytest.mark.parametrize("optimize", [False, True])
def test_broadcast_to_takes_a_size_unknown_when_built_to_size_1(optimize):
    # (None,) to (1,) was refused when built, though a length 1 fits
    x = cl.variable("x", (None, 1), np.float64)
    y = cl.broadcast_to(x, (1, 3))
    value, grad = cl.Executor([y, cl.grad(cl.sum(y), [x])[0]], optimize).run({x: np.ones((1, 1))})
    np.testing.assert_array_equal(value, np.ones((1, 3)))
    np.testing.assert_array_equal(grad, [[3.0]])
    with pytest.raises(cl.ShapeError, match=r"cannot broadcast \(None, 2\) to \(1, 3\)"):
        cl.broadcast_to(cl.variable("z", (None, 2)), (1, 3))


@pytest.mark.parametrize("fn", [cl.reshape, cl.broadcast_to], ids=["reshape", "broadcast_to"])
def test_a_static_target_shape_refuses_unknown_sizes(fn):
    # accepted, then a TypeError about NoneType when run
    with pytest.raises(cl.GraphError, match=r"shape must be a tuple of integers, got \(None, 2\)"):
        fn(cl.variable("x", None, np.float64), (None, 2))


def test_the_adjoints_of_getitem_and_concat_are_charged_only_what_they_touch():
    # the scatter reads g, not the array it takes its shape from; concat's adjoint is a slice
    assert ScatterLike((0,)).accesses((100, 8), (8,), (100, 8)) == ((8, 0), 800)
    assert ConcatPart(0, 0).accesses((2, 3), (5, 3), (2, 3), (3, 3)) == ((0, 0, 0), 0)


def test_max_over_an_empty_axis_is_refused_with_a_shape_error():
    # built: no error until run; run: a ParameterError (a shape problem, not a parameter)
    with pytest.raises(cl.ShapeError, match="no maximum over an axis of size 0"):
        cl.max(cl.variable("x", (2, 0), np.float64), -1)
    assert cl.max(cl.variable("x", (2, 0), np.float64), 0).shape == (0,)
    x = cl.variable("x", None, np.float64)
    with pytest.raises(cl.ShapeError, match=r"max\(axis=1, keepdims=False\) at node"):
        cl.evaluate(cl.max(x, 1), {x: np.zeros((2, 0))})


def test_take_of_a_0d_table_fed_at_run_time_says_why():
    table = cl.variable("t", None, np.float64)
    with pytest.raises(cl.ShapeError, match="take at node .*the table needs at least one axis"):
        cl.evaluate(cl.take(table, 0), {table: np.array(1.0)})


def test_permute_by_no_axes_is_no_reversal():
    # permute(x, ()) reversed a matrix; NumPy and PyTorch refuse it
    with pytest.raises(cl.ShapeError, match="not a permutation of 2 dimensions"):
        cl.permute(cl.variable("x", (2, 3), np.float64), ())
    x = cl.variable("s", (), np.float64)
    assert cl.evaluate(cl.permute(x, ()), {x: np.array(2.0)}) == 2.0
    assert cl.permute(cl.variable("m", (2, 3)), (-1, 0)).shape == (3, 2)
