"""What the thread tests share: an op that pauses a run, and helpers that line races up."""

import threading
from concurrent.futures import ThreadPoolExecutor

from course_lib.graph import Op

WAIT = 5  # seconds an event may take: only ever reached when a test fails
MEET = 1  # seconds a barrier waits for threads the fixed code keeps out


class Hook(Op):
    """``x + 1``, calling ``fn()`` first: a place to pause a run, or to act inside one."""

    name = "hook"

    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def infer_shape(self, shape):
        return shape

    def infer_dtype(self, dtype):
        return dtype

    def compute(self, xp, x):
        self.fn()
        return x + 1


def in_threads(*fns):
    """Run each function on a thread of its own, all at once; their results, in order
    (a function's exception is raised here)."""
    with ThreadPoolExecutor(len(fns)) as pool:
        futures = [pool.submit(fn) for fn in fns]
        return [f.result(timeout=4 * WAIT) for f in futures]


def meet(barrier):
    """Wait at ``barrier`` for the other threads, or go on alone once it is broken."""
    try:
        barrier.wait(MEET)
    except threading.BrokenBarrierError:
        pass
