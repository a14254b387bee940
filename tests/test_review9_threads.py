"""Threads and reentrancy: one executor, jitted function, tensor or thread limit used by
several threads at once (notebook callbacks, concurrent.futures), each race lined up with
events or a barrier so that it happens on every run."""

import threading

import numexpr
import numpy as np
import pytest
from thread_tools import WAIT, Hook, in_threads, meet

import course_lib as cl
from conftest import pool_threads
from course_lib import backend
from course_lib.errors import NumericError
from course_lib.graph import apply
from course_lib.ops.elementwise import Add
from course_lib.perf import limit_threads
from course_lib.runtime import eager


# -- Executor ---------------------------------------------------------------------------------
def test_seconds_by_node_leaves_a_run_of_another_thread_untimed(monkeypatch):
    timing_inside, other_done = threading.Event(), threading.Event()
    timer = threading.local()

    def pause_the_timed_run():
        if getattr(timer, "on", False) and not timing_inside.is_set():
            timing_inside.set()
            other_done.wait(WAIT)

    x = cl.variable("x", (3,), np.float64)
    run = cl.Executor(apply(Hook(pause_the_timed_run), x))
    synchronized = []  # the threads the timers synchronised the device in
    monkeypatch.setattr(backend, "synchronize", lambda: synchronized.append(threading.get_ident()))

    def timing():
        timer.on = True
        return run.seconds_by_node({"x": np.zeros(3)}, runs=1)

    def other():
        timing_inside.wait(WAIT)
        try:
            return run.run({"x": np.arange(3.0)}), threading.get_ident()
        finally:
            other_done.set()

    (seconds, _), (value, other_thread) = in_threads(timing, other)
    np.testing.assert_array_equal(value, [1.0, 2.0, 3.0])
    assert list(seconds) == [run.outputs[0]]
    assert other_thread not in synchronized  # its run was not timed, nor added to the times


def test_a_run_failing_while_another_thread_times_raises_its_own_error():
    started, timing_inside, failed = threading.Event(), threading.Event(), threading.Event()
    role = threading.local()

    def hook():
        if getattr(role, "name", "") == "failing":  # started on the plain steps: wait
            started.set()
            timing_inside.wait(WAIT)
        elif getattr(role, "name", "") == "timing" and not timing_inside.is_set():
            timing_inside.set()  # the timed steps are in place: let the other run fail
            failed.wait(WAIT)

    def boom():
        if getattr(role, "name", "") == "failing":
            raise NumericError("boom")

    x = cl.variable("x", (3,), np.float64)
    run = cl.Executor(apply(Hook(boom), apply(Hook(hook), x)))

    def timing():
        started.wait(WAIT)
        role.name = "timing"
        return run.seconds_by_node({"x": np.zeros(3)}, runs=1)

    def failing():
        role.name = "failing"
        try:
            with pytest.raises(NumericError, match="boom") as info:
                run.run({"x": np.zeros(3)})
            return info.value
        finally:
            failed.set()

    _, error = in_threads(timing, failing)
    assert "hook" in str(error)


def _cond_graph(hook):
    """``cond(p, 5 ops on x, 1 op on x)`` whose predicate passes through ``hook`` first."""
    p = cl.variable("p", (), np.float64)
    x = cl.variable("x", (3,), np.float64)
    q = apply(Hook(hook), p) > 1.0

    def long(v):
        for _ in range(5):
            v = cl.sin(v)
        return v

    return cl.Executor(cl.cond(q, long, lambda v: v * 2.0, x))


def _alone(pred: float) -> dict:
    """``last_run`` of a run of :func:`_cond_graph` with predicate ``pred``, alone."""
    run = _cond_graph(lambda: None)
    run.run({"p": pred, "x": np.ones(3)})
    return run.last_run


def test_a_run_inside_an_op_of_the_same_executor_keeps_the_outer_count():
    inner = []

    def run_again():  # once: a callback that evaluates the same graph for another input
        if not inner:
            inner.append(None)
            inner[0] = run.run({"p": 5.0, "x": np.ones(3)})

    run = _cond_graph(run_again)
    out = run.run({"p": 0.0, "x": np.ones(3)})
    np.testing.assert_allclose(out, 2.0)
    np.testing.assert_allclose(inner[0], np.sin(np.sin(np.sin(np.sin(np.sin(1.0))))))
    assert _alone(0.0) != _alone(5.0)
    assert run.last_run == _alone(0.0)  # the outer run recorded last: its own counts


def test_concurrent_cond_runs_each_count_their_own_skipped_ops():
    paused, other_done = threading.Event(), threading.Event()
    role = threading.local()

    def hook():
        if getattr(role, "pause", False):
            paused.set()
            other_done.wait(WAIT)

    run = _cond_graph(hook)

    def last():
        role.pause = True
        return run.run({"p": 0.0, "x": np.ones(3)}), run.last_run

    def first():
        paused.wait(WAIT)
        try:
            return run.run({"p": 5.0, "x": np.ones(3)})
        finally:
            other_done.set()

    (out, counts), other = in_threads(last, first)
    np.testing.assert_allclose(out, 2.0)
    np.testing.assert_allclose(other, np.sin(np.sin(np.sin(np.sin(np.sin(1.0))))))
    assert counts == _alone(0.0)  # the run that finished last, all of it


# -- jit --------------------------------------------------------------------------------------
def test_jit_traces_a_guard_once_when_two_threads_miss_it_together():
    barrier = threading.Barrier(2)

    @cl.jit
    def double(x):
        meet(barrier)  # a trace waits here for the other thread's (old code: both trace)
        return x * 2.0

    x = np.arange(3.0)
    results = in_threads(lambda: double(x), lambda: double(x))
    for result in results:
        np.testing.assert_array_equal(result, 2 * x)
    assert double.stats["traces"] == 1 and double.stats["hits"] == 1
    assert len(double.cache) == 1


def test_jit_keeps_max_traces_when_two_threads_miss_together():
    barrier = threading.Barrier(2)

    @cl.jit(max_traces=1)
    def double(x):
        meet(barrier)
        return x * 2.0

    results = in_threads(lambda: double(np.ones(2)), lambda: double(np.ones(3)))
    assert [r.tolist() for r in results] == [[2.0, 2.0], [2.0, 2.0, 2.0]]
    assert len(double.cache) == 1
    assert double.stats["traces"] == 1 and double.stats["eager"] == 1


# -- eager ------------------------------------------------------------------------------------
def test_backward_in_two_threads_adds_both_gradients(monkeypatch):
    w = cl.Tensor(np.ones(3), requires_grad=True)
    w.grad = cl.Tensor(np.zeros(3))
    before = w.grad._data
    barrier = threading.Barrier(2)
    add = Add.compute

    def compute(self, xp, a, b):
        if a is before:  # both threads adding into the same old .grad (old code)
            meet(barrier)
        return add(self, xp, a, b)

    monkeypatch.setattr(Add, "compute", compute)

    def step():
        cl.sum(w * 3.0).backward()

    in_threads(step, step)
    np.testing.assert_array_equal(w.grad.numpy(), [6.0, 6.0, 6.0])


class _Collector:
    """A stand-in for the ``gc`` module: a flag, and a place to interleave two threads."""

    def __init__(self, on_check=None, on_disable=None):
        self.enabled = True
        self.on_check, self.on_disable = on_check, on_disable

    def isenabled(self):
        enabled = self.enabled
        if self.on_check:
            self.on_check()
        return enabled

    def disable(self):
        if self.on_disable:
            self.on_disable()
        self.enabled = False

    def enable(self):
        self.enabled = True


def test_overlapping_backward_passes_leave_the_collector_enabled(monkeypatch):
    second = threading.local()
    second_checked, first_left = threading.Event(), threading.Event()

    def checked():
        if getattr(second, "is_it", False):
            second_checked.set()

    def disabling():  # the second pass disables only after the first has ended (old code)
        if getattr(second, "is_it", False):
            first_left.wait(WAIT)

    collector = _Collector(checked, disabling)
    monkeypatch.setattr(eager, "gc", collector)

    def first():
        with eager._cyclic_gc_paused():
            second_checked.wait(WAIT)
        first_left.set()

    def later():
        second.is_it = True
        with eager._cyclic_gc_paused():
            second_checked.set()
            assert not collector.enabled

    in_threads(first, later)
    assert collector.enabled


# -- limit_threads ----------------------------------------------------------------------------
def test_limits_of_two_threads_ending_out_of_order(two_threads_each):
    first_in, second_in, first_out = threading.Event(), threading.Event(), threading.Event()

    def first():
        with limit_threads(3):
            first_in.set()
            second_in.wait(WAIT)
        first_out.set()

    def second():
        first_in.wait(WAIT)
        with limit_threads(1):
            second_in.set()
            first_out.wait(WAIT)
            return pool_threads()  # the first limit ended, this one has not

    _, inside = in_threads(first, second)
    assert all(counts == {1} for counts in inside.values()), inside
    assert pool_threads() == two_threads_each  # old code: left at the first limit's 3


def test_restoring_a_limit_twice_leaves_a_later_limit_alone(two_threads_each):
    first = limit_threads(1)
    first.restore()
    second = limit_threads(3)
    try:
        first.restore()  # old code: the pools went back to 2
        assert numexpr.get_num_threads() == 3
    finally:
        second.restore()
    assert pool_threads() == two_threads_each


def test_limit_threads_in_a_worker_thread_limits_blas(two_threads_each):
    def worker():  # the main thread set BLAS's threads last (the fixture)
        with limit_threads(1) as limits:
            return limits.threads, pool_threads()

    ((threads, inside),) = in_threads(worker)
    assert threads == 1 and inside["blas"] == {1}  # old code: threadpoolctl ignored it
    assert pool_threads() == two_threads_each
