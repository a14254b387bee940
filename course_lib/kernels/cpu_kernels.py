"""Hand-written kernels on the CPU: the attention softmax, its adjoint, the plain softmax and
cross-entropy's rows, RoPE, RMSNorm and its adjoints, SiLU, sigmoid and AdamW's two update
ops, each one pass over memory where NumPy
takes four to seven (each row of the softmax stays in cache: one read and one write; a masked
key costs a store of 0, not an exponential, but for those that complete the visible keys'
last vector of 16); large same-shape sums and products, the
embedding's adjoint, and the attention's small products read in place (each head's on one
thread, the heads over the pool: OpenBLAS gives such a product two threads at most), and a
transposed matrix (a weight's gradient) made contiguous in register-transposed tiles. Compiled once
per machine (``native.load_library``), float32 host arrays only; the ops decide
(``backend.on_host``) and keep their array-module code for everything else.

RoPE, AdamW, the sums and products and the embedding's adjoint compute exactly NumPy's
float32 operations in NumPy's order, with scalars rounded to float32 as NumPy rounds them and
no FMA contraction: NumPy's results bit for bit. For the softmax NumPy takes seven passes over
the scores (scale, mask, max, subtract, exp, sum, divide) and four for its adjoint. The loops
compute the same formulas in float32 with the same NaN and infinity rules (the mask is
*added*, so a +inf or NaN score hides nowhere; the row maximum propagates NaN as ``max``
does), but with the C library's ``expf`` and row sums accumulated in double instead of NumPy's
SIMD exp and float32 pairwise sums: NumPy's results to within NumPy's own float32 rounding
(the adjoint's ``g − Σ g·p`` cancels, so its error is relative to the row's ``Σ |g·p|``).

Threads: the kernels split their rows (or 64-float blocks) over the pool they share with
NumPy's OpenBLAS (``cpu_pool.hpp``, ``shared_pool.py``), as many as BLAS may use; a kernel's
result is the same bits on any number of threads.
"""

from __future__ import annotations

import ctypes
import functools
import math
import warnings

import numpy as np

from ..backend import host_array
from ..errors import ShapeError
from ..params import check_ids
from .errors import KernelError

#: Smallest array worth a call (smaller ones: NumPy's few microseconds are as fast), and the
#: smallest part a thread gets.
MIN_SIZE = 2**14

SOURCE = """\
// Causal softmax rows, softmax adjoint rows, RoPE rows, RMSNorm rows, SiLU, sigmoid and
// AdamW, float32, one pass each; loops written so that the compiler vectorises them (omp
// simd). Each loop is a static function of a range of rows (or elements) with restrict
// pointers; the exported function splits its rows (or 64-element blocks) over the shared
// pool's threads (cpu_pool.hpp)
#include <math.h>
#include <string.h>
{vector_math}
#include "cpu_pool.hpp"

// Each thread's part is at least this many floats (smaller parts cost more than they save)
static const long long MIN_PART = {min_part};

// How many rows of n floats (or columns of n floats) make a thread's smallest part
static long long rows_per_part(long long n) { return n > 0 ? (MIN_PART + n - 1) / n : 1; }

// rows lo .. hi-1, one function call per thread
#define EACH_ROW_RANGE(rows, n, call) \\
    pool::parallel_for(rows, rows_per_part(n), 1, [=](long long lo, long long hi) { call; })
// elements lo .. hi-1 in blocks of 64 floats: every part but the last is a whole number of
// SIMD vectors, so each element meets the same vector or scalar code as without threads
#define EACH_ELEMENT_RANGE(count, call) \\
    pool::parallel_for(count, MIN_PART, 64, [=](long long lo, long long hi) { call; })

static void causal_softmax_rows(const float* __restrict__ s, float* __restrict__ out,
                                long long lo, long long hi, long long t, long long n,
                                float scale) {
    for (long long r = lo; r < hi; ++r) {
        const float* x = s + r * n;
        float* y = out + r * n;
        const long long seen = r % t + (n - t) + 1;  // keys 0 .. seen-1 are visible to query r
        // The exponentials run over the visible keys rounded up to whole vectors of 16
        // (no scalar tail of expf calls); the hidden keys seen .. span-1 hold the maximum
        // there, a harmless exp(0), left out of the sum and overwritten at the end.
        const long long span = (seen + 15) / 16 * 16 < n ? (seen + 15) / 16 * 16 : n;
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
        for (long long j = seen; j < span; ++j) y[j] = top;
        #pragma omp simd
        for (long long j = 0; j < span; ++j) y[j] = expf(y[j] - top);
        double total = 0.0;  // summed in double, rounded once: NumPy's float32 sum within
        #pragma omp simd reduction(+ : total)  // its own rounding error
        for (long long j = 0; j < seen; ++j) total += y[j];
        const float sum = (float)total;
        #pragma omp simd
        for (long long j = 0; j < seen; ++j) y[j] /= sum;
        const float hidden = 0.0f / sum;  // a masked key: exp(−inf) / sum (NaN if sum is)
        #pragma omp simd
        for (long long j = seen; j < n; ++j) y[j] = hidden;
    }
}

extern "C" __attribute__((visibility("default")))
void causal_softmax(const float* s, float* out, long long rows, long long t, long long n,
                    float scale) {
    EACH_ROW_RANGE(rows, n, causal_softmax_rows(s, out, lo, hi, t, n, scale));
}

// Cross-entropy's rows: picked[r] = (x[t_r] − m) − log Σ exp(x − m) for row r of the logits,
// t_r its target, m the row's maximum (0 when that is ±inf or NaN: log-sum-exp's rule, so an
// infinite or NaN logit gives what NumPy's formula gives); the sum in double
static void cross_entropy_rows(const float* __restrict__ x, const long long* __restrict__ targets,
                               float* __restrict__ picked, long long lo, long long hi,
                               long long n) {
    for (long long r = lo; r < hi; ++r) {
        const float* row = x + r * n;
        float top = -INFINITY;
        #pragma omp simd reduction(max : top)
        for (long long j = 0; j < n; ++j) top = row[j] > top ? row[j] : top;
        const float m = isfinite(top) ? top : 0.0f;  // a NaN anywhere makes the sum NaN below
        double total = 0.0;
        #pragma omp simd reduction(+ : total)
        for (long long j = 0; j < n; ++j) total += expf(row[j] - m);
        picked[r] = (row[targets[r]] - m) - logf((float)total);
    }
}

extern "C" __attribute__((visibility("default")))
void cross_entropy(const float* x, const long long* targets, float* picked, long long rows,
                   long long n) {
    EACH_ROW_RANGE(rows, n, cross_entropy_rows(x, targets, picked, lo, hi, n));
}

static void softmax_grad_rows(const float* __restrict__ g, const float* __restrict__ p,
                              float* __restrict__ out, long long lo, long long hi, long long n,
                              float scale, int scaled) {
    for (long long r = lo; r < hi; ++r) {
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

extern "C" __attribute__((visibility("default")))
void softmax_grad(const float* g, const float* p, float* out, long long rows, long long n,
                  float scale, int scaled) {
    EACH_ROW_RANGE(rows, n, softmax_grad_rows(g, p, out, lo, hi, n, scale, scaled));
}

// x viewed as (outer·t, inner, 2 * half); position p = row % t of axis t rotates with row p
// of the (t, half) tables: y1 = x1·cos − x2·sin, y2 = x2·cos + x1·sin (NumPy's order)
static void rope_rows(const float* __restrict__ x, const float* __restrict__ cos_table,
                      const float* __restrict__ sin_table, float* __restrict__ out,
                      long long lo, long long hi, long long t, long long inner,
                      long long half) {
    for (long long row = lo; row < hi; ++row) {
        const float* c = cos_table + (row % t) * half;
        const float* s = sin_table + (row % t) * half;
        for (long long i = 0; i < inner; ++i) {
            const long long at = (row * inner + i) * 2 * half;
            const float* x1 = x + at;
            const float* x2 = x1 + half;
            float* y1 = out + at;
            float* y2 = y1 + half;
            #pragma omp simd
            for (long long j = 0; j < half; ++j) {
                y1[j] = x1[j] * c[j] - x2[j] * s[j];
                y2[j] = x2[j] * c[j] + x1[j] * s[j];
            }
        }
    }
}

extern "C" __attribute__((visibility("default")))
void rope(const float* x, const float* cos_table, const float* sin_table, float* out,
          long long outer, long long t, long long inner, long long half) {
    EACH_ROW_RANGE(outer * t, inner * 2 * half,
                   rope_rows(x, cos_table, sin_table, out, lo, hi, t, inner, half));
}

// RMSNorm rows of n: r = 1 / sqrt(Σx²/n + ε) (the sum in double, rounded once, as above)
static inline float inv_rms(const float* __restrict__ x, long long n, float eps) {
    double squares = 0.0;
    #pragma omp simd reduction(+ : squares)
    for (long long j = 0; j < n; ++j) squares += (double)(x[j] * x[j]);
    return 1.0f / sqrtf((float)squares / (float)n + eps);
}

// y = x·r·w
static void rms_norm_rows(const float* __restrict__ x, const float* __restrict__ w,
                          float* __restrict__ out, long long lo, long long hi, long long n,
                          float eps) {
    for (long long r = lo; r < hi; ++r) {
        const float* xr = x + r * n;
        float* y = out + r * n;
        const float inv = inv_rms(xr, n, eps);
        #pragma omp simd
        for (long long j = 0; j < n; ++j) y[j] = xr[j] * inv * w[j];
    }
}

extern "C" __attribute__((visibility("default")))
void rms_norm(const float* x, const float* w, float* out, long long rows, long long n,
              float eps) {
    EACH_ROW_RANGE(rows, n, rms_norm_rows(x, w, out, lo, hi, n, eps));
}

// RMSNorm's input adjoint: r·(g·w − x·(Σ g·w·x)·r²/n)
static void rms_norm_grad_x_rows(const float* __restrict__ g, const float* __restrict__ x,
                                 const float* __restrict__ w, float* __restrict__ out,
                                 long long lo, long long hi, long long n, float eps) {
    for (long long r = lo; r < hi; ++r) {
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

extern "C" __attribute__((visibility("default")))
void rms_norm_grad_x(const float* g, const float* x, const float* w, float* out,
                     long long rows, long long n, float eps) {
    EACH_ROW_RANGE(rows, n, rms_norm_grad_x_rows(g, x, w, out, lo, hi, n, eps));
}

// RMSNorm's weight adjoint: Σ over rows of g·(x·r). The rows go in blocks of rows_per_part(n)
// (a thread reads whole rows), each block's column sums in double into a row of `partial`
// (blocks split over the threads), then each column's block sums are added in block order
// (columns split) and rounded once. The blocks depend on the shape only: the same bits on any
// thread count.
extern "C" __attribute__((visibility("default")))
void rms_norm_grad_w(const float* g, const float* x, float* out, long long rows, long long n,
                     float eps) {
    const long long per = rows_per_part(n), blocks = (rows + per - 1) / per;
    std::vector<double> sums((size_t)(blocks * n));
    double* partial = sums.data();
    pool::parallel_for(blocks, 1, 1, [=](long long lo, long long hi) {
        for (long long b = lo; b < hi; ++b) {
            double* __restrict__ total = partial + b * n;
            for (long long j = 0; j < n; ++j) total[j] = 0.0;
            const long long end = (b + 1) * per < rows ? (b + 1) * per : rows;
            for (long long i = b * per; i < end; ++i) {
                const float* __restrict__ gi = g + i * n;
                const float* __restrict__ xi = x + i * n;
                const float ri = inv_rms(xi, n, eps);
                #pragma omp simd
                for (long long j = 0; j < n; ++j) total[j] += (double)(gi[j] * (xi[j] * ri));
            }
        }
    });
    pool::parallel_for(n, rows_per_part(blocks), 16, [=](long long lo, long long hi) {
        double* __restrict__ first = partial;
        for (long long b = 1; b < blocks; ++b) {
            const double* __restrict__ block = partial + b * n;
            #pragma omp simd
            for (long long j = lo; j < hi; ++j) first[j] += block[j];
        }
        for (long long j = lo; j < hi; ++j) out[j] = blocks ? (float)first[j] : 0.0f;
    });
}

#include "cpu_products.hpp"

// A copy split over the threads (the optimiser's new values into the model's arrays)
extern "C" __attribute__((visibility("default")))
void copy_floats(const float* x, float* out, long long n) {
    EACH_ELEMENT_RANGE(n, memcpy(out + lo, x + lo, (hi - lo) * sizeof *x));
}

// Sums and products of same-shape arrays: NumPy's loops split over the threads (an add or a
// multiply per element, in NumPy's order: ((x0 + x1) + x2) + ...)
static void sum_part(const float* const* xs, int count, float* __restrict__ out, long long lo,
                     long long hi) {
    const float* __restrict__ x0 = xs[0];
    const float* __restrict__ x1 = xs[1];
    #pragma omp simd
    for (long long i = lo; i < hi; ++i) out[i] = x0[i] + x1[i];
    for (int k = 2; k < count; ++k) {
        const float* __restrict__ xk = xs[k];
        #pragma omp simd
        for (long long i = lo; i < hi; ++i) out[i] += xk[i];
    }
}

extern "C" __attribute__((visibility("default")))
void sum_of(const float* const* xs, int count, float* out, long long n) {
    EACH_ELEMENT_RANGE(n, sum_part(xs, count, out, lo, hi));
}

static void product_part(const float* __restrict__ x, const float* __restrict__ y,
                         float* __restrict__ out, long long n) {
    #pragma omp simd
    for (long long i = 0; i < n; ++i) out[i] = x[i] * y[i];
}

extern "C" __attribute__((visibility("default")))
void product(const float* x, const float* y, float* out, long long n) {
    EACH_ELEMENT_RANGE(n, product_part(x + lo, y + lo, out + lo, hi - lo));
}

// The embedding's adjoint: out[ids[i]] += g[i] for the rows i in order (np.add.at's order and
// bits). The threads split the table's rows: each adds, in order, the rows of g whose id falls
// in its range and writes no other row; the ranges end where as many rows of g as possible
// have been counted for each part (ids checked already: 0 <= id < table_rows).
static void rows_added_at_part(const float* __restrict__ g, const long long* __restrict__ ids,
                               float* __restrict__ out, long long rows, long long width,
                               long long first, long long end) {
    for (long long i = 0; i < rows; ++i) {
        if (ids[i] < first || ids[i] >= end) continue;
        const float* __restrict__ gi = g + i * width;
        float* __restrict__ target = out + ids[i] * width;
        #pragma omp simd
        for (long long j = 0; j < width; ++j) target[j] += gi[j];
    }
}

extern "C" __attribute__((visibility("default")))
void rows_added_at(const float* g, const long long* ids, float* out, long long rows,
                   long long width, long long table_rows) {
    long long parts = pool::threads();
    if (rows * width / MIN_PART < parts) parts = rows * width / MIN_PART;
    if (parts <= 1) return rows_added_at_part(g, ids, out, rows, width, 0, table_rows);
    std::vector<long long> count((size_t)table_rows, 0);  // rows of g for each id
    for (long long i = 0; i < rows; ++i) ++count[(size_t)ids[i]];
    std::vector<long long> bounds((size_t)parts + 1, table_rows);
    bounds[0] = 0;
    long long seen = 0, part = 1;
    for (long long id = 0; id < table_rows && part < parts; ++id) {
        seen += count[(size_t)id];
        if (seen * parts >= part * rows) bounds[(size_t)part++] = id + 1;
    }
    const long long* b = bounds.data();
    pool::parallel_for(parts, parts, 1, 1, [=](long long lo, long long hi) {
        for (long long p = lo; p < hi; ++p)
            rows_added_at_part(g, ids, out, rows, width, b[p], b[p + 1]);
    });
}

// sigmoid(x) = 1 / (1 + exp(−x)); SiLU x·sigmoid(x) = x / (1 + exp(−x))
static void sigmoid_part(const float* __restrict__ x, float* __restrict__ y, long long n) {
    #pragma omp simd
    for (long long i = 0; i < n; ++i) y[i] = 1.0f / (1.0f + expf(-x[i]));
}

extern "C" __attribute__((visibility("default")))
void sigmoid(const float* x, float* y, long long n) {
    EACH_ELEMENT_RANGE(n, sigmoid_part(x + lo, y + lo, hi - lo));
}

static void silu_part(const float* __restrict__ x, float* __restrict__ y, long long n) {
    #pragma omp simd
    for (long long i = 0; i < n; ++i) y[i] = x[i] / (1.0f + expf(-x[i]));
}

extern "C" __attribute__((visibility("default")))
void silu(const float* x, float* y, long long n) {
    EACH_ELEMENT_RANGE(n, silu_part(x + lo, y + lo, hi - lo));
}

// SiLU's adjoint g·silu'(x) = g·(s·(1 + x·(1 − s))), s = sigmoid(x)
static void silu_grad_part(const float* __restrict__ g, const float* __restrict__ x,
                           float* __restrict__ y, long long n) {
    #pragma omp simd
    for (long long i = 0; i < n; ++i) {
        const float s = 1.0f / (1.0f + expf(-x[i]));
        y[i] = g[i] * (s * (1.0f + x[i] * (1.0f - s)));
    }
}

extern "C" __attribute__((visibility("default")))
void silu_grad(const float* g, const float* x, float* y, long long n) {
    EACH_ELEMENT_RANGE(n, silu_grad_part(g + lo, x + lo, y + lo, hi - lo));
}

// Adam's moving average m' = m·β + (1−β)·g^power (power 1: m, power 2: v)
static void adam_moment_part(const float* __restrict__ m, const float* __restrict__ g,
                             float* __restrict__ out, long long n, float beta,
                             float one_minus_beta, int power) {
    if (power == 2) {
        #pragma omp simd
        for (long long i = 0; i < n; ++i) out[i] = m[i] * beta + one_minus_beta * (g[i] * g[i]);
    } else {
        #pragma omp simd
        for (long long i = 0; i < n; ++i) out[i] = m[i] * beta + one_minus_beta * g[i];
    }
}

extern "C" __attribute__((visibility("default")))
void adam_moment(const float* m, const float* g, float* out, long long n, float beta,
                 float one_minus_beta, int power) {
    EACH_ELEMENT_RANGE(n, adam_moment_part(m + lo, g + lo, out + lo, hi - lo, beta,
                                           one_minus_beta, power));
}

// AdamW's new θ: (θ·decay) − (m' / (sqrt(v')·bias2 + ε))·step_size, each step rounded
static void adamw_update_part(const float* __restrict__ theta, const float* __restrict__ m,
                              const float* __restrict__ v, float* __restrict__ out, long long n,
                              int decays, float decay, float bias2, float eps,
                              float step_size) {
    #pragma omp simd
    for (long long i = 0; i < n; ++i) {
        const float kept = decays ? theta[i] * decay : theta[i];
        const float denom = sqrtf(v[i]) * bias2 + eps;
        out[i] = kept - (m[i] / denom) * step_size;
    }
}

extern "C" __attribute__((visibility("default")))
void adamw_update(const float* theta, const float* m, const float* v, float* out, long long n,
                  int decays, float decay, float bias2, float eps, float step_size) {
    EACH_ELEMENT_RANGE(n, adamw_update_part(theta + lo, m + lo, v + lo, out + lo, hi - lo,
                                            decays, decay, bias2, eps, step_size));
}
"""


FUNCTIONS = ("causal_softmax", "softmax_grad", "rope", "rms_norm", "rms_norm_grad_x", "sigmoid",
             "silu", "silu_grad", "adam_moment", "adamw_update", "head_products", "sum_of",
             "product", "rows_added_at", "rms_norm_grad_w", "transposed_copy",
             "copy_floats", "cross_entropy")  # fmt: skip


@functools.cache
def _library():
    """The kernels, with libmvec's SIMD ``expf`` where it links, else the scalar ``expf``, on
    the pool they share with NumPy's BLAS."""
    from . import shared_pool  # noqa: PLC0415  (loaded on first use)

    library = build()
    library.pool = shared_pool.connect(library)
    return library


def build(extra_flags: tuple[str, ...] = ()) -> ctypes.CDLL:
    """The kernels compiled for this CPU, ``extra_flags`` last (``("-mno-avx512f",)``: the
    products' 8-float vectors on a CPU with AVX-512). A build with other flags than
    :func:`_library`'s is a library of its own, on no pool: its kernels run on the calling
    thread (the same flags load :func:`_library`'s library itself, pool included)."""
    from . import native, sources  # noqa: PLC0415  (loaded on first use)

    source = SOURCE.replace("{vector_math}", native.VECTOR_MATH)
    source = sources.expand_includes(source.replace("{min_part}", str(MIN_SIZE)), "cpu_kernels.cpp")
    library, vector_math = native.load_simd_library(source, "cpu_kernels.cpp", extra_flags)
    library.vector_exp = vector_math
    for name in FUNCTIONS:
        getattr(library, name).restype = None
    return library


def vector_exp() -> bool:
    """Whether the kernels' exponentials are libmvec's SIMD ones (False: scalar ``expf``, or
    no kernels at all)."""
    return _built() and _library().vector_exp


def threads_described() -> str:
    """How the kernels use threads in this process (``kernels/shared_pool.py``): "one pool
    with NumPy's BLAS, …", "the kernels' pool beside …" once a BLAS limit above half of
    OpenBLAS's thread slots sent its products back to its own threads, or "one thread (why)"."""
    if not _built():
        return "one thread (no CPU kernels)"
    library = _library()
    if library.pool_stepped_aside():
        return ("the kernels' pool beside OpenBLAS's own threads (a BLAS limit above half its "
                "thread slots sent NumPy's products back to them)")
    return library.pool


def pool_workers() -> int:
    """Threads the shared pool has started so far (the calling thread not counted)."""
    return _library().pool_workers() if _built() else 0


def pool_parallel_for() -> ctypes.c_void_p | None:
    """The shared pool's ``pool_parallel_for(count, grain, align, body, context)`` for loops
    built in other libraries (the fusion pass's), or None where the kernels do not build."""
    return ctypes.cast(_library().pool_parallel_for, ctypes.c_void_p) if _built() else None


def pool_runs() -> int:
    """Runs (a BLAS call's jobs, a kernel's parts) the pool has handed to its threads so far."""
    if not _built():
        return 0
    _library().pool_runs.restype = ctypes.c_long
    return _library().pool_runs()


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
    """``a`` as a C-contiguous, aligned float32 host array of its own shape (a 0-d one stays
    0-d); a transposed matrix (F-contiguous: the transposed view of another) copied in tiles
    over the pool (:func:`transposed`). Another dtype is a TypeError: the loops would read
    its bytes as float32 numbers (and a narrower one past its end)."""
    a = host_array(a, "an input of a CPU row kernel")
    if a.dtype != np.float32:
        raise TypeError(f"the CPU kernels take float32 arrays (native byte order), got {a.dtype}")
    if a.ndim == 2 and a.flags.f_contiguous and not a.flags.c_contiguous:
        return transposed(a)
    return a if a.flags.c_contiguous and a.flags.aligned else np.array(a, order="C")


def _same_shapes(name: str, *arrays: np.ndarray) -> None:
    """Raise unless the arrays have one shape: the loops read each for the first's size."""
    if len({a.shape for a in arrays}) > 1:
        raise ShapeError(f"{name}: the arrays must have one shape, got "
                         f"{', '.join(str(a.shape) for a in arrays)}")  # fmt: skip


def _checked_ids(ids, size: int, what: str) -> np.ndarray:
    """``ids`` as C-contiguous, aligned int64, each checked in ``[0, size)`` (the loops index
    rows with them: an id outside would read or write outside the arrays)."""
    ids = host_array(ids, "ids of a CPU kernel")
    check_ids(ids, size, what)
    return np.require(ids, np.int64, ("C", "A")).reshape(ids.shape)  # aligned: read as int64


def transposed(a: np.ndarray) -> np.ndarray:
    """``np.ascontiguousarray(a)`` (the same values), copied in 32 × 32 tiles over the pool
    for an F-contiguous float32 matrix ``a``; any other array is NumPy's
    ``np.ascontiguousarray(a)``: a view of ``a`` (no copy) where it is C-contiguous already."""
    if not (isinstance(a, np.ndarray) and a.ndim == 2 and a.dtype == np.float32
            and a.flags.f_contiguous and not a.flags.c_contiguous):  # fmt: skip
        return np.ascontiguousarray(a).reshape(np.shape(a))
    out = np.empty(a.shape, np.float32)
    _library().transposed_copy(*_pointers(a, out), *(ctypes.c_longlong(n) for n in a.shape))
    return out


def _pointers(*arrays):
    """The arrays' data addresses, as the kernels' pointer arguments."""
    return [ctypes.c_void_p(a.ctypes.data) for a in arrays]


def causal_softmax(s: np.ndarray, scale: float) -> np.ndarray:
    """``softmax(scale · s + M)`` over the last axis of ``s`` (..., T, S), ``M`` masking the
    keys after each query (queries aligned with the last keys); ``T <= S`` (else
    ShapeError: a row would see a negative number of keys)."""
    s = _rows(s)
    if s.ndim < 2 or s.shape[-2] > s.shape[-1]:
        raise ShapeError(f"causal_softmax needs (..., T, S) scores with T <= S, got {s.shape}")
    t, n = s.shape[-2], s.shape[-1]
    out = np.empty_like(s)
    if out.size == 0:
        return out
    _library().causal_softmax(
        *_pointers(s, out), ctypes.c_longlong(s.size // n), ctypes.c_longlong(t),
        ctypes.c_longlong(n), ctypes.c_float(np.float32(scale)),
    )  # fmt: skip
    return out


def softmax(x: np.ndarray) -> np.ndarray:
    """``softmax(x)`` over the last axis: the causal kernel with one query per row (nothing
    masked), the same NaN and infinity rules as NumPy's formula."""
    x = _rows(x)
    if x.ndim < 1:
        raise ShapeError("softmax needs an array of at least one axis, got a 0-d one")
    if x.size == 0:  # no rows, or rows of no elements: nothing to normalise (nor a max)
        return np.empty_like(x)
    n = x.shape[-1]
    return causal_softmax(x.reshape(-1, 1, n), 1.0).reshape(x.shape)


def cross_entropy(logits: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """Each row's log-probability of its target, ``log_softmax(logits)[target]``, as a
    float32 array of the targets' shape: one target per row, ``targets.shape ==
    logits.shape[:-1]`` (else ValueError), each an integer in ``[0, n)`` (else GraphError or
    OutOfRangeError, as the op's check)."""
    logits, targets = _rows(logits), host_array(targets, "cross_entropy's targets")
    if logits.ndim < 1 or targets.shape != logits.shape[:-1]:
        raise ShapeError(f"cross_entropy: targets {targets.shape} must be the logits' shape "
                         f"{logits.shape} without its last axis")  # fmt: skip
    n = logits.shape[-1]
    targets = _checked_ids(targets, n, f"cross_entropy: there are {n} classes")
    picked = np.empty(targets.shape, np.float32)
    _library().cross_entropy(*_pointers(logits, targets, picked),
                             ctypes.c_longlong(targets.size), ctypes.c_longlong(n))  # fmt: skip
    return picked


def softmax_grad(g: np.ndarray, p: np.ndarray, scale: float) -> np.ndarray:
    """``scale · p · (g − Σ g·p)`` over the last axis (the softmax adjoint)."""
    g, p = _rows(g), _rows(p)
    _same_shapes("softmax_grad", g, p)
    if p.ndim < 1:
        raise ShapeError("softmax_grad needs arrays of at least one axis, got 0-d ones")
    n = p.shape[-1]
    out = np.empty_like(p)
    if out.size == 0:
        return out
    _library().softmax_grad(
        *_pointers(g, p, out), ctypes.c_longlong(p.size // n), ctypes.c_longlong(n),
        ctypes.c_float(np.float32(scale)), ctypes.c_int(scale != 1.0),
    )  # fmt: skip
    return out


def rope(x: np.ndarray, cos: np.ndarray, sin: np.ndarray, axis: int) -> np.ndarray:
    """RoPE of ``x`` with positions along ``axis`` (not the last) and ``(positions, d/2)``
    tables: the halves ``(x₁, x₂)`` of the last axis become ``(x₁·cos − x₂·sin,
    x₂·cos + x₁·sin)``. The tables must be ``(x.shape[axis], d/2)`` and ``d`` even (else
    ShapeError: the loop reads a table row per position and rotates pairs)."""
    x, cos, sin = _rows(x), _rows(cos), _rows(sin)
    shape = x.shape
    if not -len(shape) <= axis < len(shape) - 1 or axis % len(shape) == len(shape) - 1:
        raise ShapeError(f"rope: the position axis {axis} must come before the last of {shape}")
    axis %= len(shape)
    if shape[-1] % 2 or cos.shape != (shape[axis], shape[-1] // 2) or sin.shape != cos.shape:
        raise ShapeError(f"rope: x {shape} needs an even last axis and (positions, d/2) = "
                         f"{(shape[axis], shape[-1] // 2)} tables, got {cos.shape} and "
                         f"{sin.shape}")  # fmt: skip
    out = np.empty_like(x)
    _library().rope(
        *_pointers(x, cos, sin, out),
        ctypes.c_longlong(math.prod(shape[:axis])), ctypes.c_longlong(shape[axis]),
        ctypes.c_longlong(math.prod(shape[axis + 1 : -1])), ctypes.c_longlong(shape[-1] // 2),
    )  # fmt: skip
    return out


def adam_moment(m: np.ndarray, g: np.ndarray, beta: float, power: int) -> np.ndarray:
    """``m·β + (1−β)·g^power`` (``power`` 2: ``g·g``; any other power: ``g``, as
    ``AdamMoment``'s array code); β and 1−β rounded to float32 as NumPy rounds them."""
    m, g = _rows(m), _rows(g)
    _same_shapes("adam_moment", m, g)
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
    _same_shapes("adamw_update", theta, m, v)
    out = np.empty_like(theta)
    f32 = np.float32
    _library().adamw_update(
        *_pointers(theta, m, v, out), ctypes.c_longlong(theta.size),
        ctypes.c_int(decay is not None), ctypes.c_float(f32(1.0 if decay is None else decay)),
        *(ctypes.c_float(f32(x)) for x in (bias2, eps, step_size)),
    )  # fmt: skip
    return out


def splits(*arrays) -> bool:
    """Should a plain sum or product of these arrays go to this module (:func:`sum_of`,
    :func:`product`): :func:`worth_it`, at least two parts' worth of elements, and more than
    one thread to split them over (on one thread NumPy's own loops are a little faster)."""
    return worth_it(*arrays) and arrays[0].size >= 2 * MIN_SIZE and _library().pool_threads() > 1


def sum_of(*arrays: np.ndarray) -> np.ndarray:
    """``((x₀ + x₁) + x₂) + …`` elementwise, NumPy's order, split over the pool's threads;
    two arrays or more, of one shape (else ShapeError)."""
    arrays = [_rows(a) for a in arrays]
    if len(arrays) < 2:
        raise ShapeError(f"sum_of adds two arrays or more, got {len(arrays)}")
    _same_shapes("sum_of", *arrays)
    out = np.empty_like(arrays[0])
    pointers = (ctypes.c_void_p * len(arrays))(*(a.ctypes.data for a in arrays))
    _library().sum_of(pointers, ctypes.c_int(len(arrays)), *_pointers(out),
                      ctypes.c_longlong(out.size))  # fmt: skip
    return out


def assign(target: np.ndarray, value) -> None:
    """``target[...] = value``, split over the pool's threads when both are large float32
    C-contiguous arrays of one shape that do not overlap (else NumPy's assignment, with its
    broadcasting and its errors)."""
    if (
        isinstance(value, np.ndarray)
        and splits(target, value)
        and target.flags.c_contiguous
        and target.flags.writeable
        and value.flags.c_contiguous
        and not np.may_share_memory(target, value)
    ):
        _library().copy_floats(*_pointers(value, target), ctypes.c_longlong(target.size))
    else:
        target[...] = value


def product(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """``x · y`` elementwise, split over the pool's threads."""
    return _elementwise("product", x, y)


def rows_added_at(g: np.ndarray, ids: np.ndarray, rows: int) -> np.ndarray:
    """The embedding's adjoint: zeros ``(rows, width)`` with each row of ``g`` (..., width)
    added to row ``ids[...]``, in ``np.add.at``'s order (its bits). ``g.shape == (*ids.shape,
    width)`` (else ShapeError) and each id an integer in ``[0, rows)`` (else GraphError or
    OutOfRangeError, as the op's check)."""
    g, ids = _rows(g), host_array(ids, "the embedding adjoint's ids")
    if g.ndim < 1 or g.shape[:-1] != ids.shape:
        raise ShapeError(f"rows_added_at: g {g.shape} must be the ids' shape {ids.shape} and "
                         "a width")  # fmt: skip
    width = g.shape[-1]
    ids = _checked_ids(ids, rows, f"rows_added_at: the table has {rows} rows")
    out = np.zeros((rows, width), np.float32)
    _library().rows_added_at(*_pointers(g, ids, out), ctypes.c_longlong(ids.size),
                             ctypes.c_longlong(width), ctypes.c_longlong(rows))  # fmt: skip
    return out


def rms_norm_grad_w(g: np.ndarray, x: np.ndarray, eps: float) -> np.ndarray:
    """RMSNorm's weight adjoint ``Σ_rows g · x · r`` (the sums in double, rounded once: the
    einsum's float32 sums to within their own rounding)."""
    g, x = _rows(g), _rows(x)
    _same_shapes("rms_norm_grad_w", g, x)
    if x.ndim < 1:
        raise ShapeError("rms_norm_grad_w needs rows (..., n), got 0-d arrays")
    n = x.shape[-1]
    rows = x.size // max(n, 1)
    out = np.empty(n, np.float32)
    _library().rms_norm_grad_w(*_pointers(g, x, out), ctypes.c_longlong(rows),
                               ctypes.c_longlong(n), ctypes.c_float(np.float32(eps)))  # fmt: skip
    return out


#: The most floats of a product's right-hand matrix (k × n) for :func:`head_products`: its
#: kernel reads that matrix again for every 12 (or 6) rows of the left one, so it must stay in a
#: core's L2 cache (64 KB here); larger products go to BLAS, which blocks for the caches.
HEAD_PRODUCT_MAX_RIGHT = 2**14


def head_products_fit(pairs: int, k: int, n: int) -> bool:
    """Should ``pairs`` independent groups of products with a k × n right-hand matrix go to
    :func:`head_products`: that matrix stays in cache, and there are at least as many pairs
    as threads to share them (fewer, larger products: BLAS's threads and blocking win)?"""
    return k * n <= HEAD_PRODUCT_MAX_RIGHT and pairs >= _library().pool_threads()


def products_worth_it(*arrays) -> bool:
    """Should products of these arrays go to :func:`head_products`: float32 host arrays of at
    least :data:`MIN_SIZE` elements, and kernels that build here?"""
    return (
        all(isinstance(a, np.ndarray) and a.dtype == np.float32 for a in arrays)
        and max(a.size for a in arrays) >= MIN_SIZE
        and _built()
    )


#: :func:`head_products`' causal masks (``cpu_products.hpp``): none, the result's masked
#: entries written 0, the left matrix's masked entries counted as 0
UNMASKED, MASK_ON_RESULT, MASK_ON_LEFT = 0, 1, 2


def head_products(
    a, b, out, items, mnk, trans, ld, strides, mask=(UNMASKED, 0)
) -> np.ndarray | None:
    """Small matrix products read in place from float32 ``a`` and ``b`` (made C-contiguous)
    into ``out``, each on one thread, split over the pool: ``items`` = (outer, middle, inner)
    products, ``mnk`` their sizes, ``trans`` whether ``a``'s and ``b``'s matrices are stored
    transposed, ``ld`` the row strides of ``a``, ``b``, ``out``, ``strides`` three triples (in
    elements) from one item to the next along each of the three item axes, for ``a``, ``b``
    and ``out``; an ``out`` stride 0 on the inner axis adds those products into one matrix.
    ``mask`` = (where, keys − queries): attention's causal mask on the T × S result
    (:data:`MASK_ON_RESULT`, masked entries 0) or on the left matrix (:data:`MASK_ON_LEFT`,
    masked entries count as 0 and are skipped where the right matrix is finite).
    None (nothing computed) where they do not fit (:func:`head_products_fit`: the grouped
    matmul is faster). Nothing else is checked here: the attention ops compute these numbers
    from shapes they have checked (``ops/attention.py``)."""
    _, n, k = mnk
    if not head_products_fit(items[0] * items[1], k, n):
        return None
    a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)
    _library().head_products(
        *_pointers(a, b, out), _longs(items), *(ctypes.c_longlong(x) for x in mnk),
        *(ctypes.c_int(t) for t in trans), _longs(ld), *(_longs(s) for s in strides),
        ctypes.c_int(mask[0]), ctypes.c_longlong(mask[1]),
    )  # fmt: skip
    return out


def _longs(values):
    return (ctypes.c_longlong * len(values))(*values)


def _elementwise(name: str, *arrays: np.ndarray) -> np.ndarray:
    """The kernel ``name(inputs..., out, n)`` on same-shape arrays (else ShapeError)."""
    arrays = [_rows(a) for a in arrays]
    _same_shapes(name, *arrays)
    out = np.empty_like(arrays[-1])
    getattr(_library(), name)(*_pointers(*arrays, out), ctypes.c_longlong(out.size))
    return out


def sigmoid(x: np.ndarray) -> np.ndarray:
    """``1 / (1 + exp(−x))``: 0 and 1 at ∓inf, NaN at NaN."""
    return _elementwise("sigmoid", x)


def silu(x: np.ndarray) -> np.ndarray:
    """``x / (1 + exp(−x))`` (``x · sigmoid(x)``): −0 far left, x far right, NaN at NaN and
    at −inf (−inf / inf; the array code's −inf · 0 too)."""
    return _elementwise("silu", x)


def silu_grad(g: np.ndarray, x: np.ndarray) -> np.ndarray:
    """``g · s·(1 + x·(1 − s))`` with ``s = 1 / (1 + exp(−x))``: SiLU's adjoint; NaN at
    x = ±inf (inf · 0), as the array code's formula."""
    return _elementwise("silu_grad", g, x)


def rms_norm(x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    """``x · r · w`` over the last axis, ``r = 1 / sqrt(mean(x²) + ε)``."""
    x, w = _rows(x), _rows(w)
    _check_weight("rms_norm", x, w)
    n = x.shape[-1]
    out = np.empty_like(x)
    if out.size == 0:
        return out
    _library().rms_norm(*_pointers(x, w, out), ctypes.c_longlong(x.size // n),
                        ctypes.c_longlong(n), ctypes.c_float(np.float32(eps)))  # fmt: skip
    return out


def rms_norm_grad_x(g: np.ndarray, x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    """RMSNorm's input adjoint ``r · (g·w − x · mean(g·w·x) · r²)`` over the last axis."""
    g, x, w = _rows(g), _rows(x), _rows(w)
    _same_shapes("rms_norm_grad_x", g, x)
    _check_weight("rms_norm_grad_x", x, w)
    n = x.shape[-1]
    out = np.empty_like(x)
    if out.size == 0:
        return out
    _library().rms_norm_grad_x(*_pointers(g, x, w, out), ctypes.c_longlong(x.size // n),
                               ctypes.c_longlong(n), ctypes.c_float(np.float32(eps)))  # fmt: skip
    return out


def _check_weight(name: str, x: np.ndarray, w: np.ndarray) -> None:
    """Raise unless ``w`` is one weight per element of x's last axis (the loops read n)."""
    if x.ndim < 1 or w.shape != x.shape[-1:]:
        raise ShapeError(f"{name}: the weight {w.shape} must be x's last axis {x.shape[-1:]}")
