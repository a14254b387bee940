"""Build the kernels for a real GPU with CuPy's ``RawModule`` (cached per source text)."""

from __future__ import annotations

import functools
import statistics

from ..backend import gpu_available
from .errors import KernelError
from .sources import read_source


def _cupy():
    if not gpu_available():
        raise KernelError(
            "running a kernel on the GPU needs CuPy and an NVIDIA GPU; without one, use "
            "mode='emulator' (the same CUDA source, run on the CPU)"
        )
    import cupy  # noqa: PLC0415

    return cupy


@functools.lru_cache(maxsize=64)
def compile_module(source: str, filename: str = "module.cu", contract: bool = True):
    """``cupy.RawModule`` for CUDA C ``source`` (CuPy compiles with NVRTC and caches on disk).
    ``contract=False`` forbids fusing ``a * b + c`` into one multiply-add (rounded once), so
    each operation rounds as it does alone in CuPy's one-op kernels, and in NumPy except for
    subnormal floats: CuPy adds ``-ftz=true`` to every kernel it builds, flushing them to 0."""
    options = ("--std=c++17",) if contract else ("--std=c++17", "--fmad=false")
    return _cupy().RawModule(code=source, options=options)


def load_module(filename: str):
    """``cupy.RawModule`` of a packaged kernel file, e.g. ``load_module("softmax.cu")``."""
    return compile_module(read_source(filename), filename)


def median_ms(fn, repeats: int = 20, warmup: int = 3, calls: int = 1) -> float:
    """Median GPU time of ``fn()`` in milliseconds, measured with CUDA events around ``calls``
    back-to-back calls (divided by ``calls``). With inputs already on the device and kernels
    longer than a launch's host time, the GPU never waits for the host: the events time the
    kernels only."""
    cupy = _cupy()
    for _ in range(warmup):
        fn()
    cupy.cuda.Device().synchronize()
    times = []
    for _ in range(repeats):
        start, end = cupy.cuda.Event(), cupy.cuda.Event()
        start.record()
        for _ in range(calls):
            fn()
        end.record()
        end.synchronize()
        times.append(cupy.cuda.get_elapsed_time(start, end) / calls)
    return statistics.median(times)
