// Block-wide reductions, shared by the row kernels (softmax, RMSNorm) and reduce.cu.
//
// Every thread of the block calls a reduction with its partial value and gets the block's
// total back. Two ways:
// - block_reduce: a tree through shared memory. `scratch` holds blockDim.x floats;
//   blockDim.x must be a power of two. The tree halves the number of active threads each
//   step: log2(blockDim.x) steps, one barrier each.
// - block_reduce_shuffle: warp shuffles. Each warp folds its 32 values in registers
//   (warp_reduce: 5 shuffles), one float per warp goes through shared memory, and every warp
//   folds those again: one barrier (two, so the call can be repeated). blockDim.x must be a
//   multiple of 32.
#pragma once

// -infinity as a bit pattern (NVRTC compiles without math.h, so there is no INFINITY).
#define NEG_INFINITY __int_as_float(0xff800000)

struct SumOp {
    __device__ float operator()(float a, float b) const { return a + b; }
    __device__ static float identity() { return 0.0f; }
};

struct MaxOp {
    __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
    __device__ static float identity() { return NEG_INFINITY; }
};

template <class Op>
__device__ float block_reduce(float value, float* scratch, Op op) {
    unsigned int tid = threadIdx.x;
    scratch[tid] = value;
    __syncthreads();
    for (unsigned int stride = blockDim.x / 2; stride > 0; stride /= 2) {
        if (tid < stride) {
            scratch[tid] = op(scratch[tid], scratch[tid + stride]);
        }
        __syncthreads();
    }
    float total = scratch[0];
    __syncthreads();  // everyone has read the total before scratch is reused
    return total;
}

// The butterfly: after shuffles with lanes 16, 8, 4, 2, 1 places away, every lane holds the
// warp's total, with no shared memory and no barrier.
template <class Op>
__device__ float warp_reduce(float value, Op op) {
    for (int offset = 16; offset > 0; offset /= 2) {
        value = op(value, __shfl_xor_sync(0xffffffffu, value, offset));
    }
    return value;
}

template <class Op>
__device__ float block_reduce_shuffle(float value, Op op) {
    __shared__ float warp_totals[32];
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    value = warp_reduce(value, op);
    if (warps == 1) {  // the same for the whole block
        return value;
    }
    if (lane == 0) {
        warp_totals[warp] = value;
    }
    __syncthreads();  // every warp's total is stored before anyone reads them
    value = warp_reduce(lane < warps ? warp_totals[lane] : Op::identity(), op);
    __syncthreads();  // everyone has read them before a next call overwrites them
    return value;
}
