"""Integer ids (rows of take, classes of cross_entropy, tokens) are checked wherever
they enter: a negative or too large id is a clear OutOfRangeError, never a silent wrong pick."""

import numpy as np
import pytest

import course_lib as cl
from course_lib.graph import apply
from course_lib.models import Llama, LlamaConfig
from course_lib.ops.nn import OneHotLike

RANGE = r"id {bad} at position \({where}\) is outside \[0, {size}\)"


@pytest.mark.parametrize("bad", [-1, 3])
@pytest.mark.parametrize("optimize", [False, True])
def test_cross_entropy_rejects_a_target_outside_the_classes(bad, optimize):
    logits, targets = cl.variable("logits", (2, 3), np.float64), cl.variable("t", (2,), np.int64)
    loss = cl.cross_entropy(logits, targets)
    feed = {logits: np.zeros((2, 3)), targets: np.array([0, bad])}
    for outputs in ([loss], cl.grad(loss, [logits])):
        with pytest.raises(cl.OutOfRangeError, match=RANGE.format(bad=bad, where="1,", size=3)):
            cl.Executor(outputs, optimize=optimize).run(feed)


def test_one_hot_rejects_a_negative_class():
    targets, logits = cl.variable("t", (2,), np.int64), cl.variable("logits", (2, 3), np.float64)
    with pytest.raises(cl.OutOfRangeError, match=r"one_hot at node .*there are 3 classes: id -1"):
        cl.evaluate(apply(OneHotLike(), targets, logits), {targets: np.array([-1, 0]),
                                                          logits: np.zeros((2, 3))})  # fmt: skip


@pytest.mark.parametrize("bad", [-1, -4, 4, 10**9])
def test_take_rejects_ids_outside_the_table(bad):
    table, ids = cl.variable("table", (4, 2), np.float64), cl.variable("ids", (2, 2), np.int64)
    feed = {table: np.ones((4, 2)), ids: np.array([[0, 1], [bad, 2]])}
    with pytest.raises(cl.OutOfRangeError, match=RANGE.format(bad=bad, where="1, 0", size=4)):
        cl.evaluate(cl.take(table, ids), feed)
    with pytest.raises(cl.OutOfRangeError, match=r"take: the table has 4 rows"):
        cl.take(cl.Tensor(np.ones((4, 2)), requires_grad=True), np.array([bad]))


def test_take_gradient_checks_ids_too():
    table, ids = cl.variable("table", (4, 2), np.float64), cl.variable("ids", (2,), np.int64)
    (dtable,) = cl.grad(cl.sum(cl.take(table, ids)), [table])
    with pytest.raises(cl.OutOfRangeError, match="the table has 4 rows: id -1"):
        cl.evaluate(dtable, {ids: np.array([1, -1]), table: np.ones((4, 2))})


def test_take_rejects_float_ids_fed_to_an_untyped_variable():
    table, ids = cl.variable("table", (4, 2), np.float64), cl.variable("ids")
    with pytest.raises(cl.GraphError, match="ids must be integers.*float64"):
        cl.evaluate(cl.take(table, ids), {table: np.ones((4, 2)), ids: np.array([1.0])})


def test_take_with_repeated_empty_and_0d_ids():
    table = cl.Tensor(np.arange(8.0).reshape(4, 2), requires_grad=True)
    cl.sum(cl.take(table, np.array([1, 1, 3]))).backward()
    np.testing.assert_array_equal(table.grad.numpy(), [[0, 0], [2, 2], [0, 0], [1, 1]])
    assert cl.take(table, np.zeros((0,), np.int64)).shape == (0, 2)
    np.testing.assert_array_equal(cl.take(table, np.int64(2)).numpy(), [4.0, 5.0])


def test_forward_graph_executor_checks_token_ids():
    model = Llama(LlamaConfig.tiny(), seed=0)
    graph = model.forward_graph(1, 4)
    feed = model.feed(graph, np.zeros((1, 4), np.int64))
    feed[graph.tokens] = np.array([[1, 2, 300, 4]])  # past the feed's own check
    for optimize in (False, True):
        with pytest.raises(cl.OutOfRangeError, match=r"256 rows: id 300 at position \(0, 2\)"):
            cl.Executor([graph.logits], optimize=optimize).run(feed)
