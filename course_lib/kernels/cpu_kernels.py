"""Hand-written kernels on the CPU: the attention softmax, its adjoint, RoPE and AdamW's two
update ops, each one pass over memory where NumPy takes four to seven (each row of the
softmax stays in cache: one read and one write; a masked key costs a store of 0, not an
exponential). Compiled once per machine (``native.load_library``), float32 host arrays only;
the ops decide (``backend.on_host``) and keep their array-module code for everything else.

RoPE and AdamW compute exactly NumPy's float32 operations in NumPy's order, with scalars
rounded to float32 as NumPy rounds them and no FMA contraction: NumPy's results bit for bit.
For the softmax NumPy takes seven passes over the scores (scale, mask, max, subtract, exp,
sum, divide) and four for its adjoint. The loops compute the same formulas in float32 with
the same NaN and infinity rules (the mask is *added*, so a +inf or NaN score hides nowhere;
the row maximum propagates NaN as ``max`` does), but with the C library's ``expf`` and row
sums accumulated in double instead of NumPy's SIMD exp and float32 pairwise sums: NumPy's
results to within NumPy's own float32 rounding (the adjoint's ``g − Σ g·p`` cancels, so its
error is relative to the row's ``Σ |g·p|``). One thread each: on a shared 2-core machine a
second pool beside BLAS's spinning one lost more than it gained (issue 25's notes).
"""

from __future__ import annotations

import ctypes
import functools
import math
import warnings

import numpy as np

from ..backend import host_array
from .errors import KernelError

#: Smallest array worth a call (smaller ones: NumPy's few microseconds are as fast).
MIN_SIZE = 2**14

SOURCE = """\
// Causal softmax rows, softmax adjoint rows, RoPE rows, SiLU, sigmoid and AdamW, float32,
// one pass each; loops written so that the compiler vectorises them (omp simd)
#include <math.h>
{vector_math}

extern "C" __attribute__((visibility("default")))
void causal_softmax(const float* __restrict__ s, float* __restrict__ out, long long rows,
                    long long t, long long n, float scale) {
    for (long long r = 0; r < rows; ++r) {
        const float* x = s + r * n;
        float* y = out + r * n;
        const long long seen = r % t + (n - t) + 1;  // keys 0 .. seen-1 are visible to query r
        float top = -INFINITY;
        int nan = 0;  // NumPy adds the mask: a NaN anywhere, or +inf under it, gives NaN rows
        #pragma omp simd reduction(max : top) reduction(| : nan)
        for (long long j = 0; j < seen; ++j) {
            const float v = x[j] * scale;
            y[j] = v;
            top = v > top ? v : top;
            nan |= v != v;
        }
        #pragma omp simd reduction(| : nan)
        for (long long j = seen; j < n; ++j) nan |= !(x[j] * scale < INFINITY);
        nan |= top == -INFINITY;  // x − max is −inf − (−inf) = NaN on the whole row
        if (nan) top = NAN;
        double total = 0.0;  // summed in double, rounded once: NumPy's float32 sum within
        #pragma omp simd reduction(+ : total)  // its own rounding error
        for (long long j = 0; j < seen; ++j) {
            const float e = expf(y[j] - top);
            y[j] = e;
            total += e;
        }
        const float sum = (float)total;
        #pragma omp simd
        for (long long j = 0; j < seen; ++j) y[j] /= sum;
        const float hidden = 0.0f / sum;  // a masked key: exp(−inf) / sum (NaN if sum is)
        #pragma omp simd
        for (long long j = seen; j < n; ++j) y[j] = hidden;
    }
}

extern "C" __attribute__((visibility("default")))
void softmax_grad(const float* __restrict__ g, const float* __restrict__ p,
                  float* __restrict__ out, long long rows, long long n, float scale,
                  int scaled) {
    for (long long r = 0; r < rows; ++r) {
        const float* gr = g + r * n;
        const float* pr = p + r * n;
        float* y = out + r * n;
        double sum = 0.0;  // in double, rounded once, as for the softmax's row sum
        #pragma omp simd reduction(+ : sum)
        for (long long j = 0; j < n; ++j) sum += (double)(gr[j] * pr[j]);
        const float dot = (float)sum;
        const float factor = scaled ? scale : 1.0f;
        #pragma omp simd
        for (long long j = 0; j < n; ++j) {
            const float v = (gr[j] - dot) * pr[j];
            y[j] = scaled ? v * factor : v;
        }
    }
}

// x viewed as (outer, t, inner, 2 * half); position p of axis t rotates with row p of the
// (t, half) tables: y1 = x1·cos − x2·sin, y2 = x2·cos + x1·sin (NumPy's order of operations)
extern "C" __attribute__((visibility("default")))
void rope(const float* __restrict__ x, const float* __restrict__ cos_table,
          const float* __restrict__ sin_table, float* __restrict__ out, long long outer,
          long long t, long long inner, long long half) {
    for (long long o = 0; o < outer; ++o) {
        for (long long p = 0; p < t; ++p) {
            const float* c = cos_table + p * half;
            const float* s = sin_table + p * half;
            for (long long i = 0; i < inner; ++i) {
                const long long row = ((o * t + p) * inner + i) * 2 * half;
                const float* x1 = x + row;
                const float* x2 = x1 + half;
                float* y1 = out + row;
                float* y2 = y1 + half;
                #pragma omp simd
                for (long long j = 0; j < half; ++j) {
                    y1[j] = x1[j] * c[j] - x2[j] * s[j];
                    y2[j] = x2[j] * c[j] + x1[j] * s[j];
                }
            }
        }
    }
}

// RMSNorm rows of n: r = 1 / sqrt(Σx²/n + ε) (the sum in double, rounded once, as above)
static inline float inv_rms(const float* __restrict__ x, long long n, float eps) {
    double squares = 0.0;
    #pragma omp simd reduction(+ : squares)
    for (long long j = 0; j < n; ++j) squares += (double)(x[j] * x[j]);
    return 1.0f / sqrtf((float)squares / (float)n + eps);
}

// y = x·r·w
extern "C" __attribute__((visibility("default")))
void rms_norm(const float* __restrict__ x, const float* __restrict__ w, float* __restrict__ out,
              long long rows, long long n, float eps) {
    for (long long r = 0; r < rows; ++r) {
        const float* xr = x + r * n;
        float* y = out + r * n;
        const float inv = inv_rms(xr, n, eps);
        #pragma omp simd
        for (long long j = 0; j < n; ++j) y[j] = xr[j] * inv * w[j];
    }
}

// RMSNorm's input adjoint: r·(g·w − x·(Σ g·w·x)·r²/n)
extern "C" __attribute__((visibility("default")))
void rms_norm_grad_x(const float* __restrict__ g, const float* __restrict__ x,
                     const float* __restrict__ w, float* __restrict__ out, long long rows,
                     long long n, float eps) {
    for (long long r = 0; r < rows; ++r) {
        const float* gr = g + r * n;
        const float* xr = x + r * n;
        float* y = out + r * n;
        const float inv = inv_rms(xr, n, eps);
        double total = 0.0;
        #pragma omp simd reduction(+ : total)
        for (long long j = 0; j < n; ++j) total += (double)(gr[j] * w[j] * xr[j]);
        const float dot = (float)total * (inv * inv / (float)n);
        #pragma omp simd
        for (long long j = 0; j < n; ++j) y[j] = (gr[j] * w[j] - xr[j] * dot) * inv;
    }
}

// sigmoid(x) = 1 / (1 + exp(−x)); SiLU x·sigmoid(x) = x / (1 + exp(−x))
extern "C" __attribute__((visibility("default")))
void sigmoid(const float* __restrict__ x, float* __restrict__ y, long long n) {
    #pragma omp simd
    for (long long i = 0; i < n; ++i) y[i] = 1.0f / (1.0f + expf(-x[i]));
}

extern "C" __attribute__((visibility("default")))
void silu(const float* __restrict__ x, float* __restrict__ y, long long n) {
    #pragma omp simd
    for (long long i = 0; i < n; ++i) y[i] = x[i] / (1.0f + expf(-x[i]));
}

// SiLU's adjoint g·silu'(x) = g·(s·(1 + x·(1 − s))), s = sigmoid(x)
extern "C" __attribute__((visibility("default")))
void silu_grad(const float* __restrict__ g, const float* __restrict__ x, float* __restrict__ y,
               long long n) {
    #pragma omp simd
    for (long long i = 0; i < n; ++i) {
        const float s = 1.0f / (1.0f + expf(-x[i]));
        y[i] = g[i] * (s * (1.0f + x[i] * (1.0f - s)));
    }
}

// Adam's moving average m' = m·β + (1−β)·g^power (power 1: m, power 2: v)
extern "C" __attribute__((visibility("default")))
void adam_moment(const float* __restrict__ m, const float* __restrict__ g,
                 float* __restrict__ out, long long n, float beta, float one_minus_beta,
                 int power) {
    if (power == 2) {
        #pragma omp simd
        for (long long i = 0; i < n; ++i) out[i] = m[i] * beta + one_minus_beta * (g[i] * g[i]);
    } else {
        #pragma omp simd
        for (long long i = 0; i < n; ++i) out[i] = m[i] * beta + one_minus_beta * g[i];
    }
}

// AdamW's new θ: (θ·decay) − (m' / (sqrt(v')·bias2 + ε))·step_size, each step rounded
extern "C" __attribute__((visibility("default")))
void adamw_update(const float* __restrict__ theta, const float* __restrict__ m,
                  const float* __restrict__ v, float* __restrict__ out, long long n,
                  int decays, float decay, float bias2, float eps, float step_size) {
    #pragma omp simd
    for (long long i = 0; i < n; ++i) {
        const float kept = decays ? theta[i] * decay : theta[i];
        const float denom = sqrtf(v[i]) * bias2 + eps;
        out[i] = kept - (m[i] / denom) * step_size;
    }
}
"""


FUNCTIONS = ("causal_softmax", "softmax_grad", "rope", "rms_norm", "rms_norm_grad_x", "sigmoid",
             "silu", "silu_grad", "adam_moment", "adamw_update")  # fmt: skip


@functools.cache
def _library():
    """The kernels, with libmvec's SIMD ``expf`` where it links, else the scalar ``expf``."""
    from . import native  # noqa: PLC0415  (the build machinery loads on first use)

    source = SOURCE.replace("{vector_math}", native.VECTOR_MATH)
    library, vector_math = native.load_simd_library(source, "cpu_kernels.cpp")
    library.vector_exp = vector_math
    for name in FUNCTIONS:
        getattr(library, name).restype = None
    return library


def vector_exp() -> bool:
    """Whether the kernels' exponentials are libmvec's SIMD ones (False: scalar ``expf``, or
    no kernels at all)."""
    return _built() and _library().vector_exp


class CpuKernelsUnavailable(UserWarning):
    """The CPU kernels could not be built or loaded; every op uses its array code (same
    results within float32 rounding, slower)."""


@functools.cache
def _built() -> bool:
    """Do the kernels build and load here? Asked once per process. A missing compiler, a
    refused cache folder (``UnsafeCacheError``) or a full disk leaves every op on its array
    code, with one warning saying why."""
    try:
        _library()
    except (KernelError, OSError) as exc:
        warnings.warn(f"course_lib's CPU kernels are off ({exc}); ops use NumPy's passes",
                      CpuKernelsUnavailable, stacklevel=3)  # fmt: skip
        return False
    return True


def worth_it(*arrays) -> bool:
    """Should these arrays go to this module's kernels: float32 host arrays of one shape with
    at least one axis and :data:`MIN_SIZE` elements, and kernels that build here? (Below that
    size NumPy's passes cost less than the call.)"""
    return (
        all(isinstance(a, np.ndarray) and a.dtype == np.float32 for a in arrays)
        and len({a.shape for a in arrays}) == 1
        and arrays[0].ndim >= 1
        and arrays[0].size >= MIN_SIZE
        and _built()
    )


def _rows(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(host_array(a, "an input of a CPU row kernel"))


def _pointers(*arrays):
    """The arrays' data addresses, as the kernels' pointer arguments."""
    return [ctypes.c_void_p(a.ctypes.data) for a in arrays]


def causal_softmax(s: np.ndarray, scale: float) -> np.ndarray:
    """``softmax(scale · s + M)`` over the last axis of ``s`` (..., T, S), ``M`` masking the
    keys after each query (queries aligned with the last keys)."""
    s = _rows(s)
    t, n = s.shape[-2], s.shape[-1]
    out = np.empty_like(s)
    _library().causal_softmax(
        *_pointers(s, out), ctypes.c_longlong(s.size // n), ctypes.c_longlong(t),
        ctypes.c_longlong(n), ctypes.c_float(np.float32(scale)),
    )  # fmt: skip
    return out


def softmax_grad(g: np.ndarray, p: np.ndarray, scale: float) -> np.ndarray:
    """``scale · p · (g − Σ g·p)`` over the last axis (the softmax adjoint)."""
    g, p = _rows(g), _rows(p)
    n = p.shape[-1]
    out = np.empty_like(p)
    _library().softmax_grad(
        *_pointers(g, p, out), ctypes.c_longlong(p.size // n), ctypes.c_longlong(n),
        ctypes.c_float(np.float32(scale)), ctypes.c_int(scale != 1.0),
    )  # fmt: skip
    return out


def rope(x: np.ndarray, cos: np.ndarray, sin: np.ndarray, axis: int) -> np.ndarray:
    """RoPE of ``x`` with positions along ``axis`` (not the last) and ``(positions, d/2)``
    tables: the halves ``(x₁, x₂)`` of the last axis become ``(x₁·cos − x₂·sin,
    x₂·cos + x₁·sin)``."""
    x, cos, sin = _rows(x), _rows(cos), _rows(sin)
    shape = x.shape
    out = np.empty_like(x)
    _library().rope(
        *_pointers(x, cos, sin, out),
        ctypes.c_longlong(math.prod(shape[:axis])), ctypes.c_longlong(shape[axis]),
        ctypes.c_longlong(math.prod(shape[axis + 1 : -1])), ctypes.c_longlong(shape[-1] // 2),
    )  # fmt: skip
    return out


def adam_moment(m: np.ndarray, g: np.ndarray, beta: float, power: int) -> np.ndarray:
    """``m·β + (1−β)·g^power``; β and 1−β rounded to float32 as NumPy rounds them."""
    m, g = _rows(m), _rows(g)
    out = np.empty_like(m)
    f32 = np.float32
    _library().adam_moment(
        *_pointers(m, g, out), ctypes.c_longlong(m.size), ctypes.c_float(f32(beta)),
        ctypes.c_float(f32(1.0 - beta)), ctypes.c_int(power),
    )  # fmt: skip
    return out


def adamw_update(theta, m, v, *, decay, bias2, eps, step_size) -> np.ndarray:
    """``(θ·decay) − (m / (sqrt(v)·bias2 + ε))·step_size``; ``decay`` None: no weight
    decay. The factors are float32 numbers (or 0-d arrays) as the op computed them."""
    theta, m, v = _rows(theta), _rows(m), _rows(v)
    out = np.empty_like(theta)
    f32 = np.float32
    _library().adamw_update(
        *_pointers(theta, m, v, out), ctypes.c_longlong(theta.size),
        ctypes.c_int(decay is not None), ctypes.c_float(f32(1.0 if decay is None else decay)),
        *(ctypes.c_float(f32(x)) for x in (bias2, eps, step_size)),
    )  # fmt: skip
    return out


def _elementwise(name: str, x: np.ndarray) -> np.ndarray:
    x = _rows(x)
    out = np.empty_like(x)
    getattr(_library(), name)(*_pointers(x, out), ctypes.c_longlong(x.size))
    return out


def sigmoid(x: np.ndarray) -> np.ndarray:
    """``1 / (1 + exp(−x))``: 0 and 1 at ∓inf, NaN at NaN."""
    return _elementwise("sigmoid", x)


def silu(x: np.ndarray) -> np.ndarray:
    """``x / (1 + exp(−x))`` (``x · sigmoid(x)``): −0 far left, x far right, NaN at NaN."""
    return _elementwise("silu", x)


def silu_grad(g: np.ndarray, x: np.ndarray) -> np.ndarray:
    """``g · s·(1 + x·(1 − s))`` with ``s = 1 / (1 + exp(−x))``: SiLU's adjoint."""
    g, x = _rows(g), _rows(x)
    out = np.empty_like(x)
    _library().silu_grad(*_pointers(g, x, out), ctypes.c_longlong(x.size))
    return out


def rms_norm(x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    """``x · r · w`` over the last axis, ``r = 1 / sqrt(mean(x²) + ε)``."""
    x, w = _rows(x), _rows(w)
    n = x.shape[-1]
    out = np.empty_like(x)
    _library().rms_norm(*_pointers(x, w, out), ctypes.c_longlong(x.size // n),
                        ctypes.c_longlong(n), ctypes.c_float(np.float32(eps)))  # fmt: skip
    return out


def rms_norm_grad_x(g: np.ndarray, x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    """RMSNorm's input adjoint ``r · (g·w − x · mean(g·w·x) · r²)`` over the last axis."""
    g, x, w = _rows(g), _rows(x), _rows(w)
    n = x.shape[-1]
    out = np.empty_like(x)
    _library().rms_norm_grad_x(*_pointers(g, x, w, out), ctypes.c_longlong(x.size // n),
                               ctypes.c_longlong(n), ctypes.c_float(np.float32(eps)))  # fmt: skip
    return out
