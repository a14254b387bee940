// Sum of a float32 vector, two ways: a shared-memory tree and warp shuffles.
// Each block adds a grid-stride slice of x and writes its total to partial[blockIdx.x]; a
// second launch with one block adds the partials (course_lib.kernels.launch.reduce_sum).
#include "block_reduce.cuh"

// The tree of block_reduce.cuh: every thread stores its value in shared memory, then half the
// threads add pairs, ... log2(blockDim.x) steps, a barrier after each. Launch with a
// power-of-two block and blockDim.x floats of dynamic shared memory.
extern "C" __global__ void reduce_sum_tree(const float* __restrict__ x,
                                           float* __restrict__ partial, int n) {
    extern __shared__ float scratch[];
    float sum = 0.0f;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        sum += x[i];
    }
    float total = block_reduce(sum, scratch, SumOp());
    if (threadIdx.x == 0) {
        partial[blockIdx.x] = total;
    }
}

// Inside a warp, lanes read each other's registers: after 5 shuffles (offsets 16, 8, 4, 2, 1)
// lane 0 holds the warp's sum, with no shared memory and no barrier.
__device__ float warp_sum(float value) {
    for (int offset = 16; offset > 0; offset /= 2) {
        value += __shfl_down_sync(0xffffffffu, value, offset);
    }
    return value;
}

// Shuffles within each warp, one shared float per warp, one barrier, shuffles again in the
// first warp. Launch with a block that is a multiple of 32 threads (at most 1024).
extern "C" __global__ void reduce_sum_shuffle(const float* __restrict__ x,
                                              float* __restrict__ partial, int n) {
    __shared__ float warp_sums[32];
    float sum = 0.0f;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        sum += x[i];
    }
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    sum = warp_sum(sum);
    if (lane == 0) {
        warp_sums[warp] = sum;
    }
    __syncthreads();  // every warp's sum is stored before the first warp reads them
    if (warp == 0) {
        sum = warp_sum(lane < blockDim.x / 32 ? warp_sums[lane] : 0.0f);
        if (lane == 0) {
            partial[blockIdx.x] = sum;
        }
    }
}
