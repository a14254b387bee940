"""The two ceilings of a roofline, measured on this machine.

* Memory bandwidth: copy a large array (bigger than the caches); bytes read + written
  divided by the *best* time.
* Compute: a float32 matrix product through BLAS, ``2·n³`` FLOPs over the *best* time. It
  is what NumPy's BLAS reaches, not the processor's peak (every core's vector units busy
  every cycle): a kernel that beats BLAS can sit above it, and most kernels have a lower
  ceiling of their own.

Both take the best time: a ceiling is what the machine can do, and on a shared machine a
copy or a BLAS call is often delayed (a median copy time let kernels sit above the roof).

Both are the CPU's, whatever course_lib's current device: they run NumPy on host memory.

Attainable FLOP/s at arithmetic intensity AI (FLOPs per byte) is
``min(peak FLOP/s, AI × bandwidth)``; the two meet at the ridge point.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import params
from ..errors import GraphError, ParameterError
from .timing import best_seconds


@dataclass(frozen=True)
class Roofline:
    """Measured ceilings: ``bandwidth`` in bytes/s and ``peak_flops`` in FLOP/s (the rate of a
    BLAS matmul when measured, not the hardware's peak)."""

    bandwidth: float
    peak_flops: float

    def __post_init__(self):
        for ceiling in ("bandwidth", "peak_flops"):
            params.real(getattr(self, ceiling), f"Roofline: {ceiling}", positive=True)

    @property
    def ridge(self) -> float:
        """The intensity (FLOPs/byte) where memory-bound turns into compute-bound."""
        return self.peak_flops / self.bandwidth

    def attainable(self, intensity):
        """``min(peak, intensity × bandwidth)`` in FLOP/s (numbers or arrays of intensities,
        each at least 0 FLOPs per byte), computed in float64 (integers cannot wrap around)."""
        intensity = params.numeric_array(np.asarray(intensity), "Roofline.attainable: intensity")
        if intensity.dtype == np.bool_:
            raise GraphError("Roofline.attainable: intensity must be FLOPs per byte (numbers), "
                             "not bools")  # fmt: skip
        intensity = intensity.astype(np.float64)
        if not (intensity >= 0).all():
            bad = intensity[~(intensity >= 0)].flat[0]
            raise ParameterError(f"Roofline.attainable: an arithmetic intensity must be FLOPs "
                                 f"per byte >= 0, got {float(bad)!r}")  # fmt: skip
        return np.minimum(self.peak_flops, intensity * self.bandwidth)

    def describe(self) -> str:
        return (
            f"bandwidth {self.bandwidth / 1e9:.1f} GB/s, matmul {self.peak_flops / 1e9:.1f} "
            f"GFLOP/s (measured BLAS, not peak), ridge at {self.ridge:.1f} FLOPs/byte"
        )


def measure_bandwidth(nbytes: int = 256 * 2**20, repeats: int = 7) -> float:
    """Bytes per second of a large copy (each byte read once and written once), at its best
    time of ``repeats``."""
    if params.integer(nbytes, "measure_bandwidth: nbytes") < 8:
        raise ParameterError(f"measure_bandwidth needs at least 8 bytes, got {nbytes}")
    src = np.ones(nbytes // 8, dtype=np.float64)
    dst = np.empty_like(src)
    seconds = best_seconds(lambda: np.copyto(dst, src), repeats=repeats)
    return _rate(2 * src.nbytes, seconds, f"measure_bandwidth: a copy of {src.nbytes} bytes")


def measure_matmul_rate(n: int = 1024, repeats: int = 5) -> float:
    """FLOP/s of an ``n × n`` float32 matrix product (``2·n³`` FLOPs, best of ``repeats``)."""
    n = params.integer(n, "measure_matmul_rate: n")  # a Python int: n**3 cannot wrap around
    if n < 1:
        raise ParameterError(f"measure_matmul_rate needs n >= 1, got {n}")
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((2, n, n), dtype=np.float32)
    out = np.empty((n, n), dtype=np.float32)
    seconds = best_seconds(lambda: np.matmul(a, b, out=out), repeats=repeats)
    return _rate(2 * n**3, seconds, f"measure_matmul_rate: a {n} x {n} matmul")


def measure_roofline(nbytes: int = 256 * 2**20, n: int = 1024, repeats: int = 5) -> Roofline:
    """Both ceilings of this machine (smaller ``nbytes`` and ``n`` measure faster)."""
    return Roofline(measure_bandwidth(nbytes, repeats), measure_matmul_rate(n, repeats))


def _rate(amount: int, seconds: float, what: str) -> float:
    """``amount`` per second; a ParameterError when the clock saw no time pass (a rate of
    inf, or a ZeroDivisionError, is no ceiling)."""
    if seconds <= 0:
        raise ParameterError(f"{what} took {seconds!r} s by the clock, too short to time; "
                             "measure a larger one")  # fmt: skip
    return amount / seconds
