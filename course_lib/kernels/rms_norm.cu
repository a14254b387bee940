// RMSNorm as in LLaMA: y = w * x / sqrt(mean(x^2) + eps), over the last axis of a (rows, cols)
// row-major float32 matrix, with a weight vector w of length cols.
//
// Like softmax.cu: one block per row (a multiple of 32 threads), the row read once into
// registers (row_registers.cuh: VALUES per thread, float4 loads when the row allows), the sum
// of squares combined with warp shuffles, the output written from the registers. Rows longer
// than blockDim.x * VALUES read the rest again.
#include "block_reduce.cuh"
#include "row_registers.cuh"

// __launch_bounds__(1024): at most 64 registers a thread, so a block of any size fits an SM
extern "C" __global__ void __launch_bounds__(1024)
rms_norm_rows(const float* __restrict__ x, const float* __restrict__ w, float* __restrict__ y,
              int rows, int cols, float eps) {
    int row = blockIdx.x;
    if (row >= rows) {
        return;
    }
    const float* x_row = x + (long long)row * cols;
    float* y_row = y + (long long)row * cols;
    int held = min(cols, VALUES * (int)blockDim.x);
    bool vectorised = vectorisable(cols, x, y) && vectorisable(cols, w, w);

    float v[VALUES];
    load_row(x_row, held, vectorised, 0.0f, v);
    float local = 0.0f;
#pragma unroll
    for (int c = 0; c < VALUES; ++c) {
        local += v[c] * v[c];
    }
    for (int j = held + threadIdx.x; j < cols; j += blockDim.x) {
        local += x_row[j] * x_row[j];
    }
    float inv_rms = rsqrtf(block_reduce_shuffle(local, SumOp()) / cols + eps);

#pragma unroll
    for (int c = 0; c < VALUES; ++c) {
        v[c] = v[c] * inv_rms;
    }
    store_row(y_row, held, vectorised, w, v);
    for (int j = held + threadIdx.x; j < cols; j += blockDim.x) {
        y_row[j] = w[j] * (x_row[j] * inv_rms);
    }
}
