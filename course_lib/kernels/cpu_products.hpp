// The CPU kernels' small matrix products and tiled transposes (included into cpu_kernels.py's
// source after cpu_pool.hpp): register-blocked with GCC's vector extensions, 8 floats a vector
// (one AVX register; other CPUs split it into their own vectors).
#include <string.h>

#include <vector>

// The attention's products, read in place: item (i, j, g) of outer × middle × inner
// multiplies the m×k matrix at a + i·sa[0] + j·sa[1] + g·sa[2] (rows ld[0] apart; stored k×m
// when trans_a) by the k×n matrix at b + (the same with sb; rows ld[1] apart; stored n×k
// when trans_b) into the m×n matrix at c + (the same with sc; rows ld[2] apart). Where
// sc[2] is 0 the inner items add up into one matrix, in g's order. A head's product (T×d by
// d×S) is too small to split well (OpenBLAS gives it at most two threads), so each product
// runs on one thread and the (i, j) pairs split over the pool: the same bits on any number of
// threads. Each product keeps a block of MR rows × NR columns of C in vector registers
// (12 of AVX2's 16 when MR = 6, NR = 16) while it walks along k: per step, two loads of B, six
// broadcasts of A and twelve multiply-adds.
typedef float v8 __attribute__((vector_size(32)));  // 8 floats: one AVX register
static const int MR = 6, NR = 16;

static inline v8 load8(const float* p) { v8 v; memcpy(&v, p, sizeof v); return v; }
static inline void store8(float* p, v8 v) { memcpy(p, &v, sizeof v); }

// 8 × 8 floats transposed in registers: for a product's B stored transposed, and for the tiled
// copy at the end of this file
typedef int i8 __attribute__((vector_size(32)));
#if defined(__clang__)
#define SHUFFLE(a, b, ...) __builtin_shufflevector(a, b, __VA_ARGS__)
#else
#define SHUFFLE(a, b, ...) __builtin_shuffle(a, b, (i8){__VA_ARGS__})
#endif

// Rows x, x + ldx, ..., x + 7·ldx (8 floats each) written as the columns of 8 rows of out:
// interleave pairs of rows, then pairs of pairs, then the 128-bit halves
static inline void transpose_8x8(const float* x, long long ldx, float* out, long long ldo) {
    v8 r[8], t[8], u[8];
    for (int q = 0; q < 8; ++q) r[q] = load8(x + q * ldx);
    for (int q = 0; q < 8; q += 2) {
        t[q] = SHUFFLE(r[q], r[q + 1], 0, 8, 1, 9, 4, 12, 5, 13);
        t[q + 1] = SHUFFLE(r[q], r[q + 1], 2, 10, 3, 11, 6, 14, 7, 15);
    }
    for (int q = 0; q < 8; q += 4)
        for (int h = 0; h < 2; ++h) {
            u[q + 2 * h] = SHUFFLE(t[q + h], t[q + h + 2], 0, 1, 8, 9, 4, 5, 12, 13);
            u[q + 2 * h + 1] = SHUFFLE(t[q + h], t[q + h + 2], 2, 3, 10, 11, 6, 7, 14, 15);
        }
    for (int q = 0; q < 4; ++q) {
        store8(out + q * ldo, SHUFFLE(u[q], u[q + 4], 0, 1, 2, 3, 8, 9, 10, 11));
        store8(out + (q + 4) * ldo, SHUFFLE(u[q], u[q + 4], 4, 5, 6, 7, 12, 13, 14, 15));
    }
}

// Rows 0 .. R-1 and columns 0 .. cols-1 (cols <= NR) of C = A·B, written (or added, ADD);
// A(r, p) = a[r·lda + p] (TA: a[p·lda + r]), B(p, j) = b[p·ldb + j]. Multiply-adds fused
// here only (the other kernels keep NumPy's separate roundings): BLAS fuses them too.
template <int R, bool TA, bool ADD>
__attribute__((optimize("fp-contract=fast")))
static void product_block(const float* __restrict__ a, long long lda, const float* __restrict__ b,
                          long long ldb, long long k, float* __restrict__ c, long long ldc,
                          long long cols) {
    v8 acc[R][2] = {};
    for (long long p = 0; p < k; ++p) {
        const v8 b0 = load8(b + p * ldb), b1 = load8(b + p * ldb + 8);
        for (int r = 0; r < R; ++r) {
            const float x = TA ? a[p * lda + r] : a[r * lda + p];
            acc[r][0] += x * b0;
            acc[r][1] += x * b1;
        }
    }
    for (int r = 0; r < R; ++r) {
        float* row = c + r * ldc;
        if (cols == NR) {
            store8(row, ADD ? load8(row) + acc[r][0] : acc[r][0]);
            store8(row + 8, ADD ? load8(row + 8) + acc[r][1] : acc[r][1]);
        } else {
            float out[NR];
            memcpy(out, acc[r], sizeof out);
            for (long long j = 0; j < cols; ++j) row[j] = ADD ? row[j] + out[j] : out[j];
        }
    }
}

// Rows i0 .. i0+R-1 of C, all columns
template <int R, bool TA, bool ADD>
static void product_rows(const float* a, long long lda, long long i0, const float* b,
                         long long ldb, long long n, long long k, float* c, long long ldc) {
    const float* rows = TA ? a + i0 : a + i0 * lda;
    for (long long j0 = 0; j0 < n; j0 += NR)
        product_block<R, TA, ADD>(rows, lda, b + j0, ldb, k, c + i0 * ldc + j0, ldc,
                                  n - j0 < NR ? n - j0 : NR);
}

template <bool TA, bool ADD>
static void product_all_rows(const float* a, long long lda, const float* b, long long ldb,
                             long long m, long long n, long long k, float* c, long long ldc) {
    long long i0 = 0;
    for (; i0 + MR <= m; i0 += MR) product_rows<MR, TA, ADD>(a, lda, i0, b, ldb, n, k, c, ldc);
    switch (m - i0) {  // the last rows: fewer than MR
        case 1: product_rows<1, TA, ADD>(a, lda, i0, b, ldb, n, k, c, ldc); break;
        case 2: product_rows<2, TA, ADD>(a, lda, i0, b, ldb, n, k, c, ldc); break;
        case 3: product_rows<3, TA, ADD>(a, lda, i0, b, ldb, n, k, c, ldc); break;
        case 4: product_rows<4, TA, ADD>(a, lda, i0, b, ldb, n, k, c, ldc); break;
        case 5: product_rows<5, TA, ADD>(a, lda, i0, b, ldb, n, k, c, ldc); break;
    }
}

// C (m×n) = A·B, or C += A·B (add), on this thread. B is first copied into k rows of a
// multiple of NR floats (zeros after column n) when it is stored transposed or n is not such
// a multiple; A is read where it lies.
static void small_matmul(const float* a, const float* b, float* c, long long m, long long n,
                         long long k, bool trans_a, bool trans_b, long long lda, long long ldb,
                         long long ldc, bool add) {
    thread_local std::vector<float> packed;
    if (trans_b || n % NR) {
        const long long width = (n + NR - 1) / NR * NR;
        packed.resize(k * width);
        float* to = packed.data();
        if (trans_b) {  // 8 × 8 blocks in registers, then the ragged edges a float at a time
            long long j = 0;
            for (; j + 8 <= n; j += 8) {
                long long p = 0;
                for (; p + 8 <= k; p += 8)
                    transpose_8x8(b + j * ldb + p, ldb, to + p * width + j, width);
                for (; p < k; ++p)
                    for (long long q = j; q < j + 8; ++q) to[p * width + q] = b[q * ldb + p];
            }
            for (; j < n; ++j)
                for (long long p = 0; p < k; ++p) to[p * width + j] = b[j * ldb + p];
        } else
            for (long long p = 0; p < k; ++p) memcpy(to + p * width, b + p * ldb, n * sizeof *b);
        for (long long p = 0; p < k; ++p)
            for (long long j = n; j < width; ++j) to[p * width + j] = 0.0f;
        b = to;
        ldb = width;
    }
    if (trans_a && add) product_all_rows<true, true>(a, lda, b, ldb, m, n, k, c, ldc);
    else if (trans_a) product_all_rows<true, false>(a, lda, b, ldb, m, n, k, c, ldc);
    else if (add) product_all_rows<false, true>(a, lda, b, ldb, m, n, k, c, ldc);
    else product_all_rows<false, false>(a, lda, b, ldb, m, n, k, c, ldc);
}

extern "C" __attribute__((visibility("default")))
void head_products(const float* a, const float* b, float* c, const long long* items,
                   long long m, long long n, long long k, int trans_a, int trans_b,
                   const long long* ld, const long long* sa, const long long* sb,
                   const long long* sc) {
    const bool summed = sc[2] == 0;
    pool::parallel_for(items[0] * items[1], 1, 1, [=](long long lo, long long hi) {
        for (long long ij = lo; ij < hi; ++ij) {
            const long long i = ij / items[1], j = ij % items[1];
            for (long long g = 0; g < items[2]; ++g)
                small_matmul(a + i * sa[0] + j * sa[1] + g * sa[2],
                             b + i * sb[0] + j * sb[1] + g * sb[2],
                             c + i * sc[0] + j * sc[1] + g * sc[2], m, n, k, trans_a, trans_b,
                             ld[0], ld[1], ld[2], summed && g);
        }
    });
}

// A transposed matrix made C-contiguous: out (rows × cols) from x, whose element (i, j) is at
// x[j·rows + i] (a weight's gradient computed as (Wᵀ)'s, then viewed transposed), in 32 × 32
// tiles of 8 × 8 blocks, each transposed in vector registers (NumPy's copy reads x a float at
// a time, a column apart: 3 × slower), the rows split over the pool
static void transposed_rows(const float* __restrict__ x, float* __restrict__ out, long long lo,
                            long long hi, long long rows, long long cols) {
    const long long tile = 32;
    for (long long i0 = lo; i0 < hi; i0 += tile)
        for (long long j0 = 0; j0 < cols; j0 += tile) {
            const long long i1 = i0 + tile < hi ? i0 + tile : hi;
            const long long j1 = j0 + tile < cols ? j0 + tile : cols;
            if (i1 - i0 == tile && j1 - j0 == tile) {
                for (long long j = j0; j < j1; j += 8)
                    for (long long i = i0; i < i1; i += 8)
                        transpose_8x8(x + j * rows + i, rows, out + i * cols + j, cols);
                continue;
            }
            for (long long j = j0; j < j1; ++j)  // a ragged tile at the edges
                for (long long i = i0; i < i1; ++i) out[i * cols + j] = x[j * rows + i];
        }
}

extern "C" __attribute__((visibility("default")))
void transposed_copy(const float* x, float* out, long long rows, long long cols) {
    pool::parallel_for(rows, rows_per_part(cols), 32, [=](long long lo, long long hi) {
        transposed_rows(x, out, lo, hi, rows, cols);
    });
}
