"""Review 10 (memory accounting, deep pickles): ``peak_bytes`` counts a view once on the strict
device too; pickles of gradient graphs grow linearly with the graph, not with its square;
forked children's pickles do not collide, and two threads loading one node build it once."""

import io
import multiprocessing
import pickle
import threading

import numpy as np
import pytest

import course_lib as cl
from course_lib import graph


def test_peak_bytes_on_the_strict_device_counts_a_view_in_the_array_it_looks_into():
    x = cl.variable("x", (100, 100), np.float64)
    with cl.use_device("strict"):
        transposed = cl.Executor(cl.transpose(x))  # a view of the fed array: nothing more
        transposed.run({x: np.ones((100, 100))})
        assert transposed.peak_bytes == 80_000  # was 160_000: each view counted its base again
        y = x * 2.0
        doubled = cl.Executor([cl.transpose(y), cl.transpose(y)[0]])  # views of a freed y
        doubled.run({x: np.ones((100, 100))})
        assert doubled.peak_bytes == 2 * 80_000 + 8  # x, y and the constant, as on the host


def _tanh_chain(depth: int):
    x = cl.variable("x", (2, 4), np.float64)
    weights = [cl.variable(f"W{k}", (4, 4), np.float64) for k in range(depth)]
    h = x
    for w in weights:
        h = cl.tanh(h @ w)
    loss = cl.mean(h)
    return [loss, *cl.grad(loss, weights)], weights


def test_a_gradient_graph_pickles_each_node_once():
    outs, weights = _tanh_chain(200)
    nodes = len(graph.topological_order(outs))
    data = pickle.dumps(outs)
    assert len(data) < 200 * nodes  # was about 2,000 bytes a node: ancestors written again
    back = pickle.loads(data)
    assert len(graph.topological_order(back)) == nodes
    rng = np.random.default_rng(0)
    feed = {"x": rng.standard_normal((2, 4))}
    feed |= {w.name: rng.standard_normal((4, 4)) / 2 for w in weights}
    for mine, theirs in zip(cl.evaluate(outs, feed), cl.evaluate(back, feed)):
        np.testing.assert_array_equal(mine, theirs)


def test_a_deep_pickle_after_a_pickler_still_open():
    outs, _ = _tanh_chain(400)
    kept = pickle.Pickler(io.BytesIO())
    kept.dump(outs[1])
    data = pickle.dumps(outs[1])  # its nodes were written by the other pickler, not this one
    assert len(graph.topological_order(pickle.loads(data))) == len(
        graph.topological_order(outs[1]))
    kept.dump(outs[2])  # and the open pickler goes on
    kept.clear_memo()


def _built_in_a_child(k: int, conn) -> None:
    x = cl.variable("x", (3,), np.float64)
    conn.send(pickle.dumps(x * 1.0 if k == 1 else cl.exp(x) + 2.0))
    conn.close()


@pytest.mark.skipif("fork" not in multiprocessing.get_all_start_methods(), reason="no fork")
def test_pickles_of_two_forked_children_do_not_share_nodes():
    context = multiprocessing.get_context("fork")
    data = []
    for k in (1, 2):  # one after the other: both number their new nodes alike
        receive, send = context.Pipe(duplex=False)
        child = context.Process(target=_built_in_a_child, args=(k, send))
        child.start()
        data.append(receive.recv())
        child.join()
    first, second = (pickle.loads(d) for d in data)
    np.testing.assert_array_equal(cl.evaluate(first, {"x": np.ones(3)}), 1.0)
    # was 2.0: exp(x) loaded as the first child's constant 1.0, which had the same seq
    np.testing.assert_allclose(cl.evaluate(second, {"x": np.ones(3)}), np.e + 2.0)


def test_two_threads_loading_one_node_build_it_once(monkeypatch):
    x = cl.variable("x", (3,), np.float64)
    data = pickle.dumps(cl.exp(x))
    both_looking = threading.Barrier(2)

    class Slow(type(graph._unpickled)):
        def get(self, key, default=None):
            found = super().get(key, default)
            try:  # both threads have looked before either builds the node (unless one waits)
                both_looking.wait(timeout=0.5)
            except threading.BrokenBarrierError:
                pass
            return found

    monkeypatch.setattr(graph, "_unpickled", Slow())
    loaded = [None, None]

    def load(k):
        loaded[k] = pickle.loads(data)

    threads = [threading.Thread(target=load, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert loaded[0] is loaded[1]
    assert loaded[0].inputs[0] is loaded[1].inputs[0]
