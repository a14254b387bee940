"""What students met using the notebooks as students do (out of order, cells run again): each
mistake gets an error that says what happened and what to do, or just works."""

import sys

import numpy as np
import pytest

import course_lib as cl
from course_lib import kernels as K
from course_lib.graph import Node
from course_lib.kernels import gpu, launch, native
from course_lib.models import cosine_schedule


def test_sum_n_takes_one_list_like_the_lectures_sum():
    """``sum(node_to_grad[i])`` in the pseudocode: ``cl.sum_n(partials)`` returned the list."""
    c = cl.constant(1.0)
    for terms in ([c, c], (c, c, c)):
        total = cl.sum_n(terms)
        assert isinstance(total, Node) and cl.evaluate(total) == len(terms)
    assert cl.sum_n([c]) is c and cl.evaluate(cl.sum_n(c, c)) == 2.0
    with pytest.raises(cl.GraphError, match="sum_n: nothing to add"):
        cl.sum_n([])


def test_a_variable_made_again_by_a_rerun_cell_is_named_as_such():
    """The old message said the outputs do not use 'x', then listed x among those expected."""
    w, x = cl.variable("w", shape=()), cl.variable("x", shape=())
    run = cl.Executor(w * x)
    x_again = cl.variable("x", shape=())  # the cell defining x was run again
    again = r"another variable named 'x' than the one .* run again\?.* feed by name \({'x'"
    with pytest.raises(cl.FeedError, match=again):
        run.run({w: 2.0, x_again: 3.0})
    with pytest.raises(cl.FeedError, match=again):  # it said "missing feed for variable(s) x"
        run.run({w: 2.0, x_again: 3.0}, allow_unused=True)
    assert run.run({w: 2.0, "x": 3.0}) == 6.0
    with pytest.raises(cl.FeedError, match="missing feed for variable\\(s\\) x"):
        run.run({w: 2.0})


def test_a_feed_the_tangent_does_not_use_points_to_allow_unused():
    """jvp(3x) is 3·ẋ, a constant: unlike grad's (whose seed ones_like(3x) keeps x), it does
    not depend on x, so the function's feed names a variable it does not use."""
    x = cl.variable("x", shape=())
    tangent = cl.jvp(3 * x, {x: 1.0})
    with pytest.raises(cl.FeedError, match="expected nothing .*pass allow_unused=True"):
        cl.evaluate(tangent, {x: 2.0})
    assert cl.evaluate(tangent, {x: 2.0}, allow_unused=True) == 3.0
    assert cl.evaluate(cl.grad(3 * x, x), {x: 2.0}) == 3.0


def test_a_gpu_launch_without_a_gpu_is_a_clear_device_error(monkeypatch):
    """It was CuPy's CUDARuntimeError (cudaErrorInsufficientDriver) where CuPy has no GPU."""
    monkeypatch.setattr(gpu, "gpu_available", lambda: False)
    monkeypatch.setitem(sys.modules, "cupy", None)  # importing CuPy now fails
    launch._xp.cache_clear()  # the check is made once per process: make it again here
    a = np.ones(4, np.float32)
    with pytest.raises(cl.DeviceError, match="needs CuPy and an NVIDIA GPU.*mode='emulator'"):
        K.vector_add(a, a, mode="gpu")


def test_the_c_loops_call_a_wrong_dtype_a_type_error():
    a = np.ones(8, np.float32)
    for bad in (np.ones(8), np.ones(16, np.float32)[::2]):
        with pytest.raises(cl.GraphError, match=r"loop 'add' runs on C-contiguous float32"):
            native.loop_arrays([a, bad, a.copy()], "loop 'add'")
    with pytest.raises(cl.ShapeError, match=r"one shape .*\[\(8,\), \(9,\), \(8,\)\]"):
        native.loop_arrays([a, np.ones(9, np.float32), a.copy()], "loop 'add'")


def test_a_warmup_longer_than_the_schedule_is_refused():
    with pytest.raises(cl.ParameterError, match="warmup=20 is longer than steps=10"):
        cosine_schedule(1.0, steps=10, warmup=20)
    assert cosine_schedule(1.0, steps=10, warmup=10)(9) == 1.0


def test_backward_of_many_numbers_needs_a_gradient():
    """It seeded with ones; PyTorch refuses: a gradient is implied only for one number."""
    t = cl.Tensor(np.arange(3.0), requires_grad=True)
    with pytest.raises(cl.GraphError, match=r"shape \(3,\).*backward\(gradient="):
        (t * 2.0).backward()
    assert t.grad is None
    (t * 2.0).backward(gradient=np.ones(3))
    np.testing.assert_array_equal(t.grad.numpy(), [2.0, 2.0, 2.0])
    one = cl.Tensor(np.array([2.0]), requires_grad=True)  # one number (notebook 00's tour)
    (one * one).backward()
    np.testing.assert_array_equal(one.grad.numpy(), [4.0])
