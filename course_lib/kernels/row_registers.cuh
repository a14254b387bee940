// A row of a (rows, cols) row-major float32 matrix held in registers, for the row kernels
// (softmax.cu, rms_norm.cu): one block per row, VALUES elements a thread.
//
// With float4 loads ("vectorised": cols a multiple of 4 and the arrays 16-byte aligned, which
// CuPy's allocations are), thread t holds the four floats of 16-byte chunks t, t + blockDim.x,
// t + 2 blockDim.x, ...: a warp's loads are 512 contiguous bytes, and a thread issues a quarter
// of the load instructions. Otherwise thread t holds floats t, t + blockDim.x, ... Either way
// neighbouring lanes read neighbouring memory, and every load is issued before any value is
// used (a load used at once makes each thread wait a memory round trip per element: 0.33 of a
// copy's bandwidth on an H200). The loops are unrolled with no early exit, so v[c] has a fixed
// index: a register, not local memory.
#pragma once

#define VALUES 16  // row elements a thread keeps in registers (a multiple of 4)

// Whether a row kernel may use float4 loads and stores on these arrays (the same answer for
// every thread: a uniform branch).
__device__ __forceinline__ bool vectorisable(int cols, const void* a, const void* b) {
    return cols % 4 == 0 && ((unsigned long long)a | (unsigned long long)b) % 16 == 0;
}

// The column of this thread's register v[c].
__device__ __forceinline__ int held_column(int c, bool vectorised) {
    return vectorised ? 4 * (threadIdx.x + (c / 4) * blockDim.x) + c % 4
                      : threadIdx.x + c * blockDim.x;
}

// v[c] = row[held_column(c)] for the first `held` columns, `pad` beyond them.
__device__ __forceinline__ void load_row(const float* __restrict__ row, int held,
                                         bool vectorised, float pad, float (&v)[VALUES]) {
    if (vectorised) {
#pragma unroll
        for (int c = 0; c < VALUES; c += 4) {
            int chunk = threadIdx.x + (c / 4) * blockDim.x;
            float4 f = 4 * chunk < held ? reinterpret_cast<const float4*>(row)[chunk]
                                        : make_float4(pad, pad, pad, pad);
            v[c] = f.x;
            v[c + 1] = f.y;
            v[c + 2] = f.z;
            v[c + 3] = f.w;
        }
    } else {
#pragma unroll
        for (int c = 0; c < VALUES; ++c) {
            int j = threadIdx.x + c * blockDim.x;
            v[c] = j < held ? row[j] : pad;
        }
    }
}

// row[j] = weight[j] * v[c] (weight null: v[c]) for the first `held` columns.
__device__ __forceinline__ void store_row(float* __restrict__ row, int held, bool vectorised,
                                          const float* __restrict__ weight,
                                          const float (&v)[VALUES]) {
    if (vectorised) {
#pragma unroll
        for (int c = 0; c < VALUES; c += 4) {
            int chunk = threadIdx.x + (c / 4) * blockDim.x;
            if (4 * chunk < held) {
                float4 w = weight ? reinterpret_cast<const float4*>(weight)[chunk]
                                  : make_float4(1.0f, 1.0f, 1.0f, 1.0f);
                reinterpret_cast<float4*>(row)[chunk] =
                    weight ? make_float4(w.x * v[c], w.y * v[c + 1], w.z * v[c + 2],
                                         w.w * v[c + 3])
                           : make_float4(v[c], v[c + 1], v[c + 2], v[c + 3]);
            }
        }
    } else {
#pragma unroll
        for (int c = 0; c < VALUES; ++c) {
            int j = threadIdx.x + c * blockDim.x;
            if (j < held) {
                row[j] = weight ? weight[j] * v[c] : v[c];
            }
        }
    }
}
