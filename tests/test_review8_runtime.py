"""Runtime review, round 8: the executor's feed and its record of a run, and eager tensors'
recording (per thread, inside ``no_grad``, through a seed), their ``requires_grad`` and
their conversions to one number.

An array passed as the whole feed is refused as "not a dict" (it was NumPy's truth-value
error); a missing feed names the variable's shape and dtype; ``last_run`` exists before a
run and, like ``peak_bytes``, describes a run that raised, not the one before it; a
``no_grad`` block in one thread leaves another thread's tensors recording; ``create_graph``
and a seed tensor's graph survive ``no_grad`` and the seed; a computed tensor's
``requires_grad`` cannot change (gradients flowed through it regardless); ``float``,
``int``, ``bool``, ``item`` and ``len`` of a tensor that is not one number (or has no
length) name the tensor and its shape."""

import threading

import numpy as np
import pytest

import course_lib as cl
from course_lib.errors import FeedError, GraphError, OutOfRangeError, ShapeError
from course_lib.runtime import Tensor
from course_lib.runtime.executor import Executor


# -- the executor's feed -----------------------------------------------------------------------
def test_an_array_given_as_the_whole_feed_is_refused_as_not_a_dict():
    x = cl.variable("x", (3,), np.float64)
    for feed in (np.ones(3), np.array(0.0)):
        with pytest.raises(FeedError, match=r"takes a dict.*got ndarray.*run\(\{'x': array\}\)"):
            Executor(x * 2.0).run(feed)
    with pytest.raises(FeedError, match="takes a dict"):
        cl.evaluate(x * 2.0, np.ones(3))
    with pytest.raises(FeedError, match="takes a dict"):  # not taken as "no feed"
        Executor(cl.constant(np.ones(2)) * 2.0).run([])
    np.testing.assert_array_equal(Executor(cl.constant(np.ones(2)) * 2.0).run(), [2.0, 2.0])


def test_a_missing_feed_names_the_variables_shape_and_dtype():
    x = cl.variable("x", (None, 3), np.float32)
    y = cl.variable("y")
    with pytest.raises(FeedError, match=r"x \(shape \(None, 3\), float32\).*y \(any shape"):
        Executor(x * y).run({})
    with pytest.raises(FeedError, match=r"missing feed for variable\(s\) y \(any shape"):
        Executor(x * y).run({x: np.ones((2, 3), np.float32)})


# -- what the executor says of its last run -------------------------------------------------------
def _lookup():
    table, ids = cl.variable("table", (None,), np.float64), cl.variable("ids", (None,), np.int64)
    return table, ids, cl.sum(cl.take(cl.exp(table), ids) * 2.0)


def test_last_run_exists_before_a_run():
    _, _, out = _lookup()
    run = Executor(out)
    assert run.last_run == {"computed": 0, "skipped": 0} and run.peak_bytes == 0


def test_a_run_that_raises_is_the_last_run_and_the_next_run_is_whole():
    table, ids, out = _lookup()
    run = Executor(out)
    big = {table: np.ones(100_000), ids: np.arange(3)}
    run.run(big)
    assert run.last_run == {"computed": 4, "skipped": 0} and run.peak_bytes >= 1_600_000
    with pytest.raises(OutOfRangeError, match="take"):
        run.run({table: np.ones(4), ids: np.array([0, 9])})
    # exp ran; take failed: nothing of the 100,000-row run is reported as this run's
    assert run.last_run == {"computed": 1, "skipped": 0, "failed": "take(exp(table), ids)"}
    assert run.peak_bytes < 1000
    assert np.isclose(run.run(big), 6.0 * np.e)
    assert run.last_run == {"computed": 4, "skipped": 0}


# -- eager recording ---------------------------------------------------------------------------
def test_no_grad_in_another_thread_leaves_this_threads_tensors_recording():
    entered, leave = threading.Event(), threading.Event()

    def other():
        with cl.no_grad():
            entered.set()
            leave.wait(5)

    thread = threading.Thread(target=other)
    thread.start()
    try:
        assert entered.wait(5)
        x = Tensor(np.array([1.0, 2.0]), requires_grad=True)
        loss = cl.sum(x * x)  # computed while the other thread is inside no_grad
    finally:
        leave.set()
        thread.join()
    assert loss.requires_grad
    loss.backward()
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, 4.0])


def test_create_graph_gives_differentiable_gradients_inside_no_grad_too():
    x = Tensor(np.array(0.7), requires_grad=True)
    y = cl.sin(x) * x
    with cl.no_grad():
        y.backward(create_graph=True)
        assert x.grad.requires_grad
        assert not (cl.exp(x) * 2.0).requires_grad
    first = x.grad
    x.zero_grad()
    first.backward()
    assert np.isclose(x.grad.item(), 2 * np.cos(0.7) - 0.7 * np.sin(0.7))


def test_a_seed_tensor_keeps_its_graph_with_create_graph():
    """The double-backward trick: J^T v as a function of v gives J v back."""
    x = Tensor(np.array([1.0, 2.0, 3.0]), requires_grad=True)
    v = Tensor(np.array([1.0, -1.0, 0.5]), requires_grad=True)
    (x * x).backward(gradient=v, create_graph=True)  # x.grad = 2 x v
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, -4.0, 3.0])
    assert x.grad.requires_grad
    cl.sum(x.grad).backward()
    np.testing.assert_array_equal(v.grad.numpy(), [2.0, 4.0, 6.0])  # d(sum 2 x v)/dv = 2x


def test_requires_grad_of_a_computed_tensor_cannot_change():
    x = Tensor(np.array([1.0, 2.0]), requires_grad=True)
    y = x * 2.0
    with pytest.raises(GraphError, match=r"requires_grad of .*computed.*detach\(\)"):
        y.requires_grad = False  # gradients would still flow through y into x
    assert y.requires_grad
    y.requires_grad = True  # already so: nothing changes
    cl.sum(y.detach() * x).backward()  # the way the message gives
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, 4.0])
    with cl.no_grad():
        z = x * 5.0  # a leaf: not recorded
    z.requires_grad = True
    cl.sum(z * z).backward()
    np.testing.assert_array_equal(z.grad.numpy(), [10.0, 20.0])


# -- a tensor as one number --------------------------------------------------------------------
@pytest.mark.parametrize(("convert", "error", "builtin"), [
    (float, GraphError, TypeError), (int, GraphError, TypeError),
    (bool, ShapeError, ValueError), (lambda t: t.item(), ShapeError, ValueError),
])  # fmt: skip
def test_a_tensor_that_is_not_one_number_is_named_with_its_shape(convert, error, builtin):
    t = Tensor(np.ones((2, 3)), requires_grad=True, name="w")
    with pytest.raises(error, match=r"tensor w .*shape \(2, 3\)") as caught:
        convert(t)
    assert isinstance(caught.value, builtin)
    assert convert(Tensor(np.array(3.0), name="s")) in (3.0, 3, True)


def test_len_of_a_0d_tensor_is_named_with_its_shape():
    with pytest.raises(GraphError, match=r"len\(\) of tensor s: .*shape \(\)"):
        len(Tensor(np.array(3.0), name="s"))
    assert len(Tensor(np.ones((4, 2)))) == 4


def test_grad_with_respect_to_a_tensor_that_does_not_require_grad_is_refused():
    """Eager ops on such a tensor record nothing, so its gradient came back as zeros."""
    t = cl.Tensor(np.ones(3))
    with pytest.raises(cl.GraphError, match="does not require grad, so the eager ops on it"):
        cl.grad(cl.sum(t * t), t)
    u = cl.Tensor(np.ones(3), requires_grad=True)
    np.testing.assert_array_equal(cl.grad(cl.sum(u * u), u).numpy(), [2.0, 2.0, 2.0])


@pytest.mark.parametrize("make", [lambda: cl.Tensor(np.arange(2.0)),
                                  lambda: cl.variable("x", (2,))])  # fmt: skip
def test_indexing_with_a_mask_or_a_node_is_a_course_lib_error(make):
    """Both were Python's TypeError, naming neither the op nor the mask's shape."""
    t = make()
    with pytest.raises(GraphError, match=r"boolean-mask indexing \(a mask of shape \(2,\)\)"):
        t[np.array([True, False])]
    with pytest.raises(GraphError, match="getitem: indexing with the node"):
        t[cl.variable("i", (), np.int64)]
