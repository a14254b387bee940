// Causal self-attention with an online softmax (flash-attention style) and grouped-query heads.
//
// q and o are (batch, n_heads, seq_len, head_dim), k and v are (batch, n_kv_heads, seq_len,
// head_dim), row-major float32. Query head h reads key/value head h / (n_heads / n_kv_heads)
// (grouped-query attention; n_kv_heads == n_heads is ordinary multi-head attention).
//
// Launch: grid (ceil(seq_len / B), n_heads, batch), block B threads, dynamic shared memory
// 2 * B * head_dim floats; head_dim <= MAX_HEAD_DIM. Thread t of block x owns query row
// i = x * B + t and keeps it and its output row in per-thread arrays (q_row, acc). They are
// indexed by a loop whose length is known only at run time, so they cannot be registers: they
// live in local memory (off-chip, cached; ptxas reports them as the stack frame). The block
// walks over the keys in tiles of B rows, staged in shared memory by all its threads together
// (coalesced loads, each key read from global memory once per block instead of once per query). For each key j, the
// thread updates a running maximum m, a running denominator l and the weighted sum acc:
//   m' = max(m, s_j),  l = l * exp(m - m') + exp(s_j - m'),  acc = acc * exp(m - m') + exp(s_j - m') v_j
// so the (seq_len x seq_len) score matrix is never stored. With causal != 0, query i sees keys
// j <= i only, and tiles after the block's last query are skipped altogether.
#define MAX_HEAD_DIM 128
#define NEG_INFINITY __int_as_float(0xff800000)  // NVRTC has no math.h, so no INFINITY

extern "C" __global__ void attention(const float* __restrict__ q, const float* __restrict__ k,
                                     const float* __restrict__ v, float* __restrict__ o,
                                     int n_heads, int n_kv_heads, int seq_len, int head_dim,
                                     float scale, int causal) {
    extern __shared__ float tiles[];
    float* k_tile = tiles;
    float* v_tile = tiles + blockDim.x * head_dim;
    int batch = blockIdx.z, head = blockIdx.y;
    int kv_head = head / (n_heads / n_kv_heads);
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    bool active = i < seq_len;  // inactive threads still help load tiles and reach barriers

    long long q_offset = (((long long)batch * n_heads + head) * seq_len + i) * head_dim;
    long long kv_offset = ((long long)batch * n_kv_heads + kv_head) * seq_len * head_dim;
    float q_row[MAX_HEAD_DIM], acc[MAX_HEAD_DIM];
    for (int d = 0; d < head_dim; ++d) {
        q_row[d] = active ? q[q_offset + d] * scale : 0.0f;
        acc[d] = 0.0f;
    }
    float m = NEG_INFINITY, l = 0.0f;

    int block_end = min(seq_len, (int)((blockIdx.x + 1) * blockDim.x));
    int key_end = causal ? block_end : seq_len;
    for (int start = 0; start < key_end; start += blockDim.x) {
        int count = min((int)blockDim.x, seq_len - start);
        for (int e = threadIdx.x; e < count * head_dim; e += blockDim.x) {
            k_tile[e] = k[kv_offset + (long long)start * head_dim + e];
            v_tile[e] = v[kv_offset + (long long)start * head_dim + e];
        }
        __syncthreads();
        int stop = active ? (causal ? min(count, i - start + 1) : count) : 0;
        for (int j = 0; j < stop; ++j) {
            float s = 0.0f;
            for (int d = 0; d < head_dim; ++d) {
                s += q_row[d] * k_tile[j * head_dim + d];
            }
            float m_new = fmaxf(m, s);
            float correction = expf(m - m_new);
            float p = expf(s - m_new);
            l = l * correction + p;
            for (int d = 0; d < head_dim; ++d) {
                acc[d] = acc[d] * correction + p * v_tile[j * head_dim + d];
            }
            m = m_new;
        }
        __syncthreads();  // the tiles are read by everyone before the next ones overwrite them
    }
    if (active) {
        for (int d = 0; d < head_dim; ++d) {
            o[q_offset + d] = acc[d] / l;
        }
    }
}
