"""A fused kernel as a C++ loop compiled for this CPU (g++ -O3 -march=native) and run on
NumPy arrays: what the fused kernel costs when it runs at memory speed.

Its parts run on the pool the CPU kernels share with NumPy's BLAS (``kernels/cpu_pool.hpp``),
on as many threads as BLAS may use (``perf.limit_threads`` is the one knob), in whole blocks
of 64 floats: the same bits on any number of threads.

CPU-only by nature: the loop reads host memory, so a device array is refused with
``DeviceError`` (on a GPU the fused node runs its CUDA kernel instead)."""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable, Sequence

import numpy as np

from ... import kernels
from ...backend import host_array
from ...errors import ShapeError
from ...kernels import FusedElementwise, KernelCompileError, cpu_kernels
from .codegen import cpu_source

LOOP_MIN_SIZE = 2**16  # below this, numexpr's start-up cost is small and nothing compiles
_build_failure: list[str] = []  # why the compiler failed once: then no loop is tried again


class CompiledLoopUnavailable(UserWarning):
    """The C++ compiler failed; fused nodes run through numexpr instead (same results)."""


def loop_worthy(arrays: Sequence) -> bool:
    """Should a fused node run as a compiled loop? Large float32 arrays of one shape (no
    broadcast to materialise; a strided view, such as a column slice, is copied first: a
    pass at memory speed, where numexpr's strided evaluation was over 20x slower), aligned
    to 4 bytes (the loop reads ``float*``; ``np.frombuffer`` at an odd offset is not), and a
    C++ compiler to build the loop."""
    return (
        isinstance(arrays[0], np.ndarray)
        and arrays[0].size >= LOOP_MIN_SIZE
        and all(
            isinstance(a, np.ndarray) and a.dtype == np.float32 and a.flags.aligned for a in arrays
        )
        and len({a.shape for a in arrays}) == 1
        and kernels.emulator_available()  # the g++ the emulator uses
        and not _build_failure
    )


@functools.lru_cache(maxsize=64)
def _compiled(source: str, name: str):
    """The loop's function, its ``expf``/``tanhf``/... libmvec's SIMD ones where they link."""
    library, _ = kernels.native.load_simd_library(source, f"{name}.cpp")
    function = getattr(library, name)
    function.restype = None
    return function


def try_cpu_loop(kernel: FusedElementwise, arrays: Sequence[np.ndarray]) -> np.ndarray | None:
    """:func:`run_cpu_loop`, or None (with one warning) if the compiler fails: the caller
    then computes the same values another way."""
    try:
        return run_cpu_loop(kernel, arrays)
    except KernelCompileError as exc:
        _build_failure.append(str(exc))
        warnings.warn(
            f"fused nodes run through numexpr instead of compiled loops: {exc}",
            CompiledLoopUnavailable, stacklevel=3,
        )  # fmt: skip
        return None


def run_cpu_loop(
    kernel: FusedElementwise, arrays: Sequence[np.ndarray], out: np.ndarray | None = None
) -> np.ndarray:
    """Run ``kernel`` as one loop over float32 C-contiguous arrays of one shape.

    ``out`` (optional) receives the result, as in the lecture's programs where every
    array is allocated beforehand.
    """
    arrays = [host_array(a, f"an input of {kernel.name}'s compiled CPU loop") for a in arrays]
    if out is None:
        out = np.empty(arrays[0].shape if arrays else (), np.float32)
    bind_cpu_loop(kernel, arrays, out)()
    return out


def bind_cpu_loop(
    kernel: FusedElementwise, arrays: Sequence[np.ndarray], out: np.ndarray
) -> Callable[[], None]:
    """``kernel``'s compiled loop bound to ``arrays`` and ``out``, checked and compiled once:
    each call of the result runs the loop and nothing else (for timing arrays small enough
    that Python's per-call work would count)."""
    if len(arrays) != len(kernel.inputs):
        raise ShapeError(f"{kernel.name} takes inputs {kernel.inputs}, got {len(arrays)} arrays")
    everything = kernels.native.loop_arrays([*arrays, out], f"{kernel.name}'s compiled CPU loop")
    if not out.size:
        return lambda: None
    function = _compiled(cpu_source(kernel), kernel.name)
    return kernels.native.bind_loop(function, everything, cpu_kernels.pool_parallel_for())
