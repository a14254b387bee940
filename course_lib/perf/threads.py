"""How many threads NumPy's work may use: one per pool by default, for a busy shared CPU.

NumPy hands matrix products to a BLAS library (OpenBLAS in the wheels) whose pool starts one
thread per core, and whose idle threads spin while they wait for work. When other programs
share the cores (a lab machine, a Binder pod, a notebook next to a test run), the pool's
threads wait for each other and for the other programs: on a shared 2-core machine a
training step of notebook 08's model took about 4× longer with two BLAS threads than with
one. The notebooks' matrices are at most a few hundred wide, small enough that one thread
loses little even on an idle machine. :func:`limit_threads` sets every pool once, for the
rest of the process; pass ``threads=os.cpu_count()`` to give them all cores back.
course_lib's CPU kernels run on BLAS's threads (``kernels/shared_pool.py``), so this one
limit holds for them too.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from .. import params
from ..errors import ParameterError

_active: list = []  # the limits not restored yet, oldest first: the newest holds
_changing = threading.Lock()  # one thread at a time sets or restores the pools


@dataclass
class ThreadLimits:
    """What :func:`limit_threads` did: the limit, and each pool's threads before it.

    Attributes
    ----------
    threads : int
        The threads each pool may now use.
    before : dict
        Pool (``"blas"``, ``"openmp"``, ``"numexpr"``) -> its threads before the limit
        (the largest, when several libraries share one kind of pool).
    """

    threads: int
    before: dict
    _controller: object = field(repr=False)
    _numexpr: int = field(repr=False)  # numexpr's threads to give back

    def restore(self) -> None:
        """Give every pool back the threads it had before (a second call does nothing).
        Limits that overlap (two threads' ``with`` blocks) end in any order: while a newer
        one holds, restoring an older one leaves the pools to it, and the pools get back
        their threads from before the first once every limit is restored."""
        with _changing:
            at = next((i for i, limit in enumerate(_active) if limit is self), None)
            if at is None:  # restored already
                return
            del _active[at]
            if at < len(_active):  # a newer limit holds: it gives back what this one found
                newer = _active[at]
                newer._controller, newer._numexpr = self._controller, self._numexpr
                return
            _blas_released()
            self._controller.restore_original_limits()
            _blas_released()
            import numexpr  # noqa: PLC0415  (loaded already: it was limited)

            numexpr.set_num_threads(self._numexpr)

    def __enter__(self) -> ThreadLimits:
        return self

    def __exit__(self, *exc_info) -> None:
        """``with limit_threads(1): ...``: the pools get their threads back, even when the
        body raises."""
        self.restore()


def limit_threads(threads: int = 1) -> ThreadLimits:
    """Let BLAS, OpenMP (through threadpoolctl) and numexpr each use ``threads`` threads.

    The limit holds for the whole process (every later NumPy call, in every thread), until
    :meth:`ThreadLimits.restore` (or the end of a ``with limit_threads(...):`` block); of
    several limits not yet restored, the newest holds.
    threadpoolctl finds the pools of the libraries loaded so far; NumPy's BLAS is loaded
    with ``course_lib``. A pool gets at most the threads its library allows (numexpr:
    ``numexpr.MAX_THREADS``, 64 unless ``NUMEXPR_MAX_THREADS`` says otherwise).

    Examples
    --------
    >>> limits = limit_threads()      # first cell of a notebook
    >>> limits.threads
    1
    """
    # imported here: neither is needed until a notebook asks
    import numexpr  # noqa: PLC0415
    from threadpoolctl import threadpool_info, threadpool_limits  # noqa: PLC0415

    threads = params.integer(threads, "limit_threads: threads")  # np.int64 too: threadpoolctl
    if threads < 1:  # takes Python ints only
        raise ParameterError(f"limit_threads: threads must be at least 1, got {threads}")
    with _changing:
        before: dict[str, int] = {}
        for pool in threadpool_info():
            api = pool["user_api"]
            before[api] = max(before.get(api, 0), pool["num_threads"])
        _blas_released()
        controller = threadpool_limits(limits=threads)
        _blas_released()
        # numexpr refuses more than MAX_THREADS (it keeps its count and returns -1): at most that
        before["numexpr"] = numexpr.set_num_threads(min(threads, numexpr.MAX_THREADS))
        limits = ThreadLimits(threads, before, controller, before["numexpr"])
        _active.append(limits)
    return limits


def _blas_released() -> None:
    """Let whichever thread comes next set a pthreads OpenBLAS's threads: threadpoolctl (from
    3.8) lets only the thread that set them last do so, and silently ignores the others (a
    limit set in a worker thread after the notebook's first cell would change nothing)."""
    import threadpoolctl  # noqa: PLC0415

    controller = getattr(threadpoolctl, "OpenBLASController", None)
    release = getattr(controller, "clear_controlling_thread", None)
    if release is not None:
        release(force=True)
