// RMSNorm as in LLaMA: y = w * x / sqrt(mean(x^2) + eps), over the last axis of a (rows, cols)
// row-major float32 matrix, with a weight vector w of length cols.
//
// Like softmax.cu: one block per row (a multiple of 32 threads), the row read once into
// registers (row_registers.cuh: VALUES per thread, float4 loads when the row allows), the sum
// of squares combined with warp shuffles, the output written from the registers. Rows longer
// than blockDim.x * VALUES read the rest again.
#include "block_reduce.cuh"
#include "row_registers.cuh"

// The sum of x^2 over a row, for the whole block: the thread's registers v (the first `held`
// columns) and the columns beyond them, read again.
__device__ __forceinline__ float row_sum_of_squares(const float* __restrict__ x_row, int held,
                                                    int cols, const float (&v)[VALUES]) {
    float local = 0.0f;
#pragma unroll
    for (int c = 0; c < VALUES; ++c) {
        local += v[c] * v[c];
    }
    for (int j = held + threadIdx.x; j < cols; j += blockDim.x) {
        local += x_row[j] * x_row[j];
    }
    return block_reduce_shuffle(local, SumOp());
}

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
    float inv_rms = rsqrtf(row_sum_of_squares(x_row, held, cols, v) / cols + eps);

#pragma unroll
    for (int c = 0; c < VALUES; ++c) {
        v[c] = v[c] * inv_rms;
    }
    store_row(y_row, held, vectorised, w, v);
    for (int j = held + threadIdx.x; j < cols; j += blockDim.x) {
        y_row[j] = w[j] * (x_row[j] * inv_rms);
    }
}

// RMSNorm's input adjoint: out = r * (g*w - x * (sum(g*w*x) * r^2 / cols)), r = 1/sqrt(mean(x^2)
// + eps), over each row. x and g*w are held in registers: the row's two sums come from them,
// so g, x and w are each read once (three reads, one write per element).
extern "C" __global__ void __launch_bounds__(1024)
rms_norm_grad_x_rows(const float* __restrict__ g, const float* __restrict__ x,
                     const float* __restrict__ w, float* __restrict__ out, int rows, int cols,
                     float eps) {
    int row = blockIdx.x;
    if (row >= rows) {
        return;
    }
    const float* g_row = g + (long long)row * cols;
    const float* x_row = x + (long long)row * cols;
    float* out_row = out + (long long)row * cols;
    int held = min(cols, VALUES * (int)blockDim.x);
    bool vectorised = vectorisable(cols, g, x) && vectorisable(cols, out, out);  // w: one float

    float gw[VALUES], xv[VALUES];
    load_row(g_row, held, vectorised, 0.0f, gw);
    load_row(x_row, held, vectorised, 0.0f, xv);
    float local_squares = 0.0f, local_dot = 0.0f;
#pragma unroll
    for (int c = 0; c < VALUES; ++c) {
        int j = held_column(c, vectorised);
        gw[c] = j < held ? gw[c] * w[j] : 0.0f;
        local_squares += xv[c] * xv[c];
        local_dot += gw[c] * xv[c];
    }
    for (int j = held + threadIdx.x; j < cols; j += blockDim.x) {
        local_squares += x_row[j] * x_row[j];
        local_dot += g_row[j] * w[j] * x_row[j];
    }
    float r = 1.0f / sqrtf(block_reduce_shuffle(local_squares, SumOp()) / cols + eps);
    float dot = block_reduce_shuffle(local_dot, SumOp()) * (r * r / cols);

#pragma unroll
    for (int c = 0; c < VALUES; ++c) {
        gw[c] = (gw[c] - xv[c] * dot) * r;
    }
    store_row(out_row, held, vectorised, nullptr, gw);
    for (int j = held + threadIdx.x; j < cols; j += blockDim.x) {
        out_row[j] = (g_row[j] * w[j] - x_row[j] * dot) * r;
    }
}

// RMSNorm's weight adjoint, sum over rows of g * (x * r), is a sum down each column, which one
// block per row cannot make. Two kernels, then the launcher adds the partial sums:
// rms_norm_inv_rms_rows writes r = 1/sqrt(mean(x^2) + eps) of each row (one block per row, the
// row read once into registers); rms_norm_grad_w_columns gives block (bx, by) the columns
// bx * blockDim.x + threadIdx.x (neighbouring threads read neighbouring floats) and the rows of
// chunk by, and writes one partial sum per column: partial is (gridDim.y, cols).
extern "C" __global__ void __launch_bounds__(1024)
rms_norm_inv_rms_rows(const float* __restrict__ x, float* __restrict__ r, int rows, int cols,
                      float eps) {
    int row = blockIdx.x;
    if (row >= rows) {
        return;
    }
    const float* x_row = x + (long long)row * cols;
    int held = min(cols, VALUES * (int)blockDim.x);
    float v[VALUES];
    load_row(x_row, held, vectorisable(cols, x, x), 0.0f, v);
    float total = row_sum_of_squares(x_row, held, cols, v);
    if (threadIdx.x == 0) {
        r[row] = 1.0f / sqrtf(total / cols + eps);
    }
}

extern "C" __global__ void rms_norm_grad_w_columns(const float* __restrict__ g,
                                                   const float* __restrict__ x,
                                                   const float* __restrict__ r,
                                                   float* __restrict__ partial, int rows,
                                                   int cols, int chunk) {
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= cols) {
        return;
    }
    int first = blockIdx.y * chunk, last = min(rows, first + chunk);
    float total = 0.0f;
#pragma unroll 4
    for (int i = first; i < last; ++i) {
        long long k = (long long)i * cols + j;
        total += g[k] * (x[k] * r[i]);  // x * r first: the array code's x-hat
    }
    partial[(long long)blockIdx.y * cols + j] = total;
}
