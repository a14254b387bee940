// Row softmax y = exp(x - max) / sum(exp(x - max)) of a (rows, cols) row-major float32 matrix.
//
// One block per row, blockDim.x a multiple of 32 (a single warp for rows up to 32 * VALUES).
// Each thread loads its VALUES elements of the row into registers, once (row_registers.cuh:
// float4 loads when the row allows): the maximum, the exponentials and the output are all
// computed from the registers, so the row crosses global memory once in each direction (one
// read, one write: the least any softmax can do). The block combines its partial maximum and
// sum with warp shuffles (block_reduce.cuh). Subtracting the maximum keeps every exponent
// <= 0, so nothing overflows for large logits. Rows longer than blockDim.x * VALUES (over
// 16,384 floats with 1024 threads) still work: the elements beyond the registers are read
// again from global memory.
#include "block_reduce.cuh"
#include "row_registers.cuh"

// __launch_bounds__(1024): at most 64 registers a thread, so a block of any size fits an SM
extern "C" __global__ void __launch_bounds__(1024)
softmax_rows(const float* __restrict__ x, float* __restrict__ y, int rows, int cols) {
    int row = blockIdx.x;  // the same for the whole block, so this return is uniform
    if (row >= rows) {
        return;
    }
    const float* x_row = x + (long long)row * cols;
    float* y_row = y + (long long)row * cols;
    int held = min(cols, VALUES * (int)blockDim.x);  // elements kept in registers
    bool vectorised = vectorisable(cols, x, y);

    float v[VALUES];
    load_row(x_row, held, vectorised, NEG_INFINITY, v);
    float local_max = NEG_INFINITY;
#pragma unroll
    for (int c = 0; c < VALUES; ++c) {
        local_max = fmaxf(local_max, v[c]);
    }
    for (int j = held + threadIdx.x; j < cols; j += blockDim.x) {
        local_max = fmaxf(local_max, x_row[j]);
    }
    float row_max = block_reduce_shuffle(local_max, MaxOp());

    float local_sum = 0.0f;
#pragma unroll
    for (int c = 0; c < VALUES; ++c) {
        v[c] = expf(v[c] - row_max);  // 0 for the padding (-inf)
        local_sum += v[c];
    }
    for (int j = held + threadIdx.x; j < cols; j += blockDim.x) {
        local_sum += expf(x_row[j] - row_max);
    }
    float row_sum = block_reduce_shuffle(local_sum, SumOp());

#pragma unroll
    for (int c = 0; c < VALUES; ++c) {
        v[c] = v[c] / row_sum;
    }
    store_row(y_row, held, vectorised, nullptr, v);
    for (int j = held + threadIdx.x; j < cols; j += blockDim.x) {
        y_row[j] = expf(x_row[j] - row_max) / row_sum;
    }
}

// The causal softmax of attention scores: softmax(scale * s + M) over each row of a (..., T, S)
// array, M[i, j] = -inf for keys j after query i (queries aligned with the last keys: query i
// sees keys j <= i + S - T). Row r is query r % T. The mask is *added*, as in the array code,
// so a NaN or +inf under it still makes its row NaN (a masked key is read, never skipped).

// scale * s, then the mask added. __fmul_rn rounds the product on its own: NVRTC would fuse
// it with the addition into one multiply-add, and a product that overflows to +inf under the
// mask would then give -inf instead of NumPy's inf + -inf = NaN.
__device__ __forceinline__ float masked_score(float s, float scale, bool masked) {
    return __fmul_rn(s, scale) + (masked ? NEG_INFINITY : 0.0f);
}

extern "C" __global__ void __launch_bounds__(1024)
causal_softmax_rows(const float* __restrict__ s, float* __restrict__ y, int rows, int queries,
                    int keys, float scale) {
    int row = blockIdx.x;
    if (row >= rows) {
        return;
    }
    const float* s_row = s + (long long)row * keys;
    float* y_row = y + (long long)row * keys;
    int last_key = row % queries + keys - queries;  // the last key this query sees
    int held = min(keys, VALUES * (int)blockDim.x);
    bool vectorised = vectorisable(keys, s, y);

    float v[VALUES];
    load_row(s_row, held, vectorised, NEG_INFINITY, v);
    float local_max = NEG_INFINITY;
#pragma unroll
    for (int c = 0; c < VALUES; ++c) {
        int j = held_column(c, vectorised);  // beyond `held`: padding, -inf whatever the scale
        v[c] = j >= held ? NEG_INFINITY : masked_score(v[c], scale, j > last_key);
        local_max = fmaxf(local_max, v[c]);
    }
    for (int j = held + threadIdx.x; j < keys; j += blockDim.x) {
        local_max = fmaxf(local_max, masked_score(s_row[j], scale, j > last_key));
    }
    float row_max = block_reduce_shuffle(local_max, MaxOp());

    float local_sum = 0.0f;
#pragma unroll
    for (int c = 0; c < VALUES; ++c) {
        v[c] = expf(v[c] - row_max);
        local_sum += v[c];
    }
    for (int j = held + threadIdx.x; j < keys; j += blockDim.x) {
        local_sum += expf(masked_score(s_row[j], scale, j > last_key) - row_max);
    }
    float row_sum = block_reduce_shuffle(local_sum, SumOp());

#pragma unroll
    for (int c = 0; c < VALUES; ++c) {
        v[c] = v[c] / row_sum;
    }
    store_row(y_row, held, vectorised, nullptr, v);
    for (int j = held + threadIdx.x; j < keys; j += blockDim.x) {
        y_row[j] = expf(masked_score(s_row[j], scale, j > last_key) - row_max) / row_sum;
    }
}

// The adjoint of a (scaled) softmax with output p: out = scale * p * (g - sum(g * p)) over each
// row, g and p both held in registers: two reads and one write per element.
extern "C" __global__ void __launch_bounds__(1024)
softmax_grad_rows(const float* __restrict__ g, const float* __restrict__ p,
                  float* __restrict__ out, int rows, int cols, float scale) {
    int row = blockIdx.x;
    if (row >= rows) {
        return;
    }
    const float* g_row = g + (long long)row * cols;
    const float* p_row = p + (long long)row * cols;
    float* out_row = out + (long long)row * cols;
    int held = min(cols, VALUES * (int)blockDim.x);
    bool vectorised = vectorisable(cols, g, p) && vectorisable(cols, out, out);

    float gv[VALUES], pv[VALUES];
    load_row(g_row, held, vectorised, 0.0f, gv);
    load_row(p_row, held, vectorised, 0.0f, pv);
    float local = 0.0f;
#pragma unroll
    for (int c = 0; c < VALUES; ++c) {
        local += gv[c] * pv[c];
    }
    for (int j = held + threadIdx.x; j < cols; j += blockDim.x) {
        local += g_row[j] * p_row[j];
    }
    float dot = block_reduce_shuffle(local, SumOp());

#pragma unroll
    for (int c = 0; c < VALUES; ++c) {
        gv[c] = (gv[c] - dot) * pv[c] * scale;
    }
    store_row(out_row, held, vectorised, nullptr, gv);
    for (int j = held + threadIdx.x; j < cols; j += blockDim.x) {
        out_row[j] = (g_row[j] - dot) * p_row[j] * scale;
    }
}
