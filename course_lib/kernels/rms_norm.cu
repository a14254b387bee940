// RMSNorm as in LLaMA: y = w * x / sqrt(mean(x^2) + eps), over the last axis of a (rows, cols)
// row-major float32 matrix, with a weight vector w of length cols. One block per row; launch
// with a power-of-two block size and blockDim.x floats of dynamic shared memory.
#include "block_reduce.cuh"

extern "C" __global__ void rms_norm_rows(const float* __restrict__ x, const float* __restrict__ w,
                                        float* __restrict__ y, int rows, int cols, float eps) {
    extern __shared__ float scratch[];
    int row = blockIdx.x;
    if (row >= rows) {
        return;
    }
    const float* x_row = x + (long long)row * cols;
    float* y_row = y + (long long)row * cols;

    float local = 0.0f;
    for (int j = threadIdx.x; j < cols; j += blockDim.x) {
        local += x_row[j] * x_row[j];
    }
    float inv_rms = rsqrtf(block_reduce(local, scratch, SumOp()) / cols + eps);

    for (int j = threadIdx.x; j < cols; j += blockDim.x) {
        y_row[j] = w[j] * (x_row[j] * inv_rms);
    }
}
