// Attention with an online softmax, tiled like FlashAttention, with grouped-query heads and an
// optional causal mask.
//
// q and o are (batch, n_heads, seq_len, head_dim), k and v are (batch, n_kv_heads, seq_len,
// head_dim), row-major float32. Query head h reads key/value head h / (n_heads / n_kv_heads)
// (grouped-query attention; n_kv_heads == n_heads is ordinary multi-head attention).
//
// A block of 256 threads (16 x 16) takes BR query rows of one head (BR = 64 when head_dim <= 64,
// else 32) and walks over the keys in tiles of BC = 32. Per tile, two small matrix products
// through shared memory, each thread holding a 4 x 2 (or 2 x 2) piece of S and a 4 x 4 (or
// 2 x 8) piece of O in registers:
//   S = Q K^T (scaled), then per row  m' = max(m, max_j S_j),  P_j = exp(S_j - m'),
//   l = l * exp(m - m') + sum_j P_j,  O = O * exp(m - m') + P V
// (FlashAttention's recurrence), so the (seq_len x seq_len) score matrix is never stored and
// K and V are read from global memory once per block of BR queries. The 16 threads of a row
// are 16 neighbouring lanes of a warp: row maxima go through warp shuffles, not shared memory.
// With causal != 0, query i sees keys j <= i only; tiles after the block's last query are
// skipped altogether.
//
// Launch: grid (ceil(seq_len / BR), n_heads, batch), block 256, dynamic shared memory
// (BR * (head_dim + 1) + head_dim * (BC + 1) + BR * (BC + 1)) floats; head_dim <= 128.
#define MAX_HEAD_DIM 128
#define BC 32                                     // keys per tile
#define NEG_INFINITY __int_as_float(0xff800000)  // NVRTC has no math.h, so no INFINITY

// The largest value among the 16 lanes of this half-warp (lanes that share a query row).
__device__ float row_max16(float value) {
    for (int offset = 8; offset > 0; offset /= 2) {
        value = fmaxf(value, __shfl_xor_sync(0xffffffffu, value, offset));
    }
    return value;
}

__device__ float row_sum16(float value) {
    for (int offset = 8; offset > 0; offset /= 2) {
        value += __shfl_xor_sync(0xffffffffu, value, offset);
    }
    return value;
}

// RM query rows and DN output columns per thread: rows ty + 16 i, columns tx + 16 c. HEAD_DIM
// is head_dim when the kernel is built for one size (64, 128: the loops over it unroll and the
// index divisions become shifts), 0 when it takes head_dim at run time.
template <int RM, int DN, int HEAD_DIM>
__device__ void attention_block(const float* __restrict__ q, const float* __restrict__ k,
                                const float* __restrict__ v, float* __restrict__ o,
                                float* shared, int n_heads, int n_kv_heads, int seq_len,
                                int runtime_head_dim, float scale, int causal) {
    const int head_dim = HEAD_DIM ? HEAD_DIM : runtime_head_dim;
    const int br = 16 * RM, ld = head_dim + 1;  // rows of Q_tile are padded: no bank conflicts
    float* q_tile = shared;                      // br x (head_dim + 1): scaled queries
    float* kv_tile = q_tile + br * ld;           // K^T: head_dim x (BC + 1), then V: BC x head_dim
    float* p_tile = kv_tile + head_dim * (BC + 1);  // br x (BC + 1): probabilities
    int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
    // Causal blocks of later queries walk more keys: they take the lowest block numbers, which
    // the GPU starts first, so the short blocks fill in behind them (no long tail at the end).
    int q_block = causal ? gridDim.x - 1 - blockIdx.x : blockIdx.x;
    int batch = blockIdx.z, head = blockIdx.y, q0 = q_block * br;
    int kv_head = head / (n_heads / n_kv_heads);
    const float* q_head = q + ((long long)batch * n_heads + head) * seq_len * head_dim;
    const float* k_head = k + ((long long)batch * n_kv_heads + kv_head) * seq_len * head_dim;
    const float* v_head = v + ((long long)batch * n_kv_heads + kv_head) * seq_len * head_dim;

    for (int e = threadIdx.x; e < br * head_dim; e += blockDim.x) {  // coalesced
        int r = e / head_dim, d = e % head_dim;
        q_tile[r * ld + d] = q0 + r < seq_len ? q_head[(long long)(q0 + r) * head_dim + d] * scale
                                              : 0.0f;
    }
    float acc[RM][DN] = {}, m[RM], l[RM];  // l: this thread's part of the row sums
#pragma unroll
    for (int i = 0; i < RM; ++i) {
        m[i] = NEG_INFINITY;
        l[i] = 0.0f;
    }
    int key_end = causal ? min(seq_len, q0 + br) : seq_len;
    for (int k0 = 0; k0 < key_end; k0 += BC) {
        __syncthreads();  // the previous tile's V and P are read (and Q_tile written)
        for (int e = threadIdx.x; e < BC * head_dim; e += blockDim.x) {
            int c = e / head_dim, d = e % head_dim;  // coalesced reads, transposed stores
            kv_tile[d * (BC + 1) + c] =
                k0 + c < seq_len ? k_head[(long long)(k0 + c) * head_dim + d] : 0.0f;
        }
        __syncthreads();
        float s[RM][2] = {};
#pragma unroll 16
        for (int d = 0; d < head_dim; ++d) {
            float kd[2] = {kv_tile[d * (BC + 1) + tx], kv_tile[d * (BC + 1) + tx + 16]};
#pragma unroll
            for (int i = 0; i < RM; ++i) {
                float qd = q_tile[(ty + 16 * i) * ld + d];
                s[i][0] += qd * kd[0];
                s[i][1] += qd * kd[1];
            }
        }
#pragma unroll
        for (int i = 0; i < RM; ++i) {
            int row = q0 + ty + 16 * i;
#pragma unroll
            for (int j = 0; j < 2; ++j) {
                int key = k0 + tx + 16 * j;
                if (key >= seq_len || (causal && key > row)) {
                    s[i][j] = NEG_INFINITY;
                }
            }
            float m_new = fmaxf(m[i], row_max16(fmaxf(s[i][0], s[i][1])));
            // exp(-inf) = 0; a row with no key yet (m_new = -inf) keeps its zeros
            float correction = m_new == NEG_INFINITY ? 1.0f : expf(m[i] - m_new);
#pragma unroll
            for (int j = 0; j < 2; ++j) {
                s[i][j] = s[i][j] == NEG_INFINITY ? 0.0f : expf(s[i][j] - m_new);
            }
            l[i] = l[i] * correction + s[i][0] + s[i][1];
#pragma unroll
            for (int c = 0; c < DN; ++c) {
                acc[i][c] *= correction;
            }
            m[i] = m_new;
        }
        __syncthreads();  // everyone is done with K^T
        for (int e = threadIdx.x; e < BC * head_dim; e += blockDim.x) {
            int c = e / head_dim, d = e % head_dim;
            kv_tile[c * head_dim + d] =
                k0 + c < seq_len ? v_head[(long long)(k0 + c) * head_dim + d] : 0.0f;
        }
#pragma unroll
        for (int i = 0; i < RM; ++i) {
            p_tile[(ty + 16 * i) * (BC + 1) + tx] = s[i][0];
            p_tile[(ty + 16 * i) * (BC + 1) + tx + 16] = s[i][1];
        }
        __syncthreads();
        for (int c = 0; c < BC; ++c) {
            float vc[DN];
#pragma unroll
            for (int n = 0; n < DN; ++n) {
                int d = tx + 16 * n;
                vc[n] = d < head_dim ? kv_tile[c * head_dim + d] : 0.0f;
            }
#pragma unroll
            for (int i = 0; i < RM; ++i) {
                float p = p_tile[(ty + 16 * i) * (BC + 1) + c];
#pragma unroll
                for (int n = 0; n < DN; ++n) {
                    acc[i][n] += p * vc[n];
                }
            }
        }
    }
#pragma unroll
    for (int i = 0; i < RM; ++i) {
        int row = q0 + ty + 16 * i;
        float total = row_sum16(l[i]);
#pragma unroll
        for (int n = 0; n < DN; ++n) {
            int d = tx + 16 * n;
            if (row < seq_len && d < head_dim) {
                o[((long long)batch * n_heads + head) * seq_len * head_dim +
                  (long long)row * head_dim + d] = acc[i][n] / total;
            }
        }
    }
}

// __launch_bounds__(256, 4): at most 64 registers a thread (88 without: two blocks an SM, 25 %
// occupancy), so four blocks of 256 threads fit an SM; NVRTC reports no spills at 64 for sm_80
// and sm_90.
extern "C" __global__ void __launch_bounds__(256, 4)
attention(const float* __restrict__ q, const float* __restrict__ k, const float* __restrict__ v,
          float* __restrict__ o, int n_heads, int n_kv_heads, int seq_len, int head_dim,
          float scale, int causal) {
    extern __shared__ float shared[];
    // The same branch for the whole grid: LLaMA's head sizes get their own builds.
    if (head_dim == 64) {
        attention_block<4, 4, 64>(q, k, v, o, shared, n_heads, n_kv_heads, seq_len, head_dim,
                                  scale, causal);
    } else if (head_dim < 64) {
        attention_block<4, 4, 0>(q, k, v, o, shared, n_heads, n_kv_heads, seq_len, head_dim,
                                 scale, causal);
    } else if (head_dim == 128) {
        attention_block<2, 8, 128>(q, k, v, o, shared, n_heads, n_kv_heads, seq_len, head_dim,
                                   scale, causal);
    } else {
        attention_block<2, 8, 0>(q, k, v, o, shared, n_heads, n_kv_heads, seq_len, head_dim,
                                 scale, causal);
    }
}
