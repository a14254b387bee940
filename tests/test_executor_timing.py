"""``Executor.seconds_by_node``: each op timed inside real runs of a schedule (what
``benchmarks/llama_step.py --profile`` shows), the run left as it was; on every device
(``DEVICE_TESTS``: a GPU's ops are timed with the device synchronised)."""

from __future__ import annotations

import numpy as np
import pytest

import course_lib as cl
from course_lib.backend import to_numpy
from course_lib.errors import FeedError, GraphError, ParameterError
from course_lib.runtime.executor import Executor


def _executor():
    x = cl.variable("x", (200, 200), np.float32)
    loss = cl.sum(cl.exp(x) @ x * 0.5)
    return Executor([loss, *cl.grad(loss, [x])]), {"x": np.full((200, 200), 0.01, np.float32)}


def test_every_op_is_timed_inside_the_run_and_the_run_is_left_as_it_was():
    executor, feed = _executor()
    want = [to_numpy(v) for v in executor.run(feed)]
    steps = executor._steps
    by_node, whole = executor.seconds_by_node(feed, runs=1)
    assert {node for *_, node in steps} == set(by_node)  # every op, nothing else
    assert all(seconds >= 0 for seconds in by_node.values())
    assert 0 < sum(by_node.values()) <= whole  # the ops ran inside the timed run
    assert executor._steps is steps  # the plain schedule again: no timers left behind
    for got, expected in zip(executor.run(feed), want):
        assert np.array_equal(to_numpy(got), expected)


def test_bad_input_is_named_and_the_schedule_restored():
    executor, feed = _executor()
    steps = executor._steps
    for runs, error in ((0, ParameterError), (True, GraphError), (2.0, GraphError)):
        with pytest.raises(error, match="seconds_by_node"):
            executor.seconds_by_node(feed, runs=runs)
    with pytest.raises(FeedError):
        executor.seconds_by_node({"y": feed["x"]})  # a name the graph does not have
    assert executor._steps is steps
    by_node, _ = executor.seconds_by_node(feed, runs=2)  # and it still times
    assert len(by_node) == len(steps)


def test_families_timed_in_runs_add_up_to_the_ops_and_the_executor_s_own_work():
    from course_lib.models.compute import seconds_by_family_in_runs  # noqa: PLC0415

    executor, feed = _executor()
    families = {"products": ("matmul",), "exponentials": ("exp",)}
    totals, own = seconds_by_family_in_runs(executor, feed, families=families, runs=1)
    assert list(totals)[:2] == ["products", "exponentials"] and "other" in totals  # sum, mul
    assert all(seconds > 0 for seconds in totals.values()) and own >= 0
