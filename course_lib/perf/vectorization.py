"""Auto-vectorisation measured: the same C loops built with and without SIMD instructions.

``g++ -O3 -march=native`` turns a simple loop over float arrays into vector instructions
(with AVX2, one instruction adds 8 float32s); adding ``-fno-tree-vectorize
-fno-tree-slp-vectorize`` builds the same :data:`SOURCE` with one float per instruction. The
ratio of the two times is what vectorisation buys, and it depends on what limits the loop:

* ``horner`` evaluates a polynomial at every element by Horner's rule, ``p = p * x + 1``
  repeated :data:`HORNER_STEPS` times (128 flops per 12 bytes moved). It is compute-bound:
  on arrays that stay in cache the speed-up approaches the vector width.
* ``add`` is ``c[i] = a[i] + b[i]`` (1 flop per 12 bytes). On arrays larger than the
  last-level cache both builds wait for DRAM, so vectorisation gains little.

Neither build fuses a multiply and an add into an FMA (``-ffp-contract=off``) or reorders
arithmetic, so both return NumPy's float32 results (:func:`reference`) bit for bit.
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .. import params
from ..backend import host_array
from ..errors import ParameterError
from ..kernels import native
from ..tables import Table
from .timing import interleaved_medians

HORNER_STEPS = 64  # STEPS in SOURCE
SOURCE = r"""
#define STEPS 64
#define EXPORT extern "C" __attribute__((visibility("default")))

EXPORT void add(const float* __restrict__ a, const float* __restrict__ b,
                float* __restrict__ c, long long n) {
    for (long long i = 0; i < n; ++i) c[i] = a[i] + b[i];
}

EXPORT void horner(const float* __restrict__ a, const float* __restrict__ b,
                   float* __restrict__ c, long long n) {
    for (long long i = 0; i < n; ++i) {
        float x = a[i], p = b[i];
        for (int k = 0; k < STEPS; ++k) p = p * x + 1.0f;
        c[i] = p;
    }
}
"""
#: Floating-point operations per element of each loop in :data:`SOURCE`.
FLOPS_PER_ELEMENT = {"add": 1, "horner": 2 * HORNER_STEPS}
BYTES_PER_ELEMENT = 12  # two float32 loads and one float32 store


def _flags(vectorize: bool) -> tuple[str, ...]:
    return () if vectorize else native.SCALAR_FLAGS


def library_path(vectorize: bool) -> Path:
    """The shared library of :data:`SOURCE`, built with (True) or without SIMD (cached)."""
    return native.build_library(SOURCE, "loops.cpp", native=True, extra_flags=_flags(vectorize))


@functools.lru_cache(maxsize=2)
def _library(vectorize: bool) -> ctypes.CDLL:
    return native.load_library(SOURCE, "loops.cpp", native=True, extra_flags=_flags(vectorize))


def run_loop(
    name: str, a: np.ndarray, b: np.ndarray, vectorize: bool = True, out: np.ndarray | None = None
) -> np.ndarray:
    """``out = name(a, b)``, element by element, with the build chosen by ``vectorize``.

    Parameters
    ----------
    name : {"add", "horner"}
        A loop of :data:`SOURCE`.
    a, b : numpy.ndarray
        C-contiguous float32 arrays of one shape (they may be the same array), aligned to
        4 bytes as C's ``float*`` must be (NumPy's own arrays are).
    vectorize : bool
        The ``-O3 -march=native`` build (True) or the same with SIMD turned off (False).
    out : numpy.ndarray, optional
        A writeable C-contiguous float32 array of the same shape that overlaps neither
        input (the loops declare their pointers ``__restrict__``); allocated if omitted.
    """
    _check_name(name, "run_loop")
    if out is None:
        out = np.empty(np.shape(a), np.float32)
    bind_loop(name, a, b, vectorize, out)()
    return out


def bind_loop(
    name: str, a: np.ndarray, b: np.ndarray, vectorize: bool, out: np.ndarray
) -> Callable[[], None]:
    """:func:`run_loop`'s arrays checked and its library loaded once: each call of the result
    runs the C loop and nothing else (what :func:`measure_vectorization` times)."""
    _check_name(name, "bind_loop")
    arrays = native.loop_arrays((a, b, out), f"loop {name!r}")
    if not arrays[-1].size:
        return lambda: None
    return native.bind_loop(getattr(_library(vectorize), name), arrays)


def reference(name: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The loop ``name`` computed by NumPy in float32, operation by operation as in C
    (which overflows to inf and makes NaNs silently, so NumPy warns of neither here)."""
    _check_name(name, "reference")
    a, b = (host_array(x, f"loop {name!r}").astype(np.float32, copy=False) for x in (a, b))
    with np.errstate(over="ignore", invalid="ignore"):
        if name == "add":
            return a + b
        p = b.copy()
        for _ in range(HORNER_STEPS):
            p = p * a + np.float32(1.0)
        return p


@dataclass(frozen=True)
class VectorizationTiming:
    """Median seconds of one loop over ``n`` float32 elements, scalar build and SIMD build."""

    loop: str
    n: int
    scalar_seconds: float
    vector_seconds: float

    @property
    def speedup(self) -> float:
        """How many times faster the SIMD build ran."""
        return self.scalar_seconds / self.vector_seconds

    @property
    def array_bytes(self) -> int:
        """Bytes of the three arrays the loop touches (a, b and c)."""
        return BYTES_PER_ELEMENT * self.n

    def gb_per_s(self, seconds: float) -> float:
        """Bytes moved (each array once) per second, in GB/s."""
        return self.array_bytes / seconds / 1e9

    def gflop_per_s(self, seconds: float) -> float:
        """Floating-point operations per second, in GFLOP/s."""
        return FLOPS_PER_ELEMENT[self.loop] * self.n / seconds / 1e9


def measure_vectorization(
    name: str, n: int, repeats: int = 5, seed: int = 0
) -> VectorizationTiming:
    """Time the loop ``name`` on ``n`` random float32 elements with and without SIMD.

    The inputs lie in [-0.5, 0.5] (``horner``'s polynomial stays bounded there); both builds
    write the same output array, runs interleaved after one warm-up each (both libraries
    are compiled, once per machine, when the loops are bound, before any run).
    """
    _check_name(name, "measure_vectorization")
    n = params.count(n, "measure_vectorization: n", 1)  # 0 elements: a speed-up of noise
    rng = np.random.default_rng(seed)
    a, b = (rng.uniform(-0.5, 0.5, n).astype(np.float32) for _ in range(2))
    out = np.empty(n, np.float32)
    runs = {v: bind_loop(name, a, b, v, out) for v in (False, True)}
    times = interleaved_medians(runs, repeats=repeats)
    return VectorizationTiming(name, n, times[False], times[True])


def vectorization_table(timings: Sequence[VectorizationTiming]) -> Table:
    """One row per timing: sizes, both medians, the speed-up and the rates reached."""
    rows = [
        (
            t.loop,
            f"{t.n:,}",
            f"{t.array_bytes / 2**20:,.2f}",
            f"{t.scalar_seconds * 1e3:.3f}",
            f"{t.vector_seconds * 1e3:.3f}",
            f"{t.speedup:.1f}x",
            f"{t.gflop_per_s(t.scalar_seconds):.1f} -> {t.gflop_per_s(t.vector_seconds):.1f}",
            f"{t.gb_per_s(t.scalar_seconds):.1f} -> {t.gb_per_s(t.vector_seconds):.1f}",
        )
        for t in timings
    ]
    headers = ("loop", "elements", "MiB of arrays", "scalar ms", "SIMD ms", "speed-up",
               "GFLOP/s", "GB/s")  # fmt: skip
    return Table(headers, rows)


def _check_name(name: str, what: str) -> None:
    if not isinstance(name, str) or name not in FLOPS_PER_ELEMENT:
        raise ParameterError(
            f"{what}: no loop named {name!r} in SOURCE; choose one of {list(FLOPS_PER_ELEMENT)}"
        )
