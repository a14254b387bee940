"""Eager tensors against PyTorch, line by line (a review's findings): detach and .grad across
devices, formatting and printing, and why a tensor has no gradient."""

import numpy as np
import pytest
import torch

import course_lib as cl
from course_lib.runtime.eager import Tensor


# -- devices -----------------------------------------------------------------------------------
def test_detach_keeps_the_tensor_on_its_device_under_another_one():
    with cl.use_device("strict"):
        t = Tensor(np.array([1.0, 2.0]), requires_grad=True)
    with cl.use_device("cpu"):
        detached = t.detach()  # was: a DeviceError (it made a new tensor on the current device)
    assert detached.device == "strict" and cl.backend.device_of(detached._data) == "strict"
    assert not detached.requires_grad and detached.inputs == ()
    np.testing.assert_array_equal(detached.numpy(), [1.0, 2.0])


def test_a_grad_on_another_device_is_refused_when_set():
    with cl.use_device("strict"):
        t = Tensor(np.ones(2), requires_grad=True, name="w")
    with cl.use_device("cpu"):
        on_cpu = Tensor(np.ones(2))
    with pytest.raises(cl.DeviceError, match="w.grad must be on its 'strict' device.*'cpu'"):
        t.grad = on_cpu  # was: accepted, and the next backward failed adding to it
    assert t.grad is None


# -- formatting and printing -------------------------------------------------------------------
def test_a_tensor_of_shape_0_formats_as_its_number_as_in_torch():
    value = np.array(3.14159)
    t, oracle = Tensor(value), torch.tensor(value)
    for spec in (".2f", ".3e", "8.1f"):
        assert format(t, spec) == format(oracle, spec)  # was: TypeError
    assert f"{t}" == repr(t)  # no spec: the repr, as before
    with pytest.raises(TypeError):
        f"{Tensor(np.array([3.1])):.2f}"  # as torch: only shape ()


def test_the_repr_shows_an_empty_tensor_s_shape_and_a_dtype_other_than_the_defaults():
    assert repr(Tensor(np.zeros((0, 3)))) == "Tensor([], shape=(0, 3))"  # was: Tensor([])
    assert repr(Tensor(np.zeros(0))) == "Tensor([])"
    assert repr(Tensor(np.array([1.0, 2.0], np.float32))) == "Tensor([1. 2.], dtype=float32)"
    assert repr(Tensor(np.array(3))) == "Tensor(3)"
    assert repr(Tensor(np.array([np.nan, -np.inf]))) == "Tensor([ nan -inf])"
    # the rows line up under the first, as NumPy's
    assert repr(Tensor(np.arange(4.0).reshape(2, 2))) == "Tensor([[0. 1.]\n        [2. 3.]])"
    # the tour's printed line is unchanged
    assert repr(Tensor(np.array([11.65213]), requires_grad=True)) == (
        "Tensor([11.6521], requires_grad=True)"
    )


# -- backward ----------------------------------------------------------------------------------
def test_backward_of_a_comparison_or_of_no_grad_says_why_there_is_no_gradient():
    x = Tensor(np.array([1.0, -1.0]), requires_grad=True)
    with pytest.raises(cl.GraphError, match=r"does not require grad: it is bool \(no gradient"):
        (x > 0).backward(np.ones(2))  # was: "no tensor it depends on does", but x does
    with pytest.raises(cl.GraphError, match=r"it is int64 \(no gradient flows through ints"):
        cl.sum(x > 0).backward()
    with cl.no_grad():
        y = cl.sum(x * x)
    with pytest.raises(cl.GraphError, match="does not require grad.*under no_grad"):
        y.backward()


def test_a_second_backward_adds_into_grad_as_torch_with_retain_graph():
    x = Tensor(np.array([1.0, 2.0]), requires_grad=True)
    y = cl.sum(x * x * x + x)
    y.backward()
    y.backward()
    xt = torch.tensor([1.0, 2.0], dtype=torch.float64, requires_grad=True)
    yt = (xt * xt * xt + xt).sum()
    yt.backward(retain_graph=True)
    yt.backward()
    np.testing.assert_allclose(x.grad.numpy(), xt.grad.numpy())
