"""The engine never changes the process's warning filters: ``warnings.catch_warnings`` swaps
a list shared by every thread (Python 3.11), so a build or optimisation in one thread while
another thread also catches warnings left the process with the first one's filter for good
(every later warning an error after constant folding, or silenced after a dtype inference).

Each test steps two threads through the interleaving that did it: the engine's call enters,
the main thread enters and leaves ``catch_warnings`` while the engine's call is still inside,
then the filters must be the ones the test started with. NumPy's ``errstate``, which the
engine uses instead, is per thread (a context variable)."""

import threading
import warnings

import numpy as np
import pytest

import course_lib as cl
from course_lib.graph import Op, apply
from course_lib.passes import fold_constants
from course_lib.passes.fusion.op import _one_dtype


class _Pause(Op):
    """Identity whose compute signals ``inside`` and then waits for ``leave``."""

    name = "pause_for_test"

    def __init__(self, inside: threading.Event, leave: threading.Event):
        super().__init__()
        self.inside, self.leave = inside, leave

    def infer_shape(self, x):
        return x

    def compute(self, xp, x):
        self.inside.set()
        assert self.leave.wait(10), "the main thread did not let the compute go on"
        return x


class _TypedPause(_Pause):
    """:class:`_Pause` with its dtype declared: building it computes nothing."""

    def infer_dtype(self, x):
        return x


def _interleave(engine_call, inside, leave):
    """Run ``engine_call`` in a thread; while its op computes, enter and leave
    ``catch_warnings`` here; return the filters left when both are done."""
    before = list(warnings.filters)
    errors = []

    def worker():
        try:
            engine_call()
        except Exception as exc:  # noqa: BLE001  (reported below)
            errors.append(exc)

    thread = threading.Thread(target=worker)
    thread.start()
    try:
        assert inside.wait(10), "the engine never computed the op"
        with warnings.catch_warnings():
            warnings.simplefilter("default")
            leave.set()
            thread.join(10)
        return before, list(warnings.filters), errors
    finally:
        leave.set()
        thread.join(10)
        warnings.filters[:] = before  # a failing run must not change the other tests


@pytest.mark.parametrize("where", ["constant folding", "dtype inference", "fusion dtype check"])
def test_the_engine_leaves_the_warning_filters_as_it_found_them(where):
    inside, leave = threading.Event(), threading.Event()
    pause = (_Pause if where == "dtype inference" else _TypedPause)(inside, leave)
    if where == "constant folding":
        node = apply(pause, cl.constant(np.ones(2)))
        call = lambda: fold_constants(node)  # noqa: E731
    elif where == "dtype inference":  # _Pause has no infer_dtype: computed on an example
        call = lambda: apply(pause, cl.variable("x", (2,), np.float32))  # noqa: E731
    else:
        x = cl.variable("x", (2,), np.float32)
        body = apply(pause, x)
        call = lambda: _one_dtype(body, [x], [np.ones(1, np.float32)])  # noqa: E731
    before, after, errors = _interleave(call, inside, leave)
    assert not errors
    assert after == before


def test_folding_still_leaves_a_node_that_overflows_to_the_run():
    big = cl.constant(np.float32(3e38))
    folded = fold_constants(big * 10.0)
    assert not folded.is_constant  # the run reports the overflow, as without optimisation
