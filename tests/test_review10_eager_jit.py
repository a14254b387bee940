"""Eager tensors and jit at their edges (a review's findings): backward's seeds and sums into
.grad, a tensor's numbers and elements, and what jit takes and returns."""

import numpy as np
import pytest
import torch

import course_lib as cl
from course_lib.runtime.eager import Tensor


# -- backward ----------------------------------------------------------------------------------
def test_create_graph_inside_no_grad_keeps_the_accumulated_gradient_differentiable():
    x = Tensor(np.array([1.0, 2.0, 3.0]), requires_grad=True)
    first, second = cl.sum(x * x * x), cl.sum(x * x * x)
    with cl.no_grad():
        first.backward(create_graph=True)
        second.backward(create_graph=True)  # x.grad = 3x² + 3x², summed inside no_grad
    assert x.grad.requires_grad  # was: the sum was not recorded
    grad = x.grad
    x.zero_grad()
    cl.sum(grad).backward()
    xt = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64, requires_grad=True)
    (gt,) = torch.autograd.grad(2 * (xt**3).sum(), xt, create_graph=True)
    gt.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), xt.grad.numpy())  # 12 x


@pytest.mark.parametrize("make_out", [lambda x: x + 0.0, lambda x: x])
def test_a_seed_that_requires_grad_gives_plain_gradients_without_create_graph(make_out):
    x = Tensor(np.array([1.0, 2.0]), requires_grad=True)
    seed = Tensor(np.array([3.0, 4.0]), requires_grad=True)
    make_out(x).backward(gradient=seed)  # the seed passes through unchanged
    np.testing.assert_array_equal(x.grad.numpy(), [3.0, 4.0])
    assert not x.grad.requires_grad  # was: x.grad was the seed, with its graph (PyTorch: plain)
    assert x.grad is not seed


def test_grad_must_have_the_dtype_of_its_tensor():
    x = Tensor(np.ones(2, np.float32), requires_grad=True, name="x")
    for other in (np.float64, np.int64):
        with pytest.raises(
            cl.GraphError,
            match=r"x.grad must be None or a Tensor of shape \(2,\) and dtype float32",
        ):
            x.grad = Tensor(np.zeros(2, other))  # was: the next backward summed into float64
    x.grad = Tensor(np.zeros(2, np.float32))
    cl.sum(x * 2.0).backward()
    assert x.grad.dtype == np.float32


# -- numbers and elements ----------------------------------------------------------------------
def test_float_and_int_of_a_tensor_of_one_number_of_any_shape():
    assert float(Tensor(np.array([1.5]))) == 1.5  # was: "needs one number, but it has shape (1,)"
    assert int(Tensor(np.array([[7]]))) == 7
    assert float(torch.tensor([1.5])) == Tensor(np.array([1.5])).item() == 1.5
    with pytest.raises(cl.CourseLibError, match=r"needs one number, but it has shape \(2,\)"):
        int(Tensor(np.array([1.0, 2.0])))


def test_int_of_nan_or_inf_says_so():
    with pytest.raises(cl.ParameterError, match=r"int\(\) of tensor t: cannot convert float NaN"):
        int(Tensor(np.nan, name="t"))  # was: a ShapeError saying it needs one number
    with pytest.raises(cl.NumericError, match=r"int\(\) of tensor t: cannot convert float inf"):
        int(Tensor(np.inf, name="t"))  # was: a bare OverflowError


def test_in_looks_for_an_equal_element_as_numpy_and_torch():
    values = np.array([1.0, 2.0, 3.0])
    t = Tensor(values, requires_grad=True)
    for x in (3.0, 2, 5.0, np.float32(1.0), Tensor(2.0)):
        expected = (x.numpy() if isinstance(x, Tensor) else x) in values
        assert (x in t) == expected == (torch.tensor(np.asarray(x).item()) in torch.tensor(values))
    assert 3.0 in t  # was: False (each row compared by identity)
    with pytest.raises(cl.ShapeError, match="equal"):
        np.ones(2) in t  # noqa: B015


def test_a_ragged_list_is_a_shape_error_as_for_a_constant():
    with pytest.raises(cl.ShapeError, match="Tensor: the value is not an array of one shape"):
        Tensor([[1.0], [1.0, 2.0]])  # was: NumPy's bare ValueError
    with pytest.raises(cl.ShapeError, match="not an array of one shape"):
        cl.constant([[1.0], [1.0, 2.0]])


# -- jit ---------------------------------------------------------------------------------------
def test_jit_refuses_a_tensor_that_requires_grad():
    double = cl.jit(lambda x: x * 2.0)
    w = Tensor(np.ones(2), requires_grad=True, name="w")
    with pytest.raises(cl.GraphError, match=r"argument 0 \(w\) requires grad.*w.detach\(\)"):
        double(w)  # was: arrays out, w's gradients silently gone
    np.testing.assert_array_equal(double(w.detach()), [2.0, 2.0])
    np.testing.assert_array_equal(double(Tensor(np.ones(2))), [2.0, 2.0])


@pytest.mark.parametrize("max_traces", [None, 0])
def test_jit_refuses_a_generator_function(max_traces):
    def rows(x):  # was: a tuple of what it yields, and a generator that never ends hung
        yield x
        yield x * 2.0

    with pytest.raises(cl.GraphError, match=r"jit\(rows\) returned a generator"):
        cl.jit(rows, max_traces=max_traces)(np.ones(2))
