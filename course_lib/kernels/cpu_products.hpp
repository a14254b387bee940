// The CPU kernels' small matrix products and tiled transposes (included into cpu_kernels.py's
// source after cpu_pool.hpp): register-blocked with GCC's vector extensions, 16 floats a vector
// where the CPU has AVX-512 (one register), else 8 (one AVX register; CPUs without AVX split it
// into their own vectors).
#include <string.h>

#include <vector>

// The attention's products, read in place: item (i, j, g) of outer × middle × inner
// multiplies the m×k matrix at a + i·sa[0] + j·sa[1] + g·sa[2] (rows ld[0] apart; stored k×m
// when trans_a) by the k×n matrix at b + (the same with sb; rows ld[1] apart; stored n×k
// when trans_b) into the m×n matrix at c + (the same with sc; rows ld[2] apart). Where
// sc[2] is 0 the inner items add up into one matrix, in g's order. A head's product (T×d by
// d×S) is too small to split well (OpenBLAS gives it at most two threads), so each product
// runs on one thread and the (i, j) pairs split over the pool: the same bits on any number of
// threads. Each product keeps a block of MR rows × NR columns of C in vector registers while
// it walks along k: per step, two vector loads of B, MR broadcasts of A and 2·MR multiply-adds
// (24 of AVX-512's 32 registers when MR = 12, NR = 32; 12 of AVX2's 16 when MR = 6, NR = 16).
// Each element of C is the same sum in the same order at either width: the same bits.
typedef float v8 __attribute__((vector_size(32)));  // 8 floats: one AVX register
static inline v8 load8(const float* p) { v8 v; memcpy(&v, p, sizeof v); return v; }
static inline void store8(float* p, v8 v) { memcpy(p, &v, sizeof v); }

#if defined(__AVX512F__)  // 32 vector registers of 16 floats: 12 rows × 32 columns of C
#define VW 16
#define ROWS 12
#else  // 16 registers of 8 floats: 6 rows × 16 columns of C
#define VW 8
#define ROWS 6
#endif
typedef float vf __attribute__((vector_size(VW * 4)));  // VW floats: one vector register
typedef int vi __attribute__((vector_size(VW * 4)));
static const int MR = ROWS, NR = 2 * VW;
static inline vf loadv(const float* p) { vf v; memcpy(&v, p, sizeof v); return v; }
static inline void storev(float* p, vf v) { memcpy(p, &v, sizeof v); }

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

// The causal mask of attention's products (``causal`` in ops/attention.py): query i sees
// key j when j <= i + off (off = keys − queries >= 0). ON_RESULT: C is a T × S score
// matrix whose masked entries are written 0. ON_LEFT: the left matrix is a T × S
// probability matrix P whose masked entries count as 0 — read as stored (A = P: row i keeps
// the columns p <= i + off) or transposed (A = Pᵀ: row j keeps the queries p >= j − off).
// When the right matrix holds only finite numbers a masked term adds exactly nothing (but to
// a sum of −0: product_block), so it is skipped (about half the work); else it is multiplied
// by 0, as (M ⊙ P)·B would.
enum { UNMASKED = 0, ON_RESULT = 1, ON_LEFT = 2 };
struct Mask {
    int on;
    long long off;
    bool skip;  // ON_LEFT: the right matrix is finite, masked terms are skipped
};

// The columns [lo, hi) of A's row r that the mask keeps, of k
static inline void kept_columns(const Mask& mask, bool ta, long long r, long long k,
                                long long* lo, long long* hi) {
    *lo = 0;
    *hi = k;
    if (mask.on != ON_LEFT) return;
    if (ta) *lo = r - mask.off > 0 ? r - mask.off : 0;
    else *hi = r + mask.off + 1 < k ? r + mask.off + 1 : k;
}

// Does one of a row's V vectors of sums hold −0 (the sign bit alone)?
template <int V>
static inline bool negative_zero(const vf (&sums)[V]) {
    vi hit = {};
    for (int v = 0; v < V; ++v) {
        vi bits;
        memcpy(&bits, &sums[v], sizeof bits);
        hit |= bits == (int)0x80000000;
    }
    for (int q = 0; q < VW; ++q)
        if (hit[q]) return true;
    return false;
}

// Rows row0 .. row0+R-1 and columns 0 .. cols-1 (cols <= V·VW) of C = A·B, written (or
// added, ADD); A(r, p) = a[r·lda + p] (TA: a[p·lda + r]), B(p, j) = b[p·ldb + j]; V vectors a
// row (2, or 1 for a last block of at most VW columns: a head of 16 floats or fewer). The steps
// p that every row keeps run without a test; the masked edges [any_lo, all_lo) and
// [all_hi, any_hi) test each row, in p's order (the same sums as without the mask).
// Multiply-adds fused here only (the other kernels keep NumPy's separate roundings): BLAS
// fuses them too.
template <int R, int V, bool TA, bool ADD>
__attribute__((optimize("fp-contract=fast")))
static void product_block(const float* __restrict__ a, long long lda, const float* __restrict__ b,
                          long long ldb, long long k, float* __restrict__ c, long long ldc,
                          long long cols, const Mask& mask, long long row0) {
    vf acc[R][V] = {};
    long long lo[R], hi[R], all_lo = 0, all_hi = k, any_lo = k, any_hi = 0;
    for (int r = 0; r < R; ++r) {
        kept_columns(mask, TA, row0 + r, k, &lo[r], &hi[r]);
        all_lo = lo[r] > all_lo ? lo[r] : all_lo;
        all_hi = hi[r] < all_hi ? hi[r] : all_hi;
        any_lo = lo[r] < any_lo ? lo[r] : any_lo;
        any_hi = hi[r] > any_hi ? hi[r] : any_hi;
    }
    if (!mask.skip) any_lo = 0, any_hi = k;  // masked terms multiplied by 0
    if (all_hi < all_lo) all_hi = all_lo;
    auto edge = [&](long long from, long long to) {
        for (long long p = from; p < to; ++p) {
            vf bp[V];
            for (int v = 0; v < V; ++v) bp[v] = loadv(b + p * ldb + v * VW);
            for (int r = 0; r < R; ++r) {
                const bool kept = p >= lo[r] && p < hi[r];
                if (!kept && mask.skip) continue;
                const float x = !kept ? 0.0f : TA ? a[p * lda + r] : a[r * lda + p];
                for (int v = 0; v < V; ++v) acc[r][v] += x * bp[v];
            }
        }
    };
    edge(any_lo, all_lo);
    for (long long p = all_lo; p < all_hi; ++p) {
        vf bp[V];
        for (int v = 0; v < V; ++v) bp[v] = loadv(b + p * ldb + v * VW);
        for (int r = 0; r < R; ++r) {
            const float x = TA ? a[p * lda + r] : a[r * lda + p];
            for (int v = 0; v < V; ++v) acc[r][v] += x * bp[v];
        }
    }
    edge(all_hi > any_lo ? all_hi : any_lo, any_hi);
    // A = P skips each row's masked tail [hi, k): its terms 0·B are signed zeros, which
    // leave every sum as it is except −0 (kept terms that underflow), made +0 by any +0
    // term; a row that holds −0 adds them after all, in p's order (A = Pᵀ skips a head of
    // masked terms, which leaves the sums' +0 start as it is)
    if (mask.skip && !TA)
        for (int r = 0; r < R; ++r)
            if (negative_zero<V>(acc[r]))
                for (long long p = hi[r]; p < k; ++p)
                    for (int v = 0; v < V; ++v) acc[r][v] += 0.0f * loadv(b + p * ldb + v * VW);
    for (int r = 0; r < R; ++r) {
        float* row = c + r * ldc;
        if (cols == V * VW) {
            for (int v = 0; v < V; ++v)
                storev(row + v * VW, ADD ? loadv(row + v * VW) + acc[r][v] : acc[r][v]);
        } else {
            float out[V * VW];
            memcpy(out, acc[r], sizeof out);
            for (long long j = 0; j < cols; ++j) row[j] = ADD ? row[j] + out[j] : out[j];
        }
    }
}

// Rows i0 .. i0+R-1 of C, all columns; ON_RESULT: the column blocks that some row keeps,
// then each row's masked columns set to 0
template <int R, bool TA, bool ADD>
static void product_rows(const float* a, long long lda, long long i0, const float* b,
                         long long ldb, long long n, long long k, float* c, long long ldc,
                         const Mask& mask) {
    const float* rows = TA ? a + i0 : a + i0 * lda;
    const long long kept = mask.on == ON_RESULT && i0 + R + mask.off < n ? i0 + R + mask.off : n;
    for (long long j0 = 0; j0 < kept; j0 += NR) {
        const long long cols = n - j0 < NR ? n - j0 : NR;
        if (cols <= VW)  // one vector a row does (a head of VW floats or fewer)
            product_block<R, 1, TA, ADD>(rows, lda, b + j0, ldb, k, c + i0 * ldc + j0, ldc, cols,
                                         mask, i0);
        else
            product_block<R, 2, TA, ADD>(rows, lda, b + j0, ldb, k, c + i0 * ldc + j0, ldc, cols,
                                         mask, i0);
    }
    if (mask.on == ON_RESULT)
        for (long long r = i0; r < i0 + R; ++r)
            for (long long j = r + mask.off + 1; j < n; ++j) c[r * ldc + j] = 0.0f;
}

// The last rows of C (fewer than MR): one block of R = m - i0 rows
template <int R, bool TA, bool ADD>
static void last_rows(const float* a, long long lda, long long i0, const float* b, long long ldb,
                      long long m, long long n, long long k, float* c, long long ldc,
                      const Mask& mask) {
    if (m - i0 == R) product_rows<R, TA, ADD>(a, lda, i0, b, ldb, n, k, c, ldc, mask);
    else if constexpr (R > 1) last_rows<R - 1, TA, ADD>(a, lda, i0, b, ldb, m, n, k, c, ldc, mask);
}

template <bool TA, bool ADD>
static void product_all_rows(const float* a, long long lda, const float* b, long long ldb,
                             long long m, long long n, long long k, float* c, long long ldc,
                             const Mask& mask) {
    long long i0 = 0;
    for (; i0 + MR <= m; i0 += MR)
        product_rows<MR, TA, ADD>(a, lda, i0, b, ldb, n, k, c, ldc, mask);
    if (i0 < m) last_rows<MR - 1, TA, ADD>(a, lda, i0, b, ldb, m, n, k, c, ldc, mask);
}

// Does the k × n matrix at b (rows ldb apart, not transposed) hold only finite numbers?
// x − x is 0 for a finite x and NaN for an infinity or a NaN: 8 columns a step
static bool all_finite(const float* b, long long k, long long n, long long ldb) {
    v8 any = {};
    float rest = 0.0f;
    for (long long p = 0; p < k; ++p) {
        const float* row = b + p * ldb;
        long long j = 0;
        for (; j + 8 <= n; j += 8) {
            const v8 x = load8(row + j);
            any += x - x;
        }
        for (; j < n; ++j) rest += row[j] - row[j];
    }
    float lanes[8];
    memcpy(lanes, &any, sizeof lanes);
    for (float x : lanes) rest += x;
    return rest == 0.0f;
}

// C (m×n) = A·B, or C += A·B (add), on this thread, under the causal mask ``mask``. B is
// first copied into k rows of a multiple of NR floats (zeros after column n) when it is stored
// transposed or n is not such a multiple; A is read where it lies.
static void small_matmul(const float* a, const float* b, float* c, long long m, long long n,
                         long long k, bool trans_a, bool trans_b, long long lda, long long ldb,
                         long long ldc, bool add, const Mask& mask) {
    thread_local std::vector<float> packed;
    if (trans_b || n % NR) {
        const long long width = (n + NR - 1) / NR * NR;
        // the buffer only grows: a resize that shrank would zero-fill on the next call
        if ((long long)packed.size() < k * width) packed.resize(k * width);
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
    if (trans_a && add) product_all_rows<true, true>(a, lda, b, ldb, m, n, k, c, ldc, mask);
    else if (trans_a) product_all_rows<true, false>(a, lda, b, ldb, m, n, k, c, ldc, mask);
    else if (add) product_all_rows<false, true>(a, lda, b, ldb, m, n, k, c, ldc, mask);
    else product_all_rows<false, false>(a, lda, b, ldb, m, n, k, c, ldc, mask);
}

// How many floats a vector of the products holds (16 with AVX-512, else 8)
extern "C" __attribute__((visibility("default"))) int products_vector_width() { return VW; }

extern "C" __attribute__((visibility("default")))
void head_products(const float* a, const float* b, float* c, const long long* items,
                   long long m, long long n, long long k, int trans_a, int trans_b,
                   const long long* ld, const long long* sa, const long long* sb,
                   const long long* sc, int masked, long long off) {
    const bool summed = sc[2] == 0;
    pool::parallel_for(items[0] * items[1], 1, 1, [=](long long lo, long long hi) {
        for (long long ij = lo; ij < hi; ++ij) {
            const long long i = ij / items[1], j = ij % items[1];
            Mask mask = {masked, off, false};
            for (long long g = 0; g < items[2]; ++g) {
                const float* right = b + i * sb[0] + j * sb[1] + g * sb[2];
                if (masked == ON_LEFT && (g == 0 || sb[2] != 0))  // the kv head's values: once
                    mask.skip = !trans_b && all_finite(right, k, n, ld[1]);
                small_matmul(a + i * sa[0] + j * sa[1] + g * sa[2], right,
                             c + i * sc[0] + j * sc[1] + g * sc[2], m, n, k, trans_a, trans_b,
                             ld[0], ld[1], ld[2], summed && g, mask);
            }
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
