// Block-wide reductions through shared memory, shared by the row kernels (softmax, RMSNorm).
//
// Every thread of the block calls block_reduce with its partial value and gets the block's
// total back. `scratch` holds blockDim.x floats; blockDim.x must be a power of two. The tree
// halves the number of active threads each step: log2(blockDim.x) steps, one barrier each.
#pragma once

// -infinity as a bit pattern (NVRTC compiles without math.h, so there is no INFINITY).
#define NEG_INFINITY __int_as_float(0xff800000)

struct SumOp {
    __device__ float operator()(float a, float b) const { return a + b; }
};

struct MaxOp {
    __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
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
