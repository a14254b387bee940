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
on one thread, as before. Results do not depend on the thread count: rows are independent,
and elementwise parts are whole blocks of 64 floats.
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

ENV = "COURSE_LIB_SHARED_POOL"
#: OpenBLAS's functions by flavour: NumPy's wheels (64-bit integers, prefixed and suffixed
#: names), then a system OpenBLAS (plain names; its batched products stay with NumPy, whose
#: integer size this module does not know there).
FLAVOURS = (
    {"callback": "scipy_openblas_set_threads_callback_function64_",
     "threads": "scipy_openblas_get_num_threads64_", "sgemm": "scipy_cblas_sgemm64_",
     "set_threads": "scipy_openblas_set_num_threads64_"},
    {"callback": "openblas_set_threads_callback_function", "threads": "openblas_get_num_threads"},
)  # fmt: skip


def _functions(library: ctypes.CDLL) -> dict | None:
    """The first flavour whose functions ``library`` exports, as ctypes functions."""
    for flavour in FLAVOURS:
        try:
            return {role: getattr(library, name) for role, name in flavour.items()}
        except AttributeError:
            continue
    return None


def numpy_openblas() -> tuple[dict | None, str]:
    """The functions of NumPy's BLAS (see :data:`FLAVOURS`) if it is a pthreads OpenBLAS that
    takes a threads callback, and what was found (the reason when there are none)."""
    import numpy as np  # noqa: PLC0415
    from threadpoolctl import threadpool_info  # noqa: PLC0415  (loaded when kernels build)

    numpy_dir = Path(np.__file__).resolve().parent.parent
    blas = [p for p in threadpool_info() if p["user_api"] == "blas"]
    ours = [p for p in blas if Path(p["filepath"]).resolve().is_relative_to(numpy_dir)]
    chosen = (ours or blas)[:1]
    if not chosen:
        return None, "NumPy's BLAS was not found"
    info = chosen[0]
    name = f"{info['internal_api']} {info.get('version')} ({info.get('threading_layer')})"
    if info["internal_api"] != "openblas" or info.get("threading_layer") != "pthreads":
        return None, f"NumPy's BLAS is {name}, not a pthreads OpenBLAS"
    functions = _functions(ctypes.CDLL(info["filepath"]))
    if functions is None:
        return None, f"NumPy's BLAS, {name}, has no threads callback"
    return functions, name


def connect(kernels: ctypes.CDLL) -> str:
    """Register the kernels' pool as NumPy's OpenBLAS threads callback where possible (and
    hand the kernels BLAS's product, ``kernels.batched_products``), and say what was done
    (one line, for benchmarks and notebooks)."""
    kernels.batched_products = False
    if os.environ.get(ENV, "1") == "0":
        return f"one thread ({ENV}=0)"
    blas, found = numpy_openblas()
    if blas is None:
        return f"one thread ({found})"
    kernels.pool_blas_callback.restype = ctypes.c_void_p
    blas["callback"].restype = None
    blas["callback"](ctypes.c_void_p(kernels.pool_blas_callback()))
    kernels.pool_follow(_address(blas["threads"]))
    kernels.batched_products = "sgemm" in blas
    if kernels.batched_products:
        kernels.use_blas(_address(blas["sgemm"]), _address(blas["set_threads"]))
    return f"one pool with NumPy's BLAS, {found}"


def _address(function) -> ctypes.c_void_p:
    return ctypes.cast(function, ctypes.c_void_p)
