// Row softmax y = exp(x - max) / sum(exp(x - max)) of a (rows, cols) row-major float32 matrix.
// One block per row; launch with a power-of-two block size and blockDim.x floats of dynamic
// shared memory. Three passes over the row: the maximum, the sum of exponentials, the output.
// Subtracting the maximum keeps every exponent <= 0, so nothing overflows for large logits.
#include "block_reduce.cuh"

extern "C" __global__ void softmax_rows(const float* __restrict__ x, float* __restrict__ y,
                                        int rows, int cols) {
    extern __shared__ float scratch[];
    int row = blockIdx.x;  // the same for the whole block, so this return is uniform
    if (row >= rows) {
        return;
    }
    const float* x_row = x + (long long)row * cols;
    float* y_row = y + (long long)row * cols;

    float local_max = NEG_INFINITY;
    for (int j = threadIdx.x; j < cols; j += blockDim.x) {  // strided: coalesced reads
        local_max = fmaxf(local_max, x_row[j]);
    }
    float row_max = block_reduce(local_max, scratch, MaxOp());

    float local_sum = 0.0f;
    for (int j = threadIdx.x; j < cols; j += blockDim.x) {
        local_sum += expf(x_row[j] - row_max);
    }
    float row_sum = block_reduce(local_sum, scratch, SumOp());

    for (int j = threadIdx.x; j < cols; j += blockDim.x) {
        y_row[j] = expf(x_row[j] - row_max) / row_sum;
    }
}
