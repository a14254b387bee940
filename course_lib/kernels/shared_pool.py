"""NumPy's BLAS and the CPU kernels on one pool of threads (``kernels/cpu_pool.hpp``).

OpenBLAS, NumPy's BLAS in its wheels, keeps a pool of threads that spin for a while after
each matrix product. A kernel split over a second pool right after a product fights those
spinning threads for the cores and loses (issue 25's measurements). OpenBLAS can hand its
jobs to a function of the program instead (``openblas_set_threads_callback_function``):
:func:`connect` registers the CPU kernels' pool there, so the products' jobs and the
kernels' row ranges run on the same threads, and the kernels use as many threads as BLAS
may (threadpoolctl and :func:`course_lib.perf.limit_threads` set that count: one knob).

Where NumPy's BLAS is not a pthreads OpenBLAS with that function (MKL, Accelerate, an older
OpenBLAS), or ``COURSE_LIB_SHARED_POOL=0`` is set, nothing is registered and the kernels run
on one thread, as before. A kernel's results do not depend on the thread count: rows are
independent, and elementwise parts are whole blocks of 64 floats (OpenBLAS's products do
depend on it; docs/architecture.md, "Threads").
"""

from __future__ import annotations

import ctypes
import os
import re
from pathlib import Path

ENV = "COURSE_LIB_SHARED_POOL"
#: OpenBLAS's functions by flavour: NumPy's wheels (64-bit integers, prefixed and suffixed
#: names), then a system OpenBLAS (plain names).
FLAVOURS = (
    {"callback": "scipy_openblas_set_threads_callback_function64_",
     "threads": "scipy_openblas_get_num_threads64_", "config": "scipy_openblas_get_config64_",
     "exec": "exec_blas"},
    {"callback": "openblas_set_threads_callback_function", "threads": "openblas_get_num_threads",
     "config": "openblas_get_config", "exec": "exec_blas"},
)  # fmt: skip
#: OpenBLAS's count of its own threads (+1), a global of its thread server in both flavours.
OWN_THREADS = "blas_num_threads"


def _functions(library: ctypes.CDLL) -> dict | None:
    """The first flavour whose functions ``library`` exports, as ctypes functions, with
    ``own_threads`` (see :data:`OWN_THREADS`)."""
    for flavour in FLAVOURS:
        try:
            functions = {role: getattr(library, name) for role, name in flavour.items()}
            functions["own_threads"] = ctypes.c_int.in_dll(library, OWN_THREADS)
        except (AttributeError, ValueError):
            continue
        return functions
    return None


def numpy_openblas() -> tuple[dict | None, str]:
    """The functions of NumPy's BLAS (see :data:`FLAVOURS`) if it is a pthreads OpenBLAS that
    takes a threads callback, and what was found (the reason when there are none)."""
    import numpy as np  # noqa: PLC0415
    from threadpoolctl import threadpool_info  # noqa: PLC0415  (loaded when kernels build)

    package = Path(np.__file__).resolve().parent
    places = (package, package.parent / "numpy.libs")  # NumPy's wheels bundle it beside
    blas = [p for p in threadpool_info() if p["user_api"] == "blas"
            and any(Path(p["filepath"]).resolve().is_relative_to(d) for d in places)]  # fmt: skip
    if len(blas) != 1:
        return None, "NumPy's own BLAS library was not found (a system BLAS?)"
    info = blas[0]
    name = f"{info['internal_api']} {info.get('version')} ({info.get('threading_layer')})"
    if info["internal_api"] != "openblas" or info.get("threading_layer") != "pthreads":
        return None, f"NumPy's BLAS is {name}, not a pthreads OpenBLAS"
    functions = _functions(ctypes.CDLL(info["filepath"]))
    if functions is None:
        return None, f"NumPy's BLAS, {name}, has no threads callback"
    return functions, name


def _slots(blas: dict) -> int:
    """OpenBLAS's per-thread slots (``MAX_THREADS`` of its configuration), 0 if not said."""
    blas["config"].restype = ctypes.c_char_p
    match = re.search(rb"MAX_THREADS=(\d+)", blas["config"]() or b"")
    return int(match.group(1)) if match else 0


def connect(kernels: ctypes.CDLL) -> str:
    """Register the kernels' pool as NumPy's OpenBLAS threads callback where possible, and say
    what was done (one line, for benchmarks and notebooks). Never raises: anything unexpected
    leaves OpenBLAS as it was and the kernels on one thread."""
    if os.environ.get(ENV, "1") == "0":
        return f"one thread ({ENV}=0)"
    try:
        return _connect(kernels)
    except Exception as exc:  # noqa: BLE001  (a library we do not control: say why, go on)
        return f"one thread (the pool could not be connected: {exc})"


def _connect(kernels: ctypes.CDLL) -> str:
    blas, found = numpy_openblas()
    if blas is None:
        return f"one thread ({found})"
    slots, own = _slots(blas), blas["own_threads"]
    if 2 * own.value - 1 > slots:  # the pool's jobs need slots OpenBLAS's threads do not use
        return f"one thread (OpenBLAS has {slots} thread slots for {own.value} threads)"
    workers = min(max(own.value, os.cpu_count() or 1), slots - own.value + 1) - 1
    functions = (_address(blas[role]) for role in ("threads", "callback", "exec"))
    if kernels.pool_follow(slots, ctypes.byref(own), workers, *functions) != 0:
        return f"one thread (the system refused {workers} threads)"
    kernels.pool_blas_callback.restype = ctypes.c_void_p
    blas["callback"].restype = None
    blas["callback"](ctypes.c_void_p(kernels.pool_blas_callback()))
    return f"one pool with NumPy's BLAS, {found}"


def _address(function) -> ctypes.c_void_p:
    return ctypes.cast(function, ctypes.c_void_p)
