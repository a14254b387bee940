"""Keeping freed memory for the next run: what an executor asks of the C library's allocator.

A training step allocates and frees the same few hundred arrays every time it runs. glibc's
``malloc`` returns an array above its *mmap threshold* to the kernel when it is freed, and the
heap's free top once it exceeds the *trim threshold*, so the next step starts on fresh pages,
each one a page fault the kernel must zero-fill: on the tiny LLaMA's step (batch 16, seq 128)
about 23,500 faults, 92 MB and 0.1 s of system time, a tenth of the step, where PyTorch's
same step makes about 2,500. :func:`keep_freed_memory` raises both thresholds once per process,
so freed memory stays in the process and the next step reuses it (PyTorch's and CuPy's caching
allocators do the same for the GPU). The price: the process's memory stays near its largest
heap until it exits (the heap is given back only from its top, above :data:`TRIM_THRESHOLD`
of free memory, and one live array near the top holds everything below it); forked children
inherit the settings.

glibc only (other C libraries are left alone), and only when the user has not set glibc's own
malloc knobs (``MALLOC_MMAP_THRESHOLD_``, ``MALLOC_TRIM_THRESHOLD_``, ``glibc.malloc.*`` in
``GLIBC_TUNABLES``): those are also how to opt out.
"""

from __future__ import annotations

import ctypes
import os
import platform

#: ``mallopt`` parameters (glibc's malloc.h).
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
#: Arrays up to this size come from the heap (glibc's largest allowed value on 64-bit).
MMAP_THRESHOLD = 32 * 2**20
#: The heap keeps up to this much free memory at its top instead of returning it.
TRIM_THRESHOLD = 2**30
#: Environment variables through which a user has already chosen glibc's thresholds.
USER_SETTINGS = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")
#: In ``GLIBC_TUNABLES``, the prefix of the malloc tunables (others, e.g. rseq, do not count).
MALLOC_TUNABLES = "glibc.malloc."

_done: list[bool] = []  # the answer of the first call, for every later one


def keep_freed_memory() -> bool:
    """Raise glibc's mmap and trim thresholds once per process; whether they are now raised
    (False on another C library, or when the user set glibc's knobs)."""
    if not _done:
        _done.append(_raise_thresholds())
    return _done[0]


def _raise_thresholds() -> bool:
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    if any(name in os.environ for name in USER_SETTINGS):
        return False
    if MALLOC_TUNABLES in os.environ.get("GLIBC_TUNABLES", ""):
        return False
    mallopt = ctypes.CDLL(None).mallopt
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    # mallopt answers 1 when it took a value; setting either threshold switches off glibc's
    # own adjustment of both, so both are set, and the answer says whether both took
    took = [mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD), mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD)]
    return all(took)
