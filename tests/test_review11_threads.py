"""Review 11 (threads): copies and pickles of a jitted function, whose lock cannot be copied,
one native library that several threads miss at once, and one executor run by four threads at
once; each race lined up with events or a barrier so that it happens on every run."""

import copy
import operator
import pickle
import subprocess
import sys
import threading

import numpy as np
from thread_tools import WAIT, Hook, in_threads, meet

import course_lib as cl
from course_lib.graph import apply
from course_lib.kernels import native


# -- jit: copies and pickles ------------------------------------------------------------------
def test_a_jitted_function_copies_while_another_thread_traces_it():
    tracing, copied = threading.Event(), threading.Event()

    @cl.jit(dynamic={0: [0]}, max_traces=2)
    def double(x):
        tracing.set()
        copied.wait(WAIT)  # the trace holds the function's lock meanwhile
        return x * 2.0

    def copies():
        tracing.wait(WAIT)
        try:  # old code: TypeError, cannot pickle '_thread.RLock' object
            return copy.deepcopy(double), copy.copy(double)
        finally:
            copied.set()

    traced, (deep, shallow) = in_threads(lambda: double(np.ones(3)), copies)
    np.testing.assert_array_equal(traced, [2.0, 2.0, 2.0])
    for twin in (deep, shallow):
        assert (twin.dynamic, twin.max_traces, twin.__name__) == ({0: (0,)}, 2, "double")
        np.testing.assert_array_equal(twin(np.ones(2)), [2.0, 2.0])
        assert twin.stats["traces"] == 1 and len(twin.cache) == 1  # its own traces
    assert double.stats["traces"] == 1 and double.stats["hits"] == 0


def test_a_jitted_function_pickles_as_its_function_and_settings():
    negate = cl.jit(operator.neg, optimize=False)
    negate(np.ones(3))
    loaded = pickle.loads(pickle.dumps(negate))  # old code: TypeError (its lock)
    assert loaded.optimize is False and loaded.cache == {}
    np.testing.assert_array_equal(loaded(np.arange(3.0)), [-0.0, -1.0, -2.0])


# -- native libraries -------------------------------------------------------------------------
def test_threads_missing_one_library_together_compile_it_once(tmp_path, monkeypatch):
    monkeypatch.setenv(native.CACHE_ENV, str(tmp_path))
    monkeypatch.setattr(native, "compiler", lambda: sys.executable)  # --version: an identity
    barrier = threading.Barrier(4)
    compiled = []

    def compile_(cxx, flags, unit, output, counting):
        compiled.append(output)
        meet(barrier)  # old code: every thread compiles, all four at once
        output.write_bytes(b"a library")
        return subprocess.CompletedProcess([cxx], 0, "", "")

    monkeypatch.setattr(native, "_compile", compile_)
    unit = "// review 11: one library, four threads\n"
    paths = in_threads(*[lambda: native.build_library(unit, "once.cpp")] * 4)
    assert len(compiled) == 1
    assert len(set(paths)) == 1 and paths[0].read_bytes() == b"a library"
    assert sorted(p.suffix for p in tmp_path.iterdir()) == [".sha256", ".so"]


# -- Executor ---------------------------------------------------------------------------------
def test_four_threads_in_one_run_at_once_get_their_own_results():
    barrier, on = threading.Barrier(4), threading.Event()

    def meet():
        if on.is_set():
            barrier.wait(WAIT)  # all four runs are inside the executor here

    x = cl.variable("x", (None,), np.float64)
    c = cl.constant(np.array([0.5]))
    hooked = apply(Hook(meet), x)
    outputs = [cl.sum(cl.exp(hooked * 0.5) * c), hooked * x, x]
    feeds = [np.arange(float(n)) for n in range(1, 5)]
    for optimize in (False, True):
        run = cl.Executor(outputs, optimize=optimize)
        serial = [run.run({"x": f}) for f in feeds]
        on.set()
        together = in_threads(*[lambda f=f, run=run: run.run({"x": f}) for f in feeds])
        on.clear()
        for feed, alone, out in zip(feeds, serial, together):
            for a, b in zip(alone, out):
                np.testing.assert_array_equal(a, b)
            assert out[2] is not feed and np.shares_memory(out[2], feed) is False
        assert run.last_run == {"computed": len(run._steps), "skipped": 0}
