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
