// Strided copy y[i] = x[i * stride], i < n: the same bytes out for every stride, but the reads
// of a warp spread over more memory as the stride grows. With stride 1 the 32 lanes read 32
// neighbouring floats (one 128-byte line, 4 sectors); with stride 8 or more every lane reads
// its own 32-byte sector, so the warp moves 8 times the bytes it uses.
//
// A grid-stride loop: thread t handles i = t, t + T, t + 2T, ... where T is the number of
// threads in the grid, so any grid (for instance a few blocks per SM) covers any n, as long
// as n + T stays below 2^31 (i is an int; the launcher refuses a launch past that).
extern "C" __global__ void copy_strided(const float* __restrict__ x, float* __restrict__ y,
                                        int n, int stride) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        y[i] = x[(long long)i * stride];
    }
}
